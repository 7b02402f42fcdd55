"""Checks across records: unique ids and slugs, and references that point at real records.

Each record's own fields were checked when it was decoded; what is left is what no single
line can show. Record ``i`` of a file stands on line ``i + 1`` (read_records guarantees it).
Build commands are checked as they are indexed (see commands.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from .errors import ProblemList
from .load import RawSnapshot


def check_snapshot(raw: RawSnapshot) -> None:
    """Raise SnapshotError naming file and line of every cross-record problem in ``raw``."""
    problems = ProblemList(str(raw.path))
    files = {**{kind: f"{kind}.jsonl" for kind in raw.records}, **raw.files}
    records = raw.records
    lines = {kind: unique_ids(files[kind], items, problems) for kind, items in records.items()}

    unique(files["users"], ((u.username, i) for i, u in enumerate(records["users"])), "username", problems)
    unique(files["projects"], ((p.slug, i) for i, p in enumerate(records["projects"])), "project slug", problems)
    user_lines = lines["users"]
    for i, project in enumerate(records["projects"]):
        for user in project.users:
            if user not in user_lines:
                problems.add(files["projects"], i + 1, f"project {project.id} names user {user}, which does not exist")

    project_lines = lines["projects"]
    relationships = records["relationships"]
    for i, relation in enumerate(relationships):
        for end in ("parent", "child"):
            if getattr(relation, end) not in project_lines:
                problems.add(files["relationships"], i + 1,
                             f"relationship {relation.id} names {end} project {getattr(relation, end)}, which does not exist")
        if relation.parent == relation.child:
            problems.add(files["relationships"], i + 1, f"relationship {relation.id} makes project {relation.parent} its own subproject")
    if relationships:
        unique(files["relationships"], (((r.parent, r.child), i) for i, r in enumerate(relationships)), "subproject of a parent", problems)
    unique(
        files["versions"],
        (((v.project, v.slug), i) for i, v in enumerate(records["versions"])),
        "version slug within its project",
        problems,
    )
    for i, version in enumerate(records["versions"]):
        if version.project not in project_lines:
            problems.add(files["versions"], i + 1, f"version {version.id} names project {version.project}, which does not exist")

    version_project = {v.id: v.project for v in records["versions"]}
    for kind in ("builds", "pages"):
        for i, item in enumerate(records[kind]):
            owner = version_project.get(item.version)
            if owner is None:
                problems.add(files[kind], i + 1, f"{kind[:-1]} {item.id} names version {item.version}, which does not exist")
            elif owner != item.project:
                problems.add(
                    files[kind],
                    i + 1,
                    f"{kind[:-1]} {item.id} names project {item.project}, but its version {item.version} belongs to project {owner}",
                )
    unique(
        files["pages"],
        (((p.version, p.path), i) for i, p in enumerate(records["pages"])),
        "page path within its version",
        problems,
    )

    if not records["projects"]:
        problems.add(files["projects"], None, "holds no projects: an empty snapshot has nothing to serve")
    problems.raise_if_any()


def unique_ids(file: str, items: Sequence[Any], problems: ProblemList) -> dict[int, int]:
    """Map each id to the index of its record; a repeated id is a problem."""
    index = {item.id: i for i, item in enumerate(items)}
    if len(index) != len(items):
        unique(file, ((item.id, i) for i, item in enumerate(items)), "id", problems)
    return index


def unique(file: str, keyed: Iterable[tuple[Hashable, int]], what: str, problems: ProblemList) -> None:
    seen: dict = {}
    for key, i in keyed:
        first = seen.setdefault(key, i)
        if first != i:
            shown = key[1] if isinstance(key, tuple) else key
            problems.add(file, i + 1, f"duplicate {what} {shown!r} (first on line {first + 1})")
