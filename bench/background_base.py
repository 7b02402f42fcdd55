"""What a base built in the background costs the follower (``docsrv/source/bases.py``):

    python bench/background_base.py [--scale medium]

The follower's state is made of the synthetic snapshot of the scale (every record a candidate,
kept as an import keeps them: ``SourceState.of_candidates``); then a base of it is built as the
follower builds one (``BaseBuild.start``: a forked child writes it and lays it on an origin in
``bench/scratch/``), while a thread of this process ticks every millisecond, as the stream would
wake. It prints, and writes to ``bench/results/<date>-background-base-<scale>.json``: the
follower's resident size, how long the fork held it, the longest the ticking thread waited, how
long the child wrote, and the most memory the child copied (its ``Private_Dirty``, sampled every
0.2 s): what a pod's memory limit must allow beyond the follower while a base is written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import threading
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from docsrv.snapshot.errors import ProblemList  # noqa: E402
from docsrv.snapshot.load import read_records, record_file  # noqa: E402
from docsrv.snapshot.records import KINDS  # noqa: E402
from docsrv.source.bases import BaseBuild  # noqa: E402
from docsrv.source.state import SourceState  # noqa: E402
from run import WORK, snapshot_path  # noqa: E402


def megabytes(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) // 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium", choices=["small", "medium", "large"])
    args = parser.parse_args()
    snapshot = snapshot_path(args.scale, 1)
    started = time.perf_counter()
    problems = ProblemList(str(snapshot))
    candidates = {kind: list(read_records(found[0], cls, problems)) if (found := record_file(snapshot, kind)) else []
                  for kind, cls in KINDS.items()}
    state = SourceState.of_candidates(candidates, {})
    del candidates
    made = time.perf_counter() - started
    origin = WORK / f"background-base-{args.scale}"
    shutil.rmtree(origin, ignore_errors=True)
    (origin / ".follower").mkdir(parents=True)
    gaps: list[float] = []
    ticking = True

    def tick() -> None:
        last = time.perf_counter()
        while ticking:
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    resident = megabytes(os.getpid(), "Rss:")
    started = time.perf_counter()
    build = BaseBuild.start(state, origin, origin / ".follower", "background-base-2", 2, "https://docs.example.org")
    fork = time.perf_counter() - started
    copied = 0
    while (why := build.outcome()) is None:
        with contextlib.suppress(OSError):  # it has just ended
            copied = max(copied, megabytes(build.pid, "Private_Dirty:"))
        time.sleep(0.2)
    wrote = time.perf_counter() - started
    ticking = False
    ticker.join()
    shutil.rmtree(origin, ignore_errors=True)
    figures = {"scale": args.scale, "records": sum(state.counts().values()), "state_made_s": round(made, 1),
               "follower_rss_mb": resident, "fork_ms": round(fork * 1000, 1), "longest_wait_ms": round(max(gaps) * 1000, 1),
               "child_s": round(wrote, 1), "child_copied_mb": copied, "failed": why or None}
    print(json.dumps(figures, indent=2))
    (HERE / "results" / f"{date.today()}-background-base-{args.scale}.json").write_text(json.dumps(figures, indent=2) + "\n")
    if why:
        sys.exit(1)


if __name__ == "__main__":
    main()
