"""What a changeset costs a worker to apply in memory, by kind of change and size, in one process.

    python bench/apply_costs.py [--scale large] [--sizes 1 10 100 1000] [--rounds 3] [--kinds ...]

The synthetic snapshot of the scale (``bench/scratch/``, made when missing) is loaded as a server
loads it. For each kind of change and size, a changeset of that many records changed (chosen at
random, seeded; its header says ``in_place``, as the publisher's does for such a change) is
applied to the loaded store (``store.changes.applied``) and its purge keys are named
(``edge.keys.applied_keys``), ``--rounds`` times, each time from the loaded store. It prints the
milliseconds of each (least and most) and how many keys, and writes them to
``bench/results/<date>-apply-<scale>.json``. A worker adds this apply to a changeset's lag, with
the swap and the poll (``bench/live.py`` measures the lag whole, for builds).

The kinds: builds flipped (their state), builds moved (a new date: they move in their lists),
versions renamed in place, projects edited (description, first user replaced), users renamed,
projects created (each with its first version), versions created (a tag pushed), versions and
projects without pages made private (they leave every list, with what they hold), and versions
and projects that hold pages made private (their pages leave too: applied as a server applies
them with the index the pull built, ``indexed``; the index is not opened here).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from docsrv.edge.keys import applied_keys  # noqa: E402
from docsrv.snapshot.changeset import FORMAT, FORMAT_VERSION, Changeset, Header, Product  # noqa: E402
from docsrv.snapshot.records import KINDS, Project, Version  # noqa: E402
from docsrv.store.changes import applied  # noqa: E402
from docsrv.store.loaded import Store, load_store  # noqa: E402
from run import snapshot_path  # noqa: E402

#: A change: the records it upserts, by kind and id, made from the store for a size and a generator.
Change = Callable[[Store, int, random.Random], dict[str, dict[int, bytes]]]
NOW = datetime(2026, 11, 26, tzinfo=UTC)


def encoded(records: list) -> dict[int, bytes]:
    return {record.id: msgspec.json.encode(record) for record in records}


def builds_flipped(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    chosen = rng.sample(list(store.builds.values()), size)
    return {"builds": encoded([msgspec.structs.replace(b, state="building" if b.state == "finished" else "finished") for b in chosen])}


def builds_moved(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    return {"builds": encoded([msgspec.structs.replace(b, date=NOW) for b in rng.sample(list(store.builds.values()), size)])}


def versions_renamed(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    chosen = rng.sample(list(store.versions.values()), size)
    return {"versions": encoded([msgspec.structs.replace(v, verbose_name=f"{v.verbose_name} (renamed)") for v in chosen])}


def projects_edited(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    users = list(store.users)
    chosen = rng.sample(list(store.projects.values()), size)
    return {"projects": encoded([msgspec.structs.replace(p, description=f"{p.description} (edited)", modified_date=NOW,
                                                         users=(rng.choice(users), *p.users[1:])) for p in chosen])}


def users_renamed(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    chosen = rng.sample(list(store.users.values()), size)
    return {"users": encoded([msgspec.structs.replace(u, username=f"{u.username}-renamed") for u in chosen])}


def projects_created(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    project_id, version_id = max(store.projects) + 1, max(store.versions) + 1
    projects = [Project(id=project_id + n, name=f"Created {n}", slug=f"created-{n}", pub_date=NOW, modified_date=NOW) for n in range(size)]
    versions = [Version(id=version_id + n, project=project_id + n, slug="latest", verbose_name="latest") for n in range(size)]
    return {"projects": encoded(projects), "versions": encoded(versions)}


def versions_created(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    first = max(store.versions) + 1
    projects = rng.sample(list(store.projects), size)
    return {"versions": encoded([Version(id=first + n, project=project, slug=f"v{n}.0", verbose_name=f"v{n}.0", type="tag")
                                 for n, project in enumerate(projects)])}


def versions_hidden(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    pageless = [v for v in store.versions.values() if v.id not in store.versions_with_pages]
    return {"versions": encoded([msgspec.structs.replace(v, privacy_level="private") for v in rng.sample(pageless, size)])}


def projects_hidden(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    pageless = [p for p in store.projects.values() if p.id not in store.projects_with_pages]
    return {"projects": encoded([msgspec.structs.replace(p, privacy_level="private") for p in rng.sample(pageless, size)])}


def paged_versions_hidden(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    paged = [store.versions[v] for v in store.versions_with_pages]
    return {"versions": encoded([msgspec.structs.replace(v, privacy_level="private") for v in rng.sample(paged, size)])}


def paged_projects_hidden(store: Store, size: int, rng: random.Random) -> dict[str, dict[int, bytes]]:
    paged = [store.projects[p] for p in store.projects_with_pages]
    return {"projects": encoded([msgspec.structs.replace(p, privacy_level="private") for p in rng.sample(paged, size)])}


CHANGES: dict[str, Change] = {change.__name__: change for change in (
    builds_flipped, builds_moved, versions_renamed, projects_edited, users_renamed, projects_created, versions_created,
    versions_hidden, projects_hidden, paged_versions_hidden, paged_projects_hidden,
)}
#: The kinds that take pages away: not in place, applied with the index of the state they make.
INDEXED = {"paged_versions_hidden", "paged_projects_hidden"}


def changeset(store: Store, upserts: dict[str, dict[int, bytes]], in_place: bool) -> Changeset:
    manifest = store.manifest
    product = Product(name=f"{store.name}-next", created_at=NOW, public_url=manifest.public_url, counts=dict(manifest.counts))
    header = Header(format=FORMAT, format_version=FORMAT_VERSION, sequence=manifest.sequence + 1, follows=store.name,
                    product=product, changes=sum(map(len, upserts.values())), in_place=in_place, unmoved=True)
    return Changeset(header, {kind: upserts.get(kind, {}) for kind in KINDS}, {kind: set() for kind in KINDS}, {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="large", choices=["small", "medium", "large"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", nargs="+", default=list(CHANGES), choices=list(CHANGES))
    args = parser.parse_args()
    started = time.perf_counter()
    store = load_store(snapshot_path(args.scale, 1), page_text=False)
    report: dict = {"date": date.today().isoformat(), "command": " ".join(["python bench/apply_costs.py", *sys.argv[1:]]),
                    "scale": args.scale, "load_s": round(time.perf_counter() - started, 1), "counts": store.counts, "changes": {}}
    rng = random.Random(1)
    for kind in args.kinds:
        for size in args.sizes:
            applies, keys, named = [], [], 0
            for _ in range(args.rounds):
                made = changeset(store, CHANGES[kind](store, size, rng), kind not in INDEXED)
                started = time.perf_counter()
                done = applied(store, made, indexed=kind in INDEXED)
                between = time.perf_counter()
                assert done is not None, f"{kind}: not applied in memory"
                named = len(set(applied_keys(done)))
                keys.append(time.perf_counter() - between)
                applies.append(between - started)
            found = {"apply_ms": [round(1000 * min(applies), 1), round(1000 * max(applies), 1)],
                     "keys_ms": [round(1000 * min(keys), 1), round(1000 * max(keys), 1)], "keys": named}
            report["changes"].setdefault(kind, {})[size] = found
            print(kind, size, found, flush=True)
    out = HERE / "results" / f"{report['date']}-apply-{args.scale}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
