"""A worker's memory after many changesets applied in memory while it serves, against a worker
started fresh on the same state after the same requests.

    python bench/memory.py [--scale small] [--changesets 1000] [--records 10] [--pages 1]
                           [--urls 11000] [--per-changeset 1100] [--workers 2] [--tag NAME]

A synthetic snapshot (indexed) is published on an origin directory that Python's http.server
serves on loopback and pulled into a replica, served by ``docsrv serve --watch``, while
``docsrv snapshot pull --every 0.2`` follows the origin as a sidecar that never folds within the
run (its fold threshold is raised past ``--changesets``: a fold replaces the workers, and with
them whatever they hold). ``--urls`` URLs of a crawl of the snapshot (every kind, gzip, brotli
and identity in turn) are cut into slices of ``--per-changeset``; then, for each changeset:

1. the feed of ``bench/live.py`` publishes one of about ``--records`` records of every kind a
   replica applies in memory (``live.mixed``), and every page of ``--pages`` versions uploaded
   again (the sidecar builds the index of what it makes);
2. once every worker serves it, the next slice of URLs is asked, eight at a time, through a new
   connection for each request (as clients without keep-alive ask: a connection's objects are
   what a worker must let go of).

Every tenth of the changesets the RSS, USS and PSS of each worker, and the PSS of the whole server, are
recorded. Then the sidecar stops, the changesets kept are folded into the snapshot they make
(as a pull folds them), and a fresh server on that snapshot is asked the same slices in the
same order, with the same pauses left out. The figure that matters is the ratio of the two
servers' memory: what applying changesets while serving leaves behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "tests")]
import aiohttp  # noqa: E402
from crawl import crawl  # noqa: E402
from live import Feed, ServerLog, docsrv, indexed_snapshot, mixed, served_sequence, until  # noqa: E402

from docsrv.replica.kept import fold_kept  # noqa: E402
from run import WORK, System, free_port, pss_kb, tree  # noqa: E402

#: The sidecar, with a fold threshold of its first argument: ``docsrv snapshot pull`` otherwise.
SIDECAR = ("import sys, runpy; import docsrv.replica.kept as kept; kept.FOLD_CHANGESETS = int(sys.argv.pop(1)); "
           "sys.argv[0] = 'docsrv'; runpy.run_module('docsrv', run_name='__main__')")
ENCODINGS = ("gzip", "br", "identity")


def memory_of(pid: int) -> dict[str, float]:
    """A process's RSS, USS (its private pages) and PSS, in MB; of its RSS, what is anonymous (its
    heaps: Python's objects, tantivy's readers) and what is mapped from files (the index's, the
    snapshot's); and how many mappings it has (an index opened and never let go keeps its files'
    mappings)."""
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    kb = {name: int(value) for name, value in re.findall(r"^(\w+):\s+(\d+) kB", text, re.MULTILINE)}
    mappings = len(Path(f"/proc/{pid}/maps").read_text().splitlines())
    return {"rss_mb": round(kb["Rss"] / 1024, 1), "uss_mb": round((kb["Private_Clean"] + kb["Private_Dirty"]) / 1024, 1),
            "pss_mb": round(kb["Pss"] / 1024, 1), "anonymous_mb": round(kb["Anonymous"] / 1024, 1),
            "file_mb": round((kb["Rss"] - kb["Anonymous"]) / 1024, 1), "mappings": mappings}


def worker_pids(server: System, count: int) -> list[int]:
    """The pids of ``server``'s workers, as /readyz names the one that answers (the generation they
    are forked from is a child of the master too, and is not one)."""
    pids: set[int] = set()
    deadline = time.monotonic() + 60
    while len(pids) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} workers did not answer within 60 s: {sorted(pids)}")
        pids.add(json.loads(server.get("/readyz")[2])["worker"])  # a new connection each: any worker may take it
    return sorted(pids)


def measured(server: System, changesets: int, count: int) -> dict:
    """The memory of each worker of ``server`` and the PSS of all its processes."""
    master = server.process.pid
    workers = [memory_of(pid) for pid in worker_pids(server, count)]
    return {"changesets": changesets, "server_pss_mb": round(pss_kb(tree(master)) / 1024, 1), "workers": workers,
            "worker_rss_mb": round(sum(w["rss_mb"] for w in workers) / len(workers), 1),
            "worker_uss_mb": round(sum(w["uss_mb"] for w in workers) / len(workers), 1)}


async def ask(port: int, urls: list[str]) -> int:
    """Ask each of ``urls`` once on eight connections; how many failed (a 5xx or no answer: a
    record a changeset took away answers 404)."""
    failed = 0
    queue = iter(enumerate(urls))
    # A connection for each request, as clients without keep-alive ask (and a CDN's edges, in part).
    connector = aiohttp.TCPConnector(limit=8, force_close=True)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        async def connection() -> None:
            nonlocal failed
            for number, url in queue:
                headers = {"Accept-Encoding": ENCODINGS[number % len(ENCODINGS)]}
                try:
                    async with session.get(f"http://127.0.0.1:{port}{url}", headers=headers) as response:
                        await response.read()
                        failed += response.status >= 500
                except aiohttp.ClientError:
                    failed += 1
        await asyncio.gather(*(connection() for _ in range(8)))
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="small", choices=["small", "medium", "large"])
    parser.add_argument("--changesets", type=int, default=1000)
    parser.add_argument("--records", type=int, default=10, help="records of each changeset (live.mixed)")
    parser.add_argument("--urls", type=int, default=11000, help="URLs of the crawl asked, in slices")
    parser.add_argument("--per-changeset", type=int, default=1100, help="URLs asked after each changeset")
    parser.add_argument("--pages", type=int, default=1, help="versions whose every page each changeset uploads again "
                                                             "(the sidecar builds the index of what it makes)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tag", default="", help="added to the results file's name")
    args = parser.parse_args()

    base = indexed_snapshot(args.scale)
    work = WORK / f"memory-{args.scale}"
    shutil.rmtree(work, ignore_errors=True)
    origin, into = work / "origin", work / "replica"
    docsrv("snapshot", "publish", str(base), str(origin))
    urls = crawl(base, per_project=3)
    random.Random(59).shuffle(urls)
    urls = urls[:args.urls]
    slices = [urls[at:at + args.per_changeset] for at in range(0, len(urls), args.per_changeset)]
    report: dict = {"date": date.today().isoformat(), "command": " ".join(["python bench/memory.py", *sys.argv[1:]]),
                    "scale": args.scale, "urls": len(urls), "per_changeset": args.per_changeset, "workers": args.workers}
    port = free_port()
    http_origin = System("origin", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
                                    str(origin)], port)
    url = f"http://127.0.0.1:{port}"
    server = fresh = sidecar = None
    failed = 0
    try:
        docsrv("snapshot", "pull", url, "--into", str(into))
        server_port = free_port()
        serving = ["serve", "--workers", str(args.workers), "--port"]
        server = System("docsrv-memory", [sys.executable, "-m", "docsrv", *serving, str(server_port), "--snapshot",
                                          str(into / "current"), "--watch"], server_port)
        log = ServerLog(WORK / "docsrv-memory.log")
        with open(work / "sidecar.log", "w") as sidecar_log:
            sidecar = subprocess.Popen([sys.executable, "-c", SIDECAR, str(args.changesets + 1), "snapshot", "pull", url, "--into",
                                        str(into), "--every", "0.2"],
                                       stdout=subprocess.DEVNULL, stderr=sidecar_log, start_new_session=True)
        feed = Feed(origin, base)
        failed += asyncio.run(ask(server_port, urls))  # every URL once, as a server that has run a while
        live = [measured(server, 0, args.workers)]
        for number in range(1, args.changesets + 1):
            sequence, _bytes, written = feed.publish(**mixed(args.records), pages=args.pages)
            log.wait(sequence, args.workers, written, lambda: served_sequence(server))
            failed += asyncio.run(ask(server_port, slices[number % len(slices)]))
            if number % max(1, args.changesets // 10) == 0 or number == args.changesets:
                live.append(measured(server, number, args.workers))
                print("live", live[-1], flush=True)
        report["live"] = live
        os.killpg(sidecar.pid, signal.SIGTERM)
        sidecar.wait(timeout=300)
        server.stop()
        server = None
        folded = fold_kept(into)
        assert folded is not None, "no changeset was kept"
        product = into / folded.last.product
        fresh_port = free_port()
        fresh = System("docsrv-memory-fresh", [sys.executable, "-m", "docsrv", *serving, str(fresh_port), "--snapshot",
                                                str(product)], fresh_port)
        until(lambda: served_sequence(fresh) == folded.last.sequence, 60, "the fresh server does not serve the fold", 0.2)
        failed += asyncio.run(ask(fresh_port, urls))
        for number in range(1, args.changesets + 1):
            failed += asyncio.run(ask(fresh_port, slices[number % len(slices)]))
        report["fresh"] = measured(fresh, args.changesets, args.workers)
        end = live[-1]
        report["ratio"] = {name: round(end[name] / report["fresh"][name], 3) for name in ("server_pss_mb", "worker_rss_mb",
                                                                                          "worker_uss_mb")}
        report["failed_requests"] = failed
        print(json.dumps({k: v for k, v in report.items() if k != "live"}, indent=2))
        tag = f"-{args.tag}" if args.tag else ""
        (HERE / "results" / f"{date.today().isoformat()}-memory-{args.scale}{tag}.json").write_text(json.dumps(report, indent=2) + "\n")
    finally:
        if sidecar is not None and sidecar.poll() is None:
            os.killpg(sidecar.pid, signal.SIGKILL)
        for system in (server, fresh, http_origin):
            if system is not None:
                system.stop()


if __name__ == "__main__":
    main()
