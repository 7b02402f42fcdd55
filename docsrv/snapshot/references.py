"""What each record of a state refers to, kept so that a changeset is checked against the state it
follows in proportion to its size, by the rules a load checks a whole snapshot by
(``validate.check_snapshot``): unique usernames, project slugs, subprojects, version slugs within
a project and page paths within a version; a project's users, a relationship's projects, a
version's project, a build's or a page's version (and its project, that of the version) and a
command's build exist; nothing is left naming a record deleted; some project is left.

A replica keeps changesets a server applies in memory, and a server trusts what it applies: the
publisher checked the snapshot it made whole. A changeset from an origin that lies would reach
every worker unchecked; this is the check the sidecar makes before it keeps one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from .changeset import PLACED_KINDS, Changeset, Header
from .errors import ProblemList
from .lines import decoded_blocks
from .load import record_file


class _User(msgspec.Struct, frozen=True, gc=False):
    id: int
    username: str


class _Project(msgspec.Struct, frozen=True, gc=False):
    id: int
    slug: str
    users: tuple[int, ...] = ()
    privacy_level: str = "public"


class _Relationship(msgspec.Struct, frozen=True, gc=False):
    id: int
    parent: int
    child: int


class _Version(msgspec.Struct, frozen=True, gc=False):
    id: int
    project: int
    slug: str
    privacy_level: str = "public"


class _Owned(msgspec.Struct, frozen=True, gc=False):
    """A build or a page: the version it is of, and the project it names."""

    id: int
    project: int
    version: int
    path: str = ""


class _Command(msgspec.Struct, frozen=True, gc=False):
    id: int
    build: int


_SHAPES: dict[str, type] = {"users": _User, "projects": _Project, "relationships": _Relationship, "versions": _Version,
                            "builds": _Owned, "pages": _Owned}
_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {kind: msgspec.json.Decoder(shape) for kind, shape in _SHAPES.items()}
_COMMAND = msgspec.json.Decoder(_Command)
#: What is unique among the records of a kind, and its name in a problem.
_UNIQUE: dict[str, tuple[Callable[[Any], Hashable], str]] = {
    "users": (lambda user: user.username, "username"),
    "projects": (lambda project: project.slug, "project slug"),
    "relationships": (lambda relation: (relation.parent, relation.child), "subproject of a parent"),
    "versions": (lambda version: (version.project, version.slug), "version slug within its project"),
    "pages": (lambda page: (page.version, page.path), "page path within its version"),
}


class References:
    """The records of a state by id, as far as the rules need them, their unique keys, and how
    many records name each user, project and version."""

    def __init__(self) -> None:
        self.records: dict[str, dict[int, Any]] = {kind: {} for kind in _SHAPES}
        self.keys: dict[str, dict[Hashable, int]] = {kind: {} for kind in _UNIQUE}
        #: What names each user (projects), project (versions, relationships' ends) and version
        #: (builds and pages), by its id.
        self.named: dict[str, Counter[int]] = {"users": Counter(), "projects": Counter(), "versions": Counter()}
        #: The pages each project and version holds, by its id.
        self.pages: dict[str, Counter[int]] = {"projects": Counter(), "versions": Counter()}

    @classmethod
    def of(cls, snapshot: Path) -> References:
        """Those of the snapshot in ``snapshot`` (checked when it was loaded)."""
        references = cls()
        problems = ProblemList(str(snapshot))
        for kind, shape in _SHAPES.items():
            for path in record_file(snapshot, kind):
                for _block, _line, records in decoded_blocks(path, shape, problems):
                    for record in records:
                        references.add(kind, record)
        problems.raise_if_any()
        return references

    def add(self, kind: str, record: Any) -> None:
        self.records[kind][record.id] = record
        if kind in _UNIQUE:
            self.keys[kind][_UNIQUE[kind][0](record)] = record.id
        for named_kind, identity in names(kind, record):
            self.named[named_kind][identity] += 1
        if kind == "pages":
            self.pages["projects"][record.project] += 1
            self.pages["versions"][record.version] += 1

    def remove(self, kind: str, identity: int) -> None:
        record = self.records[kind].pop(identity, None)
        if record is None:
            return
        if kind in _UNIQUE:
            self.keys[kind].pop(_UNIQUE[kind][0](record), None)
        for named_kind, target in names(kind, record):
            self.named[named_kind][target] -= 1
        if kind == "pages":
            self.pages["projects"][record.project] -= 1
            self.pages["versions"][record.version] -= 1

    def problems(self, change: Change) -> list[str]:
        """What is wrong with the state ``change`` makes of this one, in words (empty: none)."""
        upserts, deletes, commands = change.upserts, change.deletes, change.commands
        changed = {kind: upserts[kind].keys() | deletes[kind] for kind in _SHAPES}
        found: list[str] = []

        def now(kind: str, identity: int) -> Any:
            """The record ``identity`` of ``kind`` in the state the changeset makes, or None."""
            if identity in upserts[kind]:
                return upserts[kind][identity]
            return None if identity in deletes[kind] else self.records[kind].get(identity)

        for kind, (key_of, what) in _UNIQUE.items():
            seen: dict[Hashable, int] = {}
            for identity, record in upserts[kind].items():
                key = key_of(record)
                other = seen.get(key)
                if other is None and (held := self.keys[kind].get(key)) is not None and held not in changed[kind]:
                    other = held
                if other is not None:
                    found.append(f"{kind[:-1]} {identity}: duplicate {what} {key!r} (also {kind[:-1]} {other})")
                seen[key] = identity
        for project in upserts["projects"].values():
            found += [f"project {project.id} names user {user}, which does not exist"
                      for user in project.users if now("users", user) is None]
        for relation in upserts["relationships"].values():
            found += [f"relationship {relation.id} names {end} project {getattr(relation, end)}, which does not exist"
                      for end in ("parent", "child") if now("projects", getattr(relation, end)) is None]
            if relation.parent == relation.child:
                found.append(f"relationship {relation.id} makes project {relation.parent} its own subproject")
        for version in upserts["versions"].values():
            if now("projects", version.project) is None:
                found.append(f"version {version.id} names project {version.project}, which does not exist")
        for kind in ("builds", "pages"):
            for item in upserts[kind].values():
                owner = now("versions", item.version)
                if owner is None:
                    found.append(f"{kind[:-1]} {item.id} names version {item.version}, which does not exist")
                elif owner.project != item.project:
                    found.append(f"{kind[:-1]} {item.id} names project {item.project}, but its version {item.version} belongs to "
                                 f"project {owner.project}")
        for command in commands:
            if now("builds", command.build) is None:
                found.append(f"build command {command.id} names build {command.build}, which does not exist")
        found += self.left_naming(upserts, deletes)
        if not upserts["projects"] and len(deletes["projects"] & self.records["projects"].keys()) == len(self.records["projects"]):
            found.append("no project is left: an empty snapshot has nothing to serve")
        return found

    def left_naming(self, upserts: dict[str, dict[int, Any]], deletes: dict[str, set[int]]) -> list[str]:
        """Records left naming a user, project or version the changeset deletes, and builds and
        pages left naming another project than their version's, which moved to another."""
        delta: dict[str, Counter[int]] = {kind: Counter() for kind in self.named}
        for kind in _SHAPES:
            for identity in upserts[kind].keys() | deletes[kind]:
                if (before := self.records[kind].get(identity)) is not None:
                    for named_kind, target in names(kind, before):
                        delta[named_kind][target] -= 1
            for record in upserts[kind].values():
                for named_kind, target in names(kind, record):
                    delta[named_kind][target] += 1
        found = [f"{kind[:-1]} {identity} is deleted, but {left} record(s) still name it"
                 for kind in self.named for identity in deletes[kind]
                 if (left := self.named[kind][identity] + delta[kind][identity]) > 0]
        for version in upserts["versions"].values():
            before = self.records["versions"].get(version.id)
            if before is None or before.project == version.project:
                continue
            for kind in ("builds", "pages"):  # rare: a version moved to another project
                found += [f"{kind[:-1]} {item.id} names project {item.project}, but its version {version.id} moves to project "
                          f"{version.project}" for item in self.records[kind].values()
                          if item.version == version.id and item.id not in upserts[kind] and item.id not in deletes[kind]][:3]
        return found

    def false_claim(self, change: Change) -> str | None:
        """What makes the claims of ``change``'s header false against this state, in words:
        ``unmoved`` (no project or version moves to another address or is made public) and
        ``in_place`` (that, and none it makes private or deletes holds a page); None when they
        hold, or it claims neither."""
        header = change.header
        if not (header.in_place or header.unmoved):
            return None
        address = {"projects": lambda project: project.slug, "versions": lambda version: (version.project, version.slug)}
        for kind in PLACED_KINDS:
            for record in change.upserts[kind].values():
                before = self.records[kind].get(record.id)
                if before is None:
                    continue
                if address[kind](before) != address[kind](record):
                    return f"{kind[:-1]} {record.id} moves to another address"
                if before.privacy_level != "public" and record.privacy_level == "public":
                    return f"{kind[:-1]} {record.id} is made public"
                made_private = before.privacy_level == "public" and record.privacy_level != "public"
                if header.in_place and made_private and self.pages[kind][record.id]:
                    return f"{kind[:-1]} {record.id} is made private, and holds pages"
            if header.in_place:
                for identity in change.deletes[kind]:
                    if self.pages[kind][identity] > 0:
                        return f"{kind[:-1]} {identity} is deleted, and holds pages"
        return None

    def apply(self, change: Change) -> None:
        """Take ``change``'s records in (one whose ``problems`` are none)."""
        for kind in _SHAPES:
            for identity in change.upserts[kind].keys() | change.deletes[kind]:
                self.remove(kind, identity)
            for record in change.upserts[kind].values():
                self.add(kind, record)


@dataclass(frozen=True)
class Change:
    """A changeset as the rules read it: its records decoded once, as far as the rules need them
    (``read_changeset`` checked each line against its kind's schema)."""

    header: Header
    upserts: dict[str, dict[int, Any]]
    deletes: dict[str, set[int]]
    commands: list[_Command]

    @classmethod
    def of(cls, changeset: Changeset) -> Change:
        upserts = {kind: {identity: _DECODERS[kind].decode(line) for identity, line in changeset.upserts[kind].items()}
                   for kind in _SHAPES}
        commands = [_COMMAND.decode(line) for line in changeset.upserts["build_commands"].values()]
        return cls(changeset.header, upserts, {kind: changeset.deletes[kind] for kind in _SHAPES}, commands)


def names(kind: str, record: Any) -> Iterator[tuple[str, int]]:
    """(kind, id) of each record ``record`` (of ``kind``) names."""
    if kind == "projects":
        yield from (("users", user) for user in record.users)
    elif kind == "relationships":
        yield ("projects", record.parent)
        yield ("projects", record.child)
    elif kind == "versions":
        yield ("projects", record.project)
    elif kind in ("builds", "pages"):
        yield ("versions", record.version)
