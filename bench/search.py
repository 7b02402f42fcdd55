"""Search on real documentation: the Python 3.11 docs (Debian's python3.11-doc), and a synthetic snapshot.

    python bench/search.py [--scale medium] [--duration 10] [--corpus python-docs]

For each corpus: import time (Python docs), index time and size, docsearch latency p50/p99
and requests per second under load (wrk, one worker pinned to one core) at 10 and at 50
connections, and whether searches stall the event loop: the p99 of cheap requests measured
alone, and again while a second load runs searches beside them. A closed loop of N
connections on one worker queues N requests, so latency grows with N at the same throughput:
10 connections already keep the worker busy. By default every search is cold (no reply
cache); `--cache-mb 256` measures a worker as it runs, repeated queries answered from its cache,
and `--log --cache-mb 256` runs a query log as users make one: 5,000 distinct queries, a few
asked often and most rarely (Zipf), so the cache answers the popular ones and the long tail is
searched cold.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import WORK, System, ensure_tools, free_port, pinned, snapshot_path, wrk

PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")
QUERIES = ["asyncio", "dictionary comprehension", "context manager", "os.path", "subprocess run timeout", '"keyword argument"',
           "generator expression", "unicode", "f-string format", "import system", "threading lock", "exception", "socket",
           "json decode", "dataclass field", "typing protocol", "regular expression", "pathlib glob", "list sort key", "decorator"]


#: The loads searches run under: a worker kept busy, and the 50 connections of the first measurements.
CONNECTIONS = (10, 50)
#: The query log of --log: how many searches, over how many distinct queries.
LOG_LENGTH = 200_000
LOG_DISTINCT = 5_000


def python_docs_snapshot() -> Path:
    """A snapshot holding one project, python/3.11, with the pages of the Python documentation."""
    return sphinx_snapshot("python-docs", PYTHON_DOCS, "python3.11-doc", "python", "3.11")


def sphinx_snapshot(name: str, html: Path, package: str, project: str, version: str) -> Path:
    """A snapshot ``name`` under the bench's work directory holding one project's version with the
    pages of a Sphinx build that a Debian package installs (installed when missing)."""
    if not html.is_dir():
        subprocess.run(["apt-get", "install", "-y", "-qq", package], check=True)
    path = WORK / name
    if (path / "manifest.json").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    records = {
        "users": [{"id": 1, "username": "docs"}],
        "projects": [{"id": 1, "name": project.capitalize(), "slug": project, "pub_date": "2023-01-01T00:00:00Z",
                      "modified_date": "2023-06-01T00:00:00Z", "users": [1], "default_version": version}],
        "versions": [{"id": 1, "project": 1, "slug": version, "verbose_name": version, "active": True, "built": True}],
        "builds": [], "build_commands": [], "pages": [],
    }
    for kind, items in records.items():
        (path / f"{kind}.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    (path / "manifest.json").write_text(json.dumps({
        "format": "docsrv-snapshot", "format_version": 1, "name": name, "created_at": "2023-06-01T00:00:00Z",
        "public_url": "https://docs.example.org", "counts": {k: len(v) for k, v in records.items()}}))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "docsrv", "snapshot", "import-sphinx", str(html), "--into", str(path),
                    "--project", project, "--version", version], check=True)
    print(f"import of {html}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


def index(snapshot: Path) -> dict:
    shutil.rmtree(snapshot / "index", ignore_errors=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "docsrv", "index", str(snapshot)], check=True, capture_output=True)
    seconds = time.perf_counter() - started
    size = sum(p.stat().st_size for p in (snapshot / "index").rglob("*") if p.is_file())
    return {"index_seconds": round(seconds, 1), "index_mb": round(size / 2**20, 1)}


def search_paths(snapshot: Path, rng: random.Random, log: bool) -> list[str]:
    """The searches to run: a fixed set (the Python docs' 20 queries, or 200 pairs of page words),
    or with ``log`` a query log: LOG_LENGTH searches over LOG_DISTINCT queries (section headings,
    or pairs of page words) drawn with Zipf weights, the most asked first, as search logs are."""
    from docsrv.store.loaded import load_store

    store = load_store(snapshot, progress=False)
    pages = store.pages_ordered
    if store.name == "python-docs" and not log:
        return [f"/api/v2/docsearch/?project=python&version=3.11&q={quote(q)}" for q in QUERIES]
    paths: dict[str, None] = {}
    while len(paths) < (LOG_DISTINCT if log else 200):
        page = rng.choice(pages)
        project, version = store.projects[page.project].slug, store.versions[page.version].slug
        if store.name == "python-docs" and page.sections:
            query = rng.choice(page.sections).title.lower().strip()
        else:
            words = page.text.split()[:40]
            query = " ".join(rng.sample(words, min(2, len(words)))).strip(".,").lower().strip()
        if not query:
            continue
        paths[f"/api/v2/docsearch/?project={project}&version={quote(version)}&q={quote(query)}"] = None
    if not log:
        return list(paths)
    return rng.choices(list(paths), weights=[1 / rank for rank in range(1, len(paths) + 1)], k=LOG_LENGTH)


def measure(snapshot: Path, args) -> dict:
    rng = random.Random(1)
    result = index(snapshot)
    port = free_port()
    system = System("docsrv-search", [sys.executable, "-m", "docsrv", "serve", "--snapshot", str(snapshot), "--port", str(port),
                                      "--workers", "1", "--response-cache-mb", str(args.cache_mb),
                                      *(["--no-fast-path"] if args.no_fast_path else [])], port)
    try:
        searches = WORK / "paths-search.txt"
        searches.write_text("\n".join(search_paths(snapshot, rng, args.log)) + "\n")
        details = WORK / "paths-detail.txt"
        details.write_text("/healthz\n")
        alone = wrk(system, details, args.duration, 10)
        wrk(system, searches, 2, 10)
        loads = {connections: wrk(system, searches, args.duration, connections) for connections in CONNECTIONS}
        time.sleep(3)  # let searches still queued when wrk stopped finish
        # The same cheap requests while searches keep the worker busy.
        beside = subprocess.Popen(pinned(["wrk", "-t1", "-c20", f"-d{int(args.duration) + 2}s", "-s",
                                          str(Path(__file__).with_name("wrk-rotate.lua")), f"http://127.0.0.1:{port}"], 0),
                                  env={"BENCH_PATHS": str(searches), "PATH": "/usr/bin:/bin"}, stdout=subprocess.DEVNULL)
        time.sleep(1)
        during = wrk(system, details, args.duration, 10)
        beside.wait()
    finally:
        system.stop()
    searched = {f"search_c{n}_{key}": load[key] for n, load in loads.items() for key in ("rps", "p50_ms", "p99_ms")}
    return {**result, **searched, "errors": sum(load["errors"] for load in loads.values()), "cheap_p99_alone_ms": alone["p99_ms"],
            "cheap_p99_beside_searches_ms": during["p99_ms"], "cheap_rps_beside_searches": during["rps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium", choices=["small", "medium", "large"])
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--corpus", choices=["python-docs", "synth", "both"], default="both")
    parser.add_argument("--cache-mb", type=int, default=0, help="the reply cache of the worker: 0 measures every search cold")
    parser.add_argument("--no-fast-path", action="store_true", help="serve without the fast lane (to compare)")
    parser.add_argument("--log", action="store_true", help="run a query log (Zipf over 5,000 queries) instead of a fixed set")
    args = parser.parse_args()
    ensure_tools()
    results = {}
    if args.corpus in ("python-docs", "both"):
        results["python-docs"] = measure(python_docs_snapshot(), args)
    if args.corpus in ("synth", "both"):
        results[f"synth-{args.scale}"] = measure(snapshot_path(args.scale, 1), args)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
