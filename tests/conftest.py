"""Fixtures that start the real docsrv server on a free loopback port: in this process (``demo``),
or as a separate ``docsrv serve`` process where a process is the point (``start_server``)."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "snapshots" / "demo"

#: The tests make and remove hundreds of thousands of files, links and fsyncs, each a journaled
#: change on a disk and a fraction of that in memory: their temporary files (and those of the
#: processes they start) go to the memory file system when it has room, unless TMPDIR says where.
#: Those of a test that passed are removed as it ends (``tmp_path_retention_policy``).
#: What the servers they start leave there (the index a server builds for a read-only snapshot,
#: ``search.location``; the run directory of a master killed by a test) is in a directory of the
#: test process's own (``SESSION_TEMPORARY``, TMPDIR for it and what it starts), removed as the
#: session ends; ``tmp_path`` stays where pytest keeps it, with its retention.
MEMORY_FILESYSTEM = Path("/dev/shm")
MEMORY_NEEDED = 8 << 30
if "TMPDIR" not in os.environ and os.access(MEMORY_FILESYSTEM, os.W_OK | os.X_OK) \
        and shutil.disk_usage(MEMORY_FILESYSTEM).free >= MEMORY_NEEDED:
    os.environ["TMPDIR"] = str(MEMORY_FILESYSTEM)
    tempfile.tempdir = None  # found again from TMPDIR
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())  # pytest's tmp_path: not removed with the session's
SESSION_TEMPORARY = Path(tempfile.mkdtemp(prefix="docsrv-tests-"))  # of an xdist worker: inside its controller's
SESSION_TEMPORARY.chmod(0o711)  # passed through, not listed, by the database the tests run as its own user (source_db.py)
os.environ["TMPDIR"] = str(SESSION_TEMPORARY)
tempfile.tempdir = None


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(SESSION_TEMPORARY, ignore_errors=True)


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes
    _json: object = field(default=None, repr=False)

    def json(self):
        if self._json is None:
            assert self.headers["Content-Type"] == "application/json", self.headers["Content-Type"]
            self._json = json.loads(self.body)
        return self._json


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Client:
    """A small HTTP client for a server on ``127.0.0.1:port``: one connection a request."""

    port: int

    def request(self, path: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> Response:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, headers=headers or {})
            response = connection.getresponse()
            return Response(response.status, response.headers, response.read())
        finally:
            connection.close()

    def get(self, path: str, **kwargs) -> Response:
        return self.request(path, **kwargs)

    def json(self, path: str, status: int = 200):
        response = self.get(path)
        assert response.status == status, (path, response.status, response.body[:300])
        return response.json()

    def kept_alive(self) -> KeptAlive:
        """A client of the same server whose requests share one connection, as an edge cache's
        do: for a crawl of a server of one worker (with several, a connection stays with one)."""
        return KeptAlive(self.port)


class KeptAlive(Client):
    """Requests on one kept-alive connection (a new one when the server closed it between two)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._connection: http.client.HTTPConnection | None = None

    def request(self, path: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> Response:
        while True:
            reused = self._connection is not None
            if self._connection is None:
                self._connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                self._connection.request(method, path, headers=headers or {})
                response = self._connection.getresponse()
                body = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if reused:
                    continue  # closed by the server while idle: once more on a new connection
                raise
            if response.will_close:
                self.close()
            return Response(response.status, response.headers, body)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> KeptAlive:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class InProcessServer(Client):
    """The real server (``helpers.running_server``: the dispatcher, the fast lane, the
    reply cache) over a snapshot, on an event loop of its own in a thread of this process."""

    def __init__(self, snapshot: Path, settings=None) -> None:
        from helpers import running_server

        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._ready = threading.Event()
        self._failed: BaseException | None = None

        async def serve() -> None:
            try:
                async with running_server(snapshot, settings) as base:
                    self.base = base
                    self.port = int(base.rsplit(":", 1)[1])
                    self._ready.set()
                    await self._stop.wait()
            except BaseException as error:
                self._failed = error
                self._ready.set()

        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(serve(),), daemon=True)
        self._thread.start()
        self._ready.wait(60)
        if self._failed is not None:
            raise self._failed

    def stop(self) -> None:
        with suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        self._loop.close()


class Server(Client):
    """A running ``docsrv serve`` process, and a client for it."""

    def __init__(
        self, args: list[str], env: dict[str, str] | None = None, preexec_fn=None, port: int | None = None, cwd: Path = ROOT,
        prefix: list[str] | None = None,
    ) -> None:
        """``prefix``: an argv that runs the server (``confined.py``)."""
        # A free port is probed, then given to the server: another test's process may take it in
        # between, so a probed port that is taken by then is probed again.
        attempts = 5 if port is None else 1
        for attempt in range(1, attempts + 1):
            self.port = port or free_port()
            self.base = f"http://127.0.0.1:{self.port}"
            self.process = subprocess.Popen(
                [*(prefix or []), sys.executable, "-m", "docsrv", "serve", "--host", "127.0.0.1", "--port", str(self.port), *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=cwd,
                preexec_fn=preexec_fn,
            )
            self.log: list[str] = []
            self._reader = threading.Thread(target=self._read_output, daemon=True)
            self._reader.start()
            try:
                self.wait_for("serving snapshot")
                return
            except AssertionError:
                if attempt == attempts or not any("cannot listen" in line for line in self.log):
                    self.kill()  # a server that never served fails its test, and leaves no process behind
                    raise

    def _read_output(self) -> None:
        """Keep reading the server's output, so that it never blocks on a full pipe."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line.decode(errors="replace"))

    def wait_for(self, text: str, timeout: float = 60.0, start: int = 0) -> str:
        """The first line of output from line ``start`` on that holds ``text``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log[start:]:
                if text in line:
                    return line
            if self.process.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"server exited ({self.process.returncode}):\n" + "".join(self.log))
            time.sleep(0.02)
        raise AssertionError(f"no {text!r} within {timeout} s:\n" + "".join(self.log))

    def stop(self) -> int:
        self.process.terminate()
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()  # a server that does not stop fails its test, and leaves no process behind
            raise
        self._reader.join(timeout=5)
        return code

    def kill(self) -> None:
        """SIGKILL the master and its workers."""
        pid = self.process.pid
        try:
            workers = [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            workers = []
        for each in (pid, *workers):
            with suppress(ProcessLookupError):
                os.kill(each, signal.SIGKILL)
        self.process.wait()


@pytest.fixture(scope="session")
def demo():
    """The bundled demo snapshot, served in this process with links built from each request's host."""
    server = InProcessServer(DEMO)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def demo_state():
    """The demo snapshot's serving state, loaded in this process (no server)."""
    from docsrv.api.state import ApiState
    from docsrv.config import Settings
    from docsrv.observe.runtime import Runtime
    from docsrv.serve.served import load_served

    served = load_served(DEMO, progress=False)
    return ApiState(served.store, served.search, Settings(), Runtime())


@pytest.fixture
def start_server():
    """Start servers with any arguments; every one is stopped after the test."""
    started: list[Server] = []

    def start(*args: str, env: dict[str, str] | None = None, preexec_fn=None, cwd: Path = ROOT, prefix: list[str] | None = None) -> Server:
        server = Server(list(args), env, preexec_fn, cwd=cwd, prefix=prefix)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.stop()


def records(kind: str, snapshot: Path = DEMO) -> list[dict]:
    """The raw records of one kind, read with the json module: the tests' own view of a snapshot."""
    with open(snapshot / f"{kind}.jsonl", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


@pytest.fixture(scope="session")
def raw():
    """Every demo record, by kind and id."""
    return {kind: {r["id"]: r for r in records(kind)} for kind in ("users", "projects", "versions", "builds", "build_commands", "pages")}


@pytest.fixture(scope="session")
def public(raw):
    from expected import Public

    return Public(raw)


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """docsrv installed as the image installs it (``pip install .``, not editable: no source tree
    beside it), in a directory anyone may read; its dependencies are this environment's. Run it
    with ``PYTHONPATH`` set to it and a working directory outside the repository."""
    import shutil
    import tempfile

    source = tmp_path_factory.mktemp("source")  # what the Dockerfile copies, built apart from the checkout
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "docsrv", source / "docsrv", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(DEMO, source / "snapshots" / "demo", ignore=shutil.ignore_patterns("index", ".docsrv-*"))
    target = Path(tempfile.mkdtemp(prefix="docsrv-installed-"))
    target.chmod(0o755)
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                             "--target", str(target), str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield target
    shutil.rmtree(target, ignore_errors=True)


@pytest.fixture
def hostile():
    """Make HTTP endpoints that misbehave on purpose (``hostile_http.py``); closed after the test."""
    from hostile_http import Hostile

    made: list[Hostile] = []

    def make(behaviour, argument=None) -> Hostile:
        made.append(Hostile(behaviour, argument))
        return made[-1]

    yield make
    for server in made:
        server.close()


@pytest.fixture
def outside():
    """A directory off a confined process's read-only root and not under its /tmp
    (``confined.py``); the test is skipped where such a process cannot run."""
    import shutil
    import tempfile

    from confined import available

    why = available()
    if why is not None:
        pytest.skip(why)
    made = Path(tempfile.mkdtemp(prefix="docsrv-confined-", dir="/var/tmp"))
    yield made
    shutil.rmtree(made, ignore_errors=True)
