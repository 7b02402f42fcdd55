"""Time to ready and memory of `docsrv serve --workers 2`, by scale, the first time a snapshot is
served and the next (when a record of the first check is trusted: docsrv/snapshot/verified.py).

    python bench/startup.py [--scales small medium large]

Each snapshot is synthesised under bench/scratch/ and indexed first (`docsrv index`), so the
start measures loading, not index building; the page cache is warm (each start follows a
read of the files). Ready is the first 200 of /readyz; PSS is summed over the master and its
workers from /proc/<pid>/smaps_rollup once ready. Results: bench/results/<date>-startup.md, .json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from docsrv.snapshot.verified import RANGES, RECORD  # noqa: E402
from run import free_port, snapshot_path  # noqa: E402


def pss_mb(pid: int) -> float:
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    total = 0
    for each in pids:
        for line in Path(f"/proc/{each}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
    return round(total / 1024, 1)


def start(snapshot: Path) -> dict:
    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "docsrv", "serve", "--snapshot", str(snapshot), "--port", str(port),
                                "--workers", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
                    if response.status == 200:
                        ready = json.loads(response.read())
                        if ready["workers"] == 2:
                            break
            except OSError:
                pass
            if process.poll() is not None:
                raise SystemExit(f"docsrv exited with {process.returncode}")
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        return {"ready_seconds": round(seconds, 2), "load_seconds": ready["load_seconds"], "pss_mb": pss_mb(process.pid)}
    finally:
        process.terminate()
        process.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", nargs="+", default=["small", "medium", "large"], choices=["demo", "small", "medium", "large"])
    args = parser.parse_args()
    results = {}
    for scale in args.scales:
        snapshot = snapshot_path(scale, 1)
        subprocess.run([sys.executable, "-m", "docsrv", "index", str(snapshot)], check=True, capture_output=True)
        for name in (RECORD, RANGES):
            (snapshot / name).unlink(missing_ok=True)
        for path in snapshot.glob("*.jsonl"):  # warm the page cache
            with open(path, "rb") as data:
                while data.read(1 << 24):
                    pass
        first = start(snapshot)
        again = start(snapshot)
        results[scale] = {"first": first, "trusted": again}
        print(scale, results[scale], file=sys.stderr)
    out = HERE / "results" / f"{date.today().isoformat()}-startup"
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [f"# Start-up of `docsrv serve --workers 2`, {date.today().isoformat()}", "",
             "Index built beforehand, page cache warm. First: no record of an earlier check (every digest, every build "
             "command, every cross-check). Trusted: the record of the first start matches the files.", "",
             "| scale | ready, first (s) | ready, trusted (s) | load, first (s) | load, trusted (s) | PSS, master + 2 workers (MB) |",
             "|---|---|---|---|---|---|"]
    for scale, row in results.items():
        lines.append(f"| {scale} | {row['first']['ready_seconds']} | {row['trusted']['ready_seconds']} | {row['first']['load_seconds']} "
                     f"| {row['trusted']['load_seconds']} | {row['trusted']['pss_mb']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
