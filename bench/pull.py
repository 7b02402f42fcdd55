"""A pull of a synthetic snapshot from a real static origin on loopback: time and peak memory.

    python bench/pull.py [--scale medium]

Python's http.server serves the snapshot's directory (the origin); `docsrv snapshot pull` runs
in a process of its own into a fresh directory, and its wall time and peak RSS are reported, with
a second pull of the unchanged snapshot (one conditional request).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import System, free_port, snapshot_path


def timed(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MB of the command's process, and its standard output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, max(peak, before) / 1024, result.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium", choices=["small", "medium", "large"])
    args = parser.parse_args()
    snapshot = snapshot_path(args.scale, 1)
    files = sum(p.stat().st_size for p in snapshot.glob("*.jsonl*"))
    port = free_port()
    origin = System("origin", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(snapshot)], port)
    into = Path(tempfile.mkdtemp(prefix="docsrv-pull-"))
    try:
        url = f"http://127.0.0.1:{port}"
        seconds, peak, out = timed([sys.executable, "-m", "docsrv", "snapshot", "pull", url, "--into", str(into)])
        again, _, unchanged = timed([sys.executable, "-m", "docsrv", "snapshot", "pull", url, "--into", str(into)])
    finally:
        origin.stop()
        shutil.rmtree(into, ignore_errors=True)
    print(json.dumps({"scale": args.scale, "snapshot_mb": round(files / 2**20), "pull_seconds": round(seconds, 1),
                      "peak_rss_mb": round(peak), "pulled": out, "unchanged_pull_seconds": round(again, 2),
                      "unchanged": unchanged}, indent=2))


if __name__ == "__main__":
    main()
