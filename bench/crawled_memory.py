"""The memory of a server's records once its workers have read every one of them, as a crawl of
every version and build does, against the memory at its start.

    python bench/crawled_memory.py [--scale large] [--workers 2] [--tag NAME]

The synthetic snapshot of the scale is prepared (``docsrv snapshot prepare``), then loaded as a
server's generation loads it; ``--workers`` processes are forked from it as a server forks its
workers, and each reads every version and build, by its list and by its id (what a crawler of
every detail and list asks a worker for). PSS is summed over the loader and the forks from
/proc/<pid>/smaps_rollup, fresh and after the reads. The versions and builds are decoded when a
worker first reads them (``snapshot/binary.py``), in its own memory; a record decoded at the load
is shared until a read writes its count of references, which copies its page of memory.
Results: bench/results/<date>-crawled-memory-<scale>[-<tag>].json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from docsrv.store.loaded import Store, load_store  # noqa: E402
from run import snapshot_path  # noqa: E402


def pss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Pss in /proc/{pid}/smaps_rollup")


def read_everything(store: Store) -> int:
    """Every version and build, by its list and by its id."""
    found = 0
    for version in store.versions_ordered:
        found += store.versions[version.id] is version
    for build in store.builds_ordered:
        found += store.builds[build.id] is build
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="large", choices=["small", "medium", "large"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    snapshot = snapshot_path(args.scale, args.seed)
    subprocess.run([sys.executable, "-m", "docsrv", "snapshot", "prepare", str(snapshot)], check=True, capture_output=True)
    started = time.perf_counter()
    store = load_store(snapshot, progress=False, page_text=False)
    load_seconds = time.perf_counter() - started
    ready, go = os.pipe()
    told, tell = os.pipe()
    workers = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            os.write(go, b"f")
            os.read(told, 1)
            found = read_everything(store)
            os.write(go, b"r" if found == len(store.versions) + len(store.builds) else b"x")
            os.read(told, 1)
            os._exit(0)
        workers.append(pid)
    assert all(os.read(ready, 1) == b"f" for _ in workers)
    fresh = pss_mb() + sum(pss_mb(pid) for pid in workers)
    started = time.perf_counter()
    os.write(tell, b"g" * len(workers))
    assert all(os.read(ready, 1) == b"r" for _ in workers), "a worker read other records than the store holds"
    read_seconds = time.perf_counter() - started
    crawled = pss_mb() + sum(pss_mb(pid) for pid in workers)
    os.write(tell, b"g" * len(workers))
    for pid in workers:
        os.waitpid(pid, 0)
    result = {"scale": args.scale, "workers": args.workers, "versions": len(store.versions), "builds": len(store.builds),
              "load_seconds": round(load_seconds, 2), "read_seconds": round(read_seconds, 2),
              "pss_fresh_mb": round(fresh), "pss_crawled_mb": round(crawled)}
    print(json.dumps(result))
    out = HERE / "results" / f"{date.today().isoformat()}-crawled-memory-{args.scale}{'-' + args.tag if args.tag else ''}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
