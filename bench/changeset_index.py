"""What a sidecar's build of a changeset's search index costs, in one process: wall and CPU.

    python bench/changeset_index.py [--scale large] [--versions 2] [--rounds 6] [--tag NAME]

The synthetic snapshot of the scale (``bench/scratch/``, made and indexed when missing) is loaded
as a sidecar loads it (without the pages' text), with where its pages file's lines are and its own
index, checked. Each round, a changeset makes ``--versions`` versions that hold pages private
(chosen at random, seeded); it is applied with its index (``store.changes.applied``), and its index
is planned (``search.rebuild.plan_changed_shards``) and built beside the snapshot's, its shards
built again in a directory of their own and the others linked (``search.rebuild.rebuild_index``),
as ``replica.changeset_index.index_changesets`` does. For each round: the seconds of the plan and
of the build, the CPU seconds of the build (every thread of the process: tantivy indexes and
commits in threads of its own while Python adds the pages), and the shards and pages built.
Written to ``bench/results/<date>-changeset-index-<scale>[-<tag>].json``. The machine is otherwise idle:
under traffic the same work shares the cores (``bench/source.py`` measures the lag whole).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from apply_costs import changeset, paged_versions_hidden  # noqa: E402

from docsrv.replica.changeset_index import versions_touched  # noqa: E402
from docsrv.search.location import current_index, fingerprint  # noqa: E402
from docsrv.search.rebuild import PageLines, plan_changed_shards, rebuild_index  # noqa: E402
from docsrv.store.changes import applied  # noqa: E402
from docsrv.store.loaded import load_store  # noqa: E402
from run import run, snapshot_path  # noqa: E402


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="large", choices=["small", "medium", "large"])
    parser.add_argument("--versions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tag", help="added to the results' name, so that a run does not replace another's")
    args = parser.parse_args()
    snapshot = snapshot_path(args.scale, 1)
    if current_index(snapshot, fingerprint(snapshot)) is None:
        run([sys.executable, "-m", "docsrv", "index", str(snapshot)])
    store = load_store(snapshot, progress=False, page_text=False)
    places = PageLines.of(store)
    earlier = current_index(snapshot, fingerprint(snapshot), check=True, own=True)
    assert earlier is not None, f"{snapshot}: no index that opens"
    rng = random.Random(7)
    rounds = []
    with tempfile.TemporaryDirectory(dir=HERE / "scratch") as scratch:
        for _round in range(args.rounds):
            done = applied(store, changeset(store, paged_versions_hidden(store, args.versions, rng), False), indexed=True)
            assert done is not None
            started = time.perf_counter()
            plan = plan_changed_shards(done.store, {}, versions_touched(done.pages), earlier, places)
            assert plan is not None
            planned, cpu = time.perf_counter(), cpu_seconds()
            rebuild_index(done.store, plan, Path(scratch) / "index", built_in=Path(scratch) / "built")
            found = {"plan_s": round(planned - started, 3), "build_s": round(time.perf_counter() - planned, 3),
                     "build_cpu_s": round(cpu_seconds() - cpu, 3), "shards": len(plan.changed),
                     "pages": sum(map(len, plan.changed.values()))}
            rounds.append(found)
            print(found, flush=True)
            for built in ("index", "built"):
                shutil.rmtree(Path(scratch) / built)
    report = {"date": date.today().isoformat(), "command": " ".join(["python bench/changeset_index.py", *sys.argv[1:]]),
              "scale": args.scale, "counts": store.counts, "rounds": rounds}
    out = HERE / "results" / f"{report['date']}-changeset-index-{args.scale}{'-' + args.tag if args.tag else ''}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
