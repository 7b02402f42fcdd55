"""What several test modules share: clients that speak raw HTTP, snapshots made for a test, a
client that hammers a server, polling for a condition (tests never sleep a fixed time), and a
real server inside the test's own process."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote

import msgspec

from conftest import DEMO, ROOT


def docsrv(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """The command line, run to its end."""
    return subprocess.run([sys.executable, "-m", "docsrv", *args], capture_output=True, text=True, cwd=ROOT, timeout=300, **kwargs)


def fresh_get(port, path, headers=None):
    """A request on a new connection (Connection: close), as a load balancer's health check makes."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers={"Connection": "close", **(headers or {})})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def raw_request(port: int, request: bytes) -> tuple[int, dict, bytes] | None:
    """Send bytes as they are, and read the whole answer (the connection is closed after it).

    None when the server closed the connection without answering: right only when the bytes
    held no request at all (empty lines before a request line are to be ignored).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    if not data:
        assert not request.strip(), request
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


def make_snapshot(directory, name, project_name):
    """A copy of the demo snapshot with its own name and its first project renamed."""
    shutil.copytree(DEMO, directory, ignore=shutil.ignore_patterns("index"))
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["name"] = name
    (directory / "manifest.json").write_text(json.dumps(manifest))
    lines = (directory / "projects.jsonl").read_text().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["name"] = project_name
    lines[0] = json.dumps(first) + "\n"
    (directory / "projects.jsonl").write_text("".join(lines))
    return directory


class Hammer(threading.Thread):
    """Requests the first project over and over on fresh connections, recording every answer."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.results = []
        self.failures = []
        self.running = True

    def run(self):
        while self.running:
            try:
                status, headers, body = fresh_get(self.port, "/api/v2/project/1/")
                self.results.append((time.monotonic(), status, headers["X-Snapshot"], json.loads(body)["name"]))
            except Exception as error:
                self.failures.append(repr(error))


def point(link: Path, target: Path) -> None:
    """Point a `current` link at ``target`` in one step, as a deploy swaps it."""
    swap = link.with_name(link.name + ".new")
    swap.unlink(missing_ok=True)
    swap.symlink_to(target)
    os.replace(swap, link)


def watched_under_load(start_server, first: Path, link: Path, interval: str) -> tuple:
    """A two-worker server watching ``link`` (pointed at ``first``), and a Hammer on it."""
    point(link, first)
    server = start_server("--snapshot", str(link), "--watch", "--watch-interval", interval, "--workers", "2")
    hammer = Hammer(server.port)
    hammer.start()
    return server, hammer


def sealed(directory: Path, name: str, project_name: str | None = None, *, edit=None) -> Path:
    """A demo snapshot written by docsrv (its manifest seals every file), renamed, and changed."""
    from docsrv.snapshot.records import Manifest
    from docsrv.snapshot.write import write_manifest

    assert docsrv("snapshot", "synth", "--scale", "demo", "--out", str(directory)).returncode == 0
    if project_name is not None:
        lines = (directory / "projects.jsonl").read_text().splitlines(keepends=True)
        first = json.loads(lines[0])
        first["name"] = project_name
        lines[0] = json.dumps(first) + "\n"
        (directory / "projects.jsonl").write_text("".join(lines))
    if edit is not None:
        edit(directory)
    manifest = msgspec.json.decode((directory / "manifest.json").read_bytes(), type=Manifest)
    write_manifest(directory, msgspec.structs.replace(manifest, name=name))
    return directory


def children(pid: int, name: str = "docsrv-worker") -> list[int]:
    """The child processes of ``pid`` named ``name`` (the master's workers, by default; its
    generations are "docsrv-snapshot")."""
    try:
        found = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    named = []
    for child in found:
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == name:
                named.append(child)
        except OSError:
            continue
    return named


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def poll(condition, timeout: float = 30.0, what="condition"):
    """``condition()`` once it is true; ``what`` (or what it returns) names it if it never is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"no {what() if callable(what) else what} within {timeout} s")


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def edit_line(path, number, change):
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[number - 1] = change(lines[number - 1])
    path.write_text("".join(lines), encoding="utf-8")


def edit_record(path, number, **fields):
    def change(line):
        record = json.loads(line)
        record.update(fields)
        return json.dumps(record, ensure_ascii=False) + "\n"

    edit_line(path, number, change)


def add_relationships(snapshot: Path, relationships: list[dict]) -> None:
    """A relationships.jsonl (the optional kind) with its count in the manifest."""
    (snapshot / "relationships.jsonl").write_text("".join(json.dumps(r) + "\n" for r in relationships))
    manifest = json.loads((snapshot / "manifest.json").read_text())
    manifest["counts"]["relationships"] = len(relationships)
    (snapshot / "manifest.json").write_text(json.dumps(manifest))


BROKEN = {
    "subproject that does not exist": (
        lambda s: add_relationships(s, [{"id": 1, "parent": 1, "child": 2}, {"id": 2, "parent": 1, "child": 404}]),
        "relationships.jsonl:2: relationship 2 names child project 404, which does not exist",
    ),
    "project its own subproject": (
        lambda s: add_relationships(s, [{"id": 1, "parent": 3, "child": 3}]),
        "relationships.jsonl:1: relationship 1 makes project 3 its own subproject",
    ),
    "invalid JSON": (lambda s: edit_line(s / "versions.jsonl", 5, lambda line: line[:-10] + "\n"), "versions.jsonl:5: invalid JSON"),
    "wrong type": (lambda s: edit_record(s / "projects.jsonl", 3, id="three"), "projects.jsonl:3: Expected `int`, got `str` - at `$.id`"),
    "naive datetime": (lambda s: edit_record(s / "builds.jsonl", 2, date="2023-01-01T00:00:00"), "builds.jsonl:2:"),
    "unknown field": (lambda s: edit_record(s / "users.jsonl", 4, pasword="x"), "users.jsonl:4: Object contains unknown field `pasword` (written by a newer docsrv? upgrade docsrv to read it)"),
    "bad enum": (lambda s: edit_record(s / "builds.jsonl", 7, state="exploded"), "builds.jsonl:7: Invalid enum value 'exploded'"),
    "duplicate id": (lambda s: edit_record(s / "versions.jsonl", 9, id=1), "versions.jsonl:9: duplicate id 1 (first on line 1)"),
    "duplicate slug": (lambda s: edit_record(s / "projects.jsonl", 2, slug="pip"), "projects.jsonl:2: duplicate project slug 'pip' (first on line 1)"),
    "missing project": (lambda s: edit_record(s / "versions.jsonl", 3, project=404), "versions.jsonl:3: version 3 names project 404, which does not exist"),
    "missing user": (lambda s: edit_record(s / "projects.jsonl", 1, users=[2, 77]), "projects.jsonl:1: project 1 names user 77"),
    "build of another project's version": (lambda s: edit_record(s / "builds.jsonl", 1, project=2), "builds.jsonl:1: build 101 names project 2, but its version"),
    "command of a missing build": (lambda s: edit_record(s / "build_commands.jsonl", 10, build=1), "build_commands.jsonl:10: command"),
    "commands of a build apart": (
        lambda s: (s / "build_commands.jsonl").write_text(
            "".join((lines := (s / "build_commands.jsonl").read_text().splitlines(keepends=True))[1:]) + lines[0]
        ),
        "build_commands.jsonl:687: command 1001 of build 101 is not next to the other commands of that build",
    ),
    "command ending before it starts": (
        lambda s: edit_record(s / "build_commands.jsonl", 4, end_time="2000-01-01T00:00:00Z"),
        "build_commands.jsonl:4: command 1004 ends before it starts",
    ),
    "blank line": (lambda s: edit_line(s / "users.jsonl", 2, lambda line: line + "\n"), "users.jsonl:3: blank line"),
    "truncated file": (lambda s: (s / "builds.jsonl").write_bytes((s / "builds.jsonl").read_bytes()[:-300]), "builds.jsonl:"),
    "count mismatch": (lambda s: edit_line(s / "users.jsonl", 12, lambda line: ""), "users.jsonl: holds 11 records but manifest.json counts 12"),
    "missing file": (lambda s: (s / "pages.jsonl").unlink(), "pages.jsonl: missing"),
    "missing manifest": (lambda s: (s / "manifest.json").unlink(), "manifest.json: cannot be read"),
    "manifest not JSON": (lambda s: (s / "manifest.json").write_text('{\n  "format": "docsrv-snapshot",\n  oops\n}'), "manifest.json:3: invalid JSON"),
    "wrong format version": (
        lambda s: (s / "manifest.json").write_text((s / "manifest.json").read_text().replace('"format_version": 1', '"format_version": 7')),
        "manifest.json: format_version 7 is newer than this docsrv reads (1): upgrade docsrv to read it",
    ),
    "10 MB line": (lambda s: edit_record(s / "pages.jsonl", 2, text="x" * (10 << 20)), "pages.jsonl:2: line is longer than 4 MiB"),
}


class Origin:
    """A real HTTP server on a loopback port serving the files of a directory, as a static origin,
    CDN or object store does (ETag, conditional requests, byte ranges), with faults on demand:
    ``faults[name]`` is "404", "short" (a truncated file, consistently framed), "corrupt" (the same
    size, other bytes), "drop" (the connection closed half way through the body), "close" (the
    connection closed before any answer), "drip" (a byte every 0.2 s), "slow" (the whole answer
    after a second, as a loaded origin's), "loop" (a redirect to itself) or "file" (a redirect to a
    file:// URL)."""

    def __init__(self, root: Path) -> None:
        import asyncio

        from aiohttp import web

        self.root = root
        self.faults: dict[str, str] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        app = web.Application()
        app.router.add_get("/snapshot/{name:.+}", self.serve)
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/snapshot"
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def serve(self, request):
        import asyncio
        import hashlib

        from aiohttp import web

        name = request.match_info["name"]
        self.requests.append((name, dict(request.headers)))
        path = self.root / name
        fault = self.faults.get(name)
        if fault == "close":
            request.transport.close()
            return web.Response()
        if fault == "loop":
            raise web.HTTPFound(str(request.url))
        if fault == "file":
            raise web.HTTPFound("file:///etc/passwd")
        if fault == "404" or not path.is_file():
            return web.json_response({"detail": "Not found."}, status=404)
        if fault == "slow":
            await asyncio.sleep(1)
            fault = None
        data = path.read_bytes()
        etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
        if request.headers.get("If-None-Match") == etag and fault is None:
            return web.Response(status=304, headers={"ETag": etag})
        if fault == "short":
            data = data[: len(data) // 2]
        elif fault == "corrupt":
            data = bytes(b ^ 1 for b in data)
        start = 0
        wanted = request.headers.get("Range", "")
        if wanted.startswith("bytes=") and wanted.endswith("-") and fault is None:
            start = int(wanted[6:-1])
        response = web.StreamResponse(status=206 if start else 200, headers={"ETag": etag})
        response.content_length = len(data) - start
        await response.prepare(request)
        if fault == "drop":  # half the body arrives, then the origin goes away
            await response.write(data[: len(data) // 2])
            await asyncio.sleep(0.3)
            request.transport.close()
            return response
        if fault == "drip":  # far too slow to finish: the pull gives up on it
            for byte in data[start:]:
                await response.write(bytes([byte]))
                await asyncio.sleep(0.2)
        await response.write(data[start:])
        await response.write_eof()
        return response

    def publish(self, snapshot: Path) -> None:
        """Put a snapshot on the origin: its record files and its index first, its manifest last."""
        self.root.mkdir(parents=True, exist_ok=True)
        for path in sorted(snapshot.glob("*.jsonl*")):
            shutil.copyfile(path, self.root / path.name)
        if (snapshot / "index").is_dir():
            shutil.copytree(snapshot / "index", self.root / "index", dirs_exist_ok=True)
        shutil.copyfile(snapshot / "manifest.json", self.root / "manifest.json")

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()


@asynccontextmanager
async def running_server(snapshot: str | Path, settings=None) -> AsyncIterator[str]:
    """A real server (the dispatcher, the fast lane, the same handlers a worker runs) inside this
    process, on a free loopback port for the duration of the block; yields its base URL."""
    from docsrv.api.state import ApiState
    from docsrv.config import Settings
    from docsrv.observe.runtime import Runtime
    from docsrv.serve.served import load_served
    from docsrv.serve.worker import listening_socket, start

    served = load_served(snapshot, progress=False)
    state = ApiState(served.store, served.search, settings or Settings(), Runtime())
    sock = listening_socket("127.0.0.1", 0)
    listening = await start(state, sock)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await listening.close(grace=0)
        sock.close()


def example_request(template: str, operation: dict) -> str:
    """The request that an operation's parameter examples make."""
    path = template
    pairs = []
    for parameter in operation["parameters"]:
        if "example" not in parameter:
            continue
        if parameter["in"] == "path":
            path = path.replace("{" + parameter["name"] + "}", str(parameter["example"]))
        else:
            pairs.append(f"{parameter['name']}={quote(str(parameter['example']))}")
    return path + ("?" + "&".join(pairs) if pairs else "")


def binary_paths(directory: Path) -> list[Path]:
    """The served records' MessagePack files of a snapshot, one a kind."""
    from docsrv.snapshot.binary import BINARY_KINDS, binary_path

    return [binary_path(directory, kind) for kind in BINARY_KINDS]
