"""docsrv against the systems people use instead, side by side, in one run.

    python bench/run.py [--scale small] [--duration 3] [--runs 3] [--systems ...] [--endpoints ...]

Every system serves the same data from the same snapshot, pinned to one core while wrk runs
on the other, through a Lua script that rotates through real URLs of each endpoint class with
a realistic skew (most requests go to the popular projects). All systems run at once; after a
warm-up, each class is measured in rounds, one run of every system a round, so that a shared
machine's drifting speed falls on all of them alike. The median and the spread are reported,
with the ratio of docsrv to each peer. The run installs what it needs (wrk and nginx from Debian's packages, the peers in
their own virtual environment under bench/scratch/) and stops everything it starts.

Results: bench/results/<date>-<scale>.md and .json, and a PNG chart of requests per second.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "scratch"
RESULTS = HERE / "results"
PEERS_VENV = WORK / "venv-peers"
PEER_PACKAGES = ["datasette", "django", "djangorestframework", "django-filter", "gunicorn", "matplotlib"]

CLASSES = {
    "project_detail": "v2 project detail",
    "version_list": "v2 filtered version list page",
    "deep_offset": "v2 deep offset page",
    "active_versions": "active_versions",
    "build_detail": "build detail with commands",
    "v1_project": "v1 project by slug",
    "v1_list": "v1 list",
    "docsearch": "docsearch",
    "revalidate": "304 revalidation",
}
SYSTEMS = ("docsrv", "docsrv-aiohttp", "nginx", "nginx-tuned", "bare", "ceiling", "datasette", "drf")
SYSTEM_NAMES = {
    "docsrv": "docsrv (1 worker)",
    "docsrv-aiohttp": "docsrv without its fast lane (--no-fast-path)",
    "nginx": "nginx, static files (1 worker)",
    "nginx-tuned": "nginx, static files, open_file_cache and sendfile as its docs advise (1 worker)",
    "bare": "the limit: uvloop Protocol + httptools, docsrv's exact bytes by target",
    "ceiling": "minimal aiohttp, pre-encoded bodies",
    "datasette": "Datasette, SQLite immutable",
    "drf": "Django REST framework, gunicorn, SQLite",
}
URLS_PER_CLASS = 200


# Set-up: tools, peers, data.


def ensure_tools() -> None:
    missing = [name for name, package in (("wrk", "wrk"), ("nginx", "nginx-light")) if shutil.which(name) is None]
    if missing:
        packages = {"wrk": "wrk", "nginx": "nginx-light"}
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "install", "-y", "-qq", *(packages[m] for m in missing)], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def ensure_peers() -> None:
    if not (PEERS_VENV / "bin" / "gunicorn").exists() or not (PEERS_VENV / "bin" / "datasette").exists():
        WORK.mkdir(exist_ok=True)
        run([sys.executable, "-m", "venv", str(PEERS_VENV)])
        run([str(PEERS_VENV / "bin" / "pip"), "install", "-q", *PEER_PACKAGES])


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=True, **kwargs)


def snapshot_path(scale: str, seed: int) -> Path:
    if scale == "demo":
        return ROOT / "snapshots" / "demo"
    path = WORK / f"synth-{scale}-{seed}"
    if not (path / "manifest.json").exists():
        WORK.mkdir(exist_ok=True)
        run([sys.executable, "-m", "docsrv", "snapshot", "synth", "--out", str(path), "--scale", scale, "--seed", str(seed)])
    return path


def sqlite_path(snapshot: Path) -> Path:
    path = WORK / f"{snapshot.name}" / "snapshot.sqlite"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        run([sys.executable, str(HERE / "peers" / "export_sqlite.py"), str(snapshot), str(path)])
    return path


# The URLs of each endpoint class, with the skew of real traffic.


@dataclass
class Workload:
    """For each class, the items requested (in skewed order), and each system's URL for an item."""

    items: dict[str, list[tuple]] = field(default_factory=dict)

    @staticmethod
    def sample(snapshot: Path, seed: int) -> Workload:
        from docsrv.store.loaded import load_store

        store = load_store(snapshot, progress=False)
        rng = random.Random(seed)
        projects = store.projects_ordered
        weights = [len(store.builds_of_project.get(p.id, ())) + 1 for p in projects]
        popular = rng.choices(projects, weights=weights, k=URLS_PER_CLASS)
        builds = store.builds_ordered
        with_versions = [p for p in popular if store.versions_of_project.get(p.id)]
        items = {
            "project_detail": [(p.id,) for p in popular],
            "version_list": [(p.slug, rng.choice((0, 10, 20))) for p in with_versions],
            "deep_offset": [(rng.randrange(len(builds) // 2, max(len(builds) - 10, len(builds) // 2 + 1)),) for _ in popular],
            "active_versions": [(p.id,) for p in popular],
            "build_detail": [(rng.choice(store.builds_of_project[p.id]).id,) for p in popular if store.builds_of_project.get(p.id)],
            "v1_project": [(p.slug,) for p in popular],
            "v1_list": [(rng.randrange(0, max(len(store.versions_ordered) // 20, 1)) * 20,) for _ in popular],
            "revalidate": [(p.id,) for p in popular],
        }
        pages = [page for page in (rng.choice(store.pages_ordered) for _ in range(URLS_PER_CLASS))] if store.pages_ordered else []
        items["docsearch"] = [
            (store.projects[pg.project].slug, store.versions[pg.version].slug, " ".join(pg.title.split()[:2]).lower() or "docs")
            for pg in pages
        ]
        return Workload(items)

    def url(self, system: str, kind: str, item: tuple, index: int) -> str | None:
        if system in ("nginx", "nginx-tuned", "ceiling"):
            return None if (system == "ceiling" and kind == "revalidate") else f"/r/{kind}/{index}.json"
        if system == "datasette":
            return datasette_url(kind, item)
        if system == "drf" and kind == "docsearch":
            return None
        return docsrv_url(kind, item)


def docsrv_url(kind: str, item: tuple) -> str:
    return {
        "project_detail": lambda i: f"/api/v2/project/{i[0]}/",
        "version_list": lambda i: f"/api/v2/version/?project__slug={i[0]}&limit=10&offset={i[1]}",
        "deep_offset": lambda i: f"/api/v2/build/?limit=10&offset={i[0]}",
        "active_versions": lambda i: f"/api/v2/project/{i[0]}/active_versions/",
        "build_detail": lambda i: f"/api/v2/build/{i[0]}/",
        "v1_project": lambda i: f"/api/v1/project/{i[0]}/",
        "v1_list": lambda i: f"/api/v1/version/?limit=20&offset={i[0]}",
        "docsearch": lambda i: f"/api/v2/docsearch/?project={i[0]}&version={quote(i[1])}&q={quote(i[2])}",
        "revalidate": lambda i: f"/api/v2/project/{i[0]}/",
    }[kind](item)


def datasette_url(kind: str, item: tuple) -> str | None:
    """The nearest Datasette URL: table and row views, and canned queries where a view has none."""
    return {
        "project_detail": lambda i: f"/snapshot/projects/{i[0]}.json?_shape=object",
        "version_list": lambda i: f"/snapshot/version_page.json?slug={i[0]}&limit=10&offset={i[1]}&_shape=objects",
        "deep_offset": lambda i: f"/snapshot/build_page.json?limit=10&offset={i[0]}&_shape=objects",
        "active_versions": lambda i: f"/snapshot/active_versions.json?project={i[0]}&_shape=objects",
        "build_detail": lambda i: f"/snapshot/build_detail.json?id={i[0]}&_shape=objects",
        "v1_project": lambda i: f"/snapshot/projects.json?slug={i[0]}&_shape=objects&_nocount=1&_nofacet=1",
        "v1_list": lambda i: "/snapshot/versions.json?_size=20&_shape=objects&_nocount=1&_nofacet=1",
        "docsearch": lambda i: None,
        "revalidate": lambda i: None,
    }[kind](item)


# Running systems.


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pinned(command: list[str], core: int) -> list[str]:
    return ["taskset", "-c", str(core), *command] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else command


class System:
    """A peer or docsrv, started for real on a free port, and stopped with its whole process group."""

    def __init__(self, name: str, command: list[str], port: int, *, env: dict | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.port = port
        self.process = subprocess.Popen(
            pinned(command, 1), env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=open(WORK / f"{name}.log", "wb"),  # noqa: SIM115
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited at start; see {WORK / (name + '.log')}")
            if self.ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} was not ready within 180 s")

    def ready(self) -> bool:
        """Whether it answers: docsrv once /readyz says 200 (its master answers 503 on the port
        while the snapshot loads), a peer once it accepts connections."""
        if self.name.startswith("docsrv"):
            return self.get("/readyz")[0] == 200 if self.accepts() else False
        return self.accepts()

    def accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def get(self, path: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)


def start(name: str, snapshot: Path, database: Path, bodies: Path, cache_mb: int = 1024) -> System:
    port = free_port()
    if name in ("docsrv", "docsrv-aiohttp"):
        return System(name, [sys.executable, "-m", "docsrv", "serve", "--snapshot", str(snapshot), "--port", str(port), "--workers", "1",
                             "--response-cache-mb", str(cache_mb), *(["--no-fast-path"] if name == "docsrv-aiohttp" else [])], port)
    if name == "ceiling":
        return System(name, [sys.executable, str(HERE / "peers" / "ceiling.py"), str(port), str(bodies)], port)
    if name == "bare":
        return System(name, [sys.executable, str(HERE / "peers" / "bare.py"), str(port), str(bodies / "responses.json")], port)
    if name in ("nginx", "nginx-tuned"):
        prefix = WORK / name
        prefix.mkdir(exist_ok=True)
        # As nginx's documentation advises for static files: descriptors and metadata of open
        # files cached (open_file_cache), sendfile, and full packets (tcp_nopush, tcp_nodelay).
        tuned = ("  open_file_cache max=1000 inactive=60s;\n  open_file_cache_valid 60s;\n  open_file_cache_min_uses 1;\n"
                 "  open_file_cache_errors on;\n  sendfile on;\n  tcp_nopush on;\n  tcp_nodelay on;\n"
                 "  keepalive_requests 100000;\n") if name == "nginx-tuned" else ""
        (prefix / "nginx.conf").write_text(
            f"user root;\nworker_processes 1;\ndaemon off;\npid {prefix}/nginx.pid;\nerror_log stderr;\n"
            "events { worker_connections 4096; }\n"
            "http {\n  access_log off;\n  default_type application/json;\n" + tuned +
            f"  client_body_temp_path {prefix}/tmp;\n  proxy_temp_path {prefix}/tmp;\n  fastcgi_temp_path {prefix}/tmp;\n"
            f"  uwsgi_temp_path {prefix}/tmp;\n  scgi_temp_path {prefix}/tmp;\n"
            f"  server {{ listen 127.0.0.1:{port}; root {bodies}; location / {{ try_files $uri =404; }} }}\n}}\n"
        )
        (prefix / "tmp").mkdir(exist_ok=True)
        return System(name, ["nginx", "-p", str(prefix), "-c", str(prefix / "nginx.conf")], port)
    if name == "datasette":
        return System(name, [str(PEERS_VENV / "bin" / "datasette"), "serve", "--immutable", str(database), "--port", str(port),
                             "--metadata", str(HERE / "peers" / "datasette-metadata.json"), "--setting", "suggest_facets", "off"], port)
    if name == "drf":
        return System(name, [str(PEERS_VENV / "bin" / "gunicorn"), "-w", "1", "-b", f"127.0.0.1:{port}", "drfsite.wsgi"], port,
                      env={"BENCH_SQLITE": str(database)}, cwd=HERE / "peers")
    raise ValueError(name)


def raw_response(port: int, target: str, headers: dict[str, str] | None = None) -> str:
    """docsrv's whole response to a GET of ``target`` as wrk sends it (Host, and the headers
    given), head and body, byte for byte as Latin-1 text: what the bare peer sends back."""
    head = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall((head + "\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        found = re.search(rb"(?i)\r\ncontent-length: *(\d+)", data)
        length = int(found.group(1)) if found else 0  # a 304 has no body
        end = data.index(b"\r\n\r\n") + 4 + length
        while len(data) < end:
            data += sock.recv(65536)
    return data[:end].decode("latin-1")


# Load with wrk.


def wrk(system: System, paths_file: Path, seconds: float, connections: int, *, threads: int = 1) -> dict:
    command = pinned(["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s", "--latency",
                      "-s", str(HERE / "wrk-rotate.lua"), f"http://127.0.0.1:{system.port}"], 0)
    out = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "BENCH_PATHS": str(paths_file)}, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    latency = {p: to_ms(v, u) for p, v, u in re.findall(r"^\s*(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)}
    most = re.search(r"^\s*Latency\s+\S+\s+\S+\s+([\d.]+)(us|ms|s|m)", out, re.M)
    non_2xx = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    socket_errors = dict(zip(("connect", "read", "write", "timeout"), map(int, sockets.groups()), strict=True)) if sockets else {}
    return {"rps": rps, "p50_ms": latency.get("50"), "p99_ms": latency.get("99"), "max_ms": to_ms(*most.groups()) if most else None,
            "errors": non_2xx + sum(socket_errors.values()),
            "non_2xx": non_2xx, "socket_errors": socket_errors}


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def to_ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def summary(runs: list[dict]) -> dict:
    """The median of several wrk runs of one system on one class, with their spread; latency of the median run."""
    rps = [r["rps"] for r in runs]
    middle = sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]
    return {
        "rps": statistics.median(rps),
        "rps_min": min(rps),
        "rps_max": max(rps),
        "p50_ms": middle["p50_ms"],
        "p99_ms": middle["p99_ms"],
        "errors": sum(r["errors"] for r in runs),
        "runs": runs,
    }


def interleaved(systems: dict[str, System], paths: dict[str, Path], args) -> dict[str, dict]:
    """Each system warmed up, then measured in rounds: one run of every system a round, the order
    turning each round, so that every system meets the machine's changing speed alike (a shared
    machine's speed drifts by a third over minutes; ratios of runs taken apart drift with it)."""
    for name, paths_file in paths.items():
        wrk(systems[name], paths_file, args.warmup, args.connections)
    order = list(paths)
    runs: dict[str, list[dict]] = {name: [] for name in order}
    for round_ in range(args.runs):
        turn = round_ % len(order)
        for name in order[turn:] + order[:turn]:
            runs[name].append(wrk(systems[name], paths[name], args.duration, args.connections))
    return {name: summary(measured) for name, measured in runs.items()}


# Memory and start-up.


def pss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total += int(re.search(r"^Pss:\s+(\d+) kB", text, re.M).group(1))
    return total


def tree(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(p for child in children for p in tree(int(child)))]


def memory(snapshot: Path, workload: Workload) -> dict:
    """Load time and peak RSS of a load, and the PSS that each extra worker adds."""
    load = json.loads(subprocess.run([sys.executable, str(HERE / "load.py"), "--path", str(snapshot)], capture_output=True,
                                     text=True, check=True).stdout.splitlines()[-1])
    totals = {}
    for workers in (1, 3):
        port = free_port()
        system = System(f"docsrv-{workers}w", [sys.executable, "-m", "docsrv", "serve", "--snapshot", str(snapshot), "--port",
                                              str(port), "--workers", str(workers)], port)
        try:
            time.sleep(1.0)
            for kind, items in workload.items.items():
                for item in items[:50]:
                    system.get(docsrv_url(kind, item))
            totals[workers] = pss_kb(tree(system.process.pid))
        finally:
            system.stop()
    return {
        "load_seconds": round(load["load_seconds"], 2),
        "peak_rss_mb": round(load["peak_rss_mb"]),
        "pss_1_worker_mb": round(totals[1] / 1024),
        "pss_3_workers_mb": round(totals[3] / 1024),
        "pss_per_extra_worker_mb": round((totals[3] - totals[1]) / 2 / 1024),
    }


# Reports.


def report(results: dict, path: Path) -> None:
    cells = results["cells"]
    lines = [
        f"# docsrv benchmark, {results['date']}, scale {results['scale']}",
        "",
        f"Snapshot `{results['snapshot']}` ({results['counts']}). Server pinned to one core, "
        f"`wrk -t1 -c{results['connections']}` on the other; after a {results['warmup']} s warm-up, {results['runs']} rounds "
        f"of one {results['duration']} s run of each system in turn (the order turning each round); median requests per "
        "second (min-max), and p50/p99 latency of the median run."
        + (f" Every request carried `Origin: {results['origin']}`." if results.get("origin") else ""),
        "",
        "| endpoint class | " + " | ".join(SYSTEM_NAMES[s] for s in results["systems"]) + " |",
        "|---|" + "---|" * len(results["systems"]),
    ]
    for kind in results["classes"]:
        row = [CLASSES[kind]]
        for system in results["systems"]:
            cell = cells.get(system, {}).get(kind)
            row.append("-" if cell is None else f"{cell['rps']:,.0f} ({cell['rps_min']:,.0f}-{cell['rps_max']:,.0f}); "
                       f"{ms(cell['p50_ms'])}/{ms(cell['p99_ms'])}" + (f"; {cell['errors']} errors" if cell["errors"] else ""))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## docsrv as a ratio of each peer (requests per second, same run)", "",
              "| endpoint class | " + " | ".join(SYSTEM_NAMES[s] for s in results["systems"] if s != "docsrv") + " |",
              "|---|" + "---|" * (len(results["systems"]) - 1)]
    for kind in results["classes"]:
        mine = cells.get("docsrv", {}).get(kind)
        row = [CLASSES[kind]]
        for system in results["systems"]:
            if system == "docsrv":
                continue
            theirs = cells.get(system, {}).get(kind)
            row.append("-" if not (mine and theirs and theirs["rps"]) else f"{mine['rps'] / theirs['rps']:.2f}")
        lines.append("| " + " | ".join(row) + " |")
    if results.get("memory"):
        m = results["memory"]
        lines += ["", "## Memory and start-up", "",
                  f"Load {m['load_seconds']} s, peak RSS {m['peak_rss_mb']} MB; PSS with 1 worker {m['pss_1_worker_mb']} MB, "
                  f"with 3 workers {m['pss_3_workers_mb']} MB: **{m['pss_per_extra_worker_mb']} MB per extra worker**."]
    lines += ["", "## Targets", ""] + [f"- {line}" for line in targets(results)]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")
    path.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")


def targets(results: dict) -> list[str]:
    cells = results["cells"]
    mine = cells.get("docsrv", {})
    out = []

    def ratio(kind: str, peer: str) -> float | None:
        theirs = cells.get(peer, {}).get(kind)
        return mine[kind]["rps"] / theirs["rps"] if kind in mine and theirs and theirs["rps"] else None

    # The fast lane's targets: cached replies near the limit (issue 36), and at nginx's own rate.
    for kind, goal in (("project_detail", 0.8), ("version_list", 0.8), ("docsearch", 0.75), ("revalidate", 0.75)):
        r = ratio(kind, "bare")
        if r is not None:
            out.append(f"{CLASSES[kind]} at {r:.2f} of the bare protocol (target {goal:.2f}): {'met' if r >= goal else 'missed'}")
    for kind, goal in (("project_detail", 1.0), ("version_list", 1.0)):
        r = ratio(kind, "nginx")
        if r is not None:
            out.append(f"{CLASSES[kind]} at {r:.2f} of nginx (target {goal:.2f}): {'met' if r >= goal else 'missed'}")
    for peer, goal in (("datasette", 20), ("drf", 40)):
        shared = [k for k in results["classes"] if ratio(k, peer) is not None]
        if shared:
            worst = min(shared, key=lambda k: ratio(k, peer))
            out.append(f"at least {goal}x {SYSTEM_NAMES[peer]} on every shared class: lowest {ratio(worst, peer):.1f}x "
                       f"({CLASSES[worst]}): {'met' if ratio(worst, peer) >= goal else 'missed'}")
    bare = cells.get("bare", {})
    late = [k for k in mine if k in bare and (mine[k]["p99_ms"] or 0) > (bare[k]["p99_ms"] or 0) + 1]
    if bare:
        out.append(f"p99 at {results['connections']} connections no higher than the bare protocol's plus 1 ms, on every class: "
                   + ("met" if not late else "missed on " + ", ".join(CLASSES[k] for k in late)))
    slow = [k for k in ("project_detail", "version_list") if k in mine and (mine[k]["p99_ms"] or 0) >= 2]
    out.append(f"p99 under 2 ms at {results['connections']} connections for cached details and version lists: "
               + ("met" if not slow else "missed on " + ", ".join(CLASSES[k] for k in slow)))
    lane = [k for k in results["classes"] if ratio(k, "docsrv-aiohttp") is not None]
    if lane:
        worst = min(lane, key=lambda k: ratio(k, "docsrv-aiohttp"))
        out.append(f"the fast lane no slower than aiohttp alone on any class: lowest {ratio(worst, 'docsrv-aiohttp'):.2f}x "
                   f"({CLASSES[worst]}): {'met' if ratio(worst, 'docsrv-aiohttp') >= 1 else 'missed'}")
    return out


def chart(results: dict, path: Path) -> None:
    python = PEERS_VENV / "bin" / "python"
    script = f"""
import json, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
results = json.load(open({str(path.with_suffix('.json'))!r}))
classes, systems = results["classes"], results["systems"]
width = 0.8 / len(systems)
fig, ax = plt.subplots(figsize=(13, 6))
for n, system in enumerate(systems):
    values = [results["cells"].get(system, {{}}).get(k, {{}}).get("rps", 0) for k in classes]
    ax.bar([i + n * width for i in range(len(classes))], values, width, label=system)
ax.set_yscale("log")
ax.set_ylabel("requests per second (log)")
ax.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(classes))], classes, rotation=25, ha="right")
ax.set_title("docsrv and its peers, " + results["date"] + ", scale " + results["scale"])
ax.legend()
fig.tight_layout()
fig.savefig({str(path.with_suffix('.png'))!r}, dpi=110)
"""
    run([str(python), "-c", script])


def class_paths(system: System, kind: str, workload: Workload, etags: dict[str, dict[int, str]]) -> Path | None:
    """The file of URLs (with the entity tags to revalidate) that wrk rotates through for one system
    and endpoint class, or None when the system has no equivalent or does not answer it."""
    paths = []
    for index, item in enumerate(workload.items[kind]):
        url = workload.url(system.name, kind, item, index)
        if url is None:
            return None
        tag = ""
        if kind == "revalidate":
            tag = etags.get(system.name, {}).get(index) or system.get(url)[1].get("ETag", "")
            if not tag:
                return None
            etags.setdefault(system.name, {})[index] = tag
        paths.append(f"{url}\t{tag}" if tag else url)
    if not paths:
        return None
    paths_file = WORK / f"paths-{system.name}-{kind}.txt"
    paths_file.write_text("\n".join(paths) + "\n")
    status = system.get(paths[0].split("\t")[0])[0]
    if status not in (200, 304):
        print(f"{system.name} {kind}: {paths[0]} answers {status}; skipped", file=sys.stderr)
        return None
    return paths_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="small", choices=["demo", "small", "medium", "large"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds of each measured run")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--endpoints", nargs="+", default=list(CLASSES), choices=list(CLASSES))
    parser.add_argument("--memory", action="store_true", help="also measure load time, peak RSS and PSS per worker")
    parser.add_argument("--cache-mb", type=int, default=1024,
                        help="docsrv's reply cache while measured; 0 makes every request a miss (the fast lane's cost on misses)")
    parser.add_argument("--origin", default=None,
                        help="an Origin header on every measured request (a docs origin, e.g. https://docs.example.org: "
                             "docsrv answers it with the origin echoed, as to the hosted docs' in-page search)")
    parser.add_argument("--out", type=Path, default=None, help="results path without suffix")
    args = parser.parse_args()
    if args.origin:
        os.environ["BENCH_ORIGIN"] = args.origin  # read by wrk-rotate.lua

    ensure_tools()
    if {"datasette", "drf"} & set(args.systems):
        ensure_peers()
    snapshot = snapshot_path(args.scale, args.seed)
    database = sqlite_path(snapshot) if {"datasette", "drf"} & set(args.systems) else snapshot
    workload = Workload.sample(snapshot, args.seed)
    bodies = WORK / f"{snapshot.name}" / "bodies"
    date = dt.date.today().isoformat()
    out = args.out or RESULTS / f"{date}-{args.scale}"
    RESULTS.mkdir(exist_ok=True)

    docsrv = start("docsrv", snapshot, database, bodies)
    etags: dict[str, dict[int, str]] = {"docsrv": {}, "nginx": {}, "drf": {}}
    try:
        shutil.rmtree(bodies, ignore_errors=True)
        responses: dict[str, str] = {}
        for kind, items in workload.items.items():
            (bodies / "r" / kind).mkdir(parents=True, exist_ok=True)
            for index, item in enumerate(items):
                url = docsrv_url(kind, item)
                _status, headers, body = docsrv.get(url)
                (bodies / "r" / kind / f"{index}.json").write_bytes(body)
                if kind == "revalidate":
                    etags["docsrv"][index] = headers.get("ETag", "")
                    responses[url + "\t304"] = raw_response(docsrv.port, url, {"If-None-Match": headers.get("ETag", "")})
                else:
                    responses[url] = raw_response(docsrv.port, url)
        (bodies / "responses.json").write_text(json.dumps(responses), encoding="latin-1")
        counts = docsrv.get("/readyz")[2].decode()
    finally:
        docsrv.stop()

    cells: dict[str, dict[str, dict]] = {}
    systems: dict[str, System] = {}
    try:
        for name in args.systems:
            systems[name] = start(name, snapshot, database, bodies, args.cache_mb)
        for kind in args.endpoints:
            paths = {}
            for name, system in systems.items():
                paths_file = class_paths(system, kind, workload, etags)
                if paths_file is not None:
                    paths[name] = paths_file
            for name, cell in interleaved(systems, paths, args).items():
                cells.setdefault(name, {})[kind] = cell
                print(f"{name:10} {kind:16} {cell['rps']:>10,.0f} req/s  p99 {ms(cell['p99_ms'])}", flush=True)
    finally:
        for system in systems.values():
            system.stop()

    results = {
        "date": date, "scale": args.scale, "snapshot": snapshot.name, "counts": json.loads(counts)["counts"],
        "duration": args.duration, "warmup": args.warmup, "runs": args.runs, "connections": args.connections,
        "systems": args.systems, "classes": args.endpoints, "cells": cells, "origin": args.origin,
        "memory": memory(snapshot, workload) if args.memory else None,
    }
    report(results, out)
    ensure_peers()  # the chart is drawn with their matplotlib
    chart(results, out)
    print(f"wrote {out}.md, .json and .png")


if __name__ == "__main__":
    main()
