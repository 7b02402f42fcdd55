"""Load time and peak memory of a snapshot at a scale: `python bench/load.py --scale large`.

Writes the synthetic snapshot under bench/scratch/ when it is missing (once; it is reused), then
loads it in a fresh process, as `docsrv serve` does, and reports wall time and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "scratch"

MEASURE = """
import json, resource, sys, time
started = time.perf_counter()
from docsrv.store import load_store
store = load_store(sys.argv[1], progress=False)
print(json.dumps({"load_seconds": time.perf_counter() - started, "counts": store.counts,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def snapshot_for(scale: str, seed: int) -> Path:
    path = WORK / f"synth-{scale}-{seed}"
    if not (path / "manifest.json").exists():
        WORK.mkdir(exist_ok=True)
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "docsrv", "snapshot", "synth", "--out", str(path), "--scale", scale, "--seed", str(seed)],
            check=True,
        )
        print(f"synth {scale}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", default="large", choices=["demo", "small", "medium", "large"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--path", type=Path, default=None, help="measure this snapshot instead of a synthetic one")
    args = parser.parse_args()
    if args.path is not None:
        path = args.path
    else:
        path = HERE.parent / "snapshots" / "demo" if args.scale == "demo" else snapshot_for(args.scale, args.seed)
    size = sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    for run in range(args.runs):
        out = subprocess.run([sys.executable, "-c", MEASURE, str(path)], check=True, capture_output=True, text=True)
        result = json.loads(out.stdout)
        result.update(scale=args.scale, run=run + 1, snapshot_mb=round(size / 2**20))
        print(json.dumps(result))


if __name__ == "__main__":
    main()
