"""A profile of docsrv's hot path under load: py-spy records the worker while wrk drives it.

    python bench/profile_hot_path.py [--scale small] [--endpoint project_detail] [--seconds 15] [--cache-mb 0]

Writes results/<date>-<scale>-profile-<endpoint>.svg (a flame graph) and .txt (the functions
that take the most time, by their own time and with what they call).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import shutil
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import RESULTS, WORK, Workload, docsrv_url, snapshot_path, start, tree, wrk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="small")
    parser.add_argument("--endpoint", default="project_detail")
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--cache-mb", type=int, default=1024, help="the reply cache; 0 profiles misses (every reply made anew)")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)
    snapshot = snapshot_path(args.scale, 1)
    workload = Workload.sample(snapshot, 1)
    paths = WORK / "paths-profile.txt"
    paths.write_text("\n".join(docsrv_url(args.endpoint, item) for item in workload.items[args.endpoint]) + "\n")
    miss = "-misses" if args.cache_mb == 0 else ""
    out = RESULTS / f"{dt.date.today().isoformat()}-{args.scale}-profile-{args.endpoint}{miss}"
    system = start("docsrv", snapshot, snapshot, WORK, args.cache_mb)
    try:
        worker = next(pid for pid in tree(system.process.pid) if Path(f"/proc/{pid}/comm").read_text().strip() == "docsrv-worker")
        wrk(system, paths, 2, 50)
        load = threading.Thread(target=wrk, args=(system, paths, args.seconds + 2, 50))
        load.start()
        raw = out.with_suffix(".raw")
        for fmt, target in (("raw", raw),):
            subprocess.run([spy, "record", "--pid", str(worker), "--duration", str(args.seconds), "--format", fmt,
                            "--output", str(target), "--nonblocking"], check=True, capture_output=True)
        load.join()
    finally:
        system.stop()
    own, total = collections.Counter(), collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        samples += n
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    lines = [f"py-spy, {samples} samples of the docsrv worker under wrk -c50 on {args.endpoint} ({args.scale} snapshot)", "",
             "By own time:"] + [f"{100 * n / samples:5.1f}%  {frame}" for frame, n in own.most_common(25)]
    lines += ["", "With what they call:"] + [f"{100 * n / samples:5.1f}%  {frame}" for frame, n in total.most_common(40)]
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    subprocess.run([spy, "--version"], check=True, capture_output=True)
    print(f"wrote {out}.txt ({samples} samples); raw stacks in {raw.name}")


if __name__ == "__main__":
    main()
