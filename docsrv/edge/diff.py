"""``docsrv snapshot diff OLD NEW``: the purge keys of every reply that may differ between two
snapshots (the key scheme: ``edge/keys.py``).

Complete: every reply whose body changes carries at least one key printed. As small as that
allows: an object's own keys when its content changed, a list's key when its members or their
order changed (every page of it may shift), and otherwise a list's ``big-`` key (its pages too
long to name their objects). So an unchanged project's detail, versions and builds stay cached.

Fast at any size: each record file of the two snapshots is compared by the hashes of its lines
(sets of integers, made and compared in C, a block at a time), files the manifests seal with one
digest are skipped, and only the lines that differ are read again and decoded in full; what
places an object in its lists is decoded from every line in blocks. No reply is rendered.
"""

from __future__ import annotations

import multiprocessing
from array import array
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..snapshot.errors import ProblemList
from ..snapshot.lines import decoded_blocks, open_records
from ..snapshot.lines import line_blocks as whole_line_blocks
from ..snapshot.load import read_manifest, record_file
from ..snapshot.records import Build, Manifest, Project, User, Version
from .keys import (
    BIG,
    V1_FILES,
    Grouped,
    ProjectShown,
    build_key,
    build_list_keys,
    page_change_keys,
    project_change_keys,
    user_change_keys,
    version_key,
    version_list_keys,
    version_placed,
)

#: The groups of ``--json``: why a key is printed.
GROUPS = ("changed", "added", "removed", "lists")


class BuildPlace(msgspec.Struct, frozen=True, gc=False):
    """What places a build in its lists."""

    id: int
    project: int
    version: int
    date: str
    commit: str = ""


class PagePlace(msgspec.Struct, frozen=True, gc=False):
    id: int
    project: int
    version: int


class CommandOwner(msgspec.Struct, frozen=True, gc=False):
    build: int


@dataclass
class Keys:
    groups: dict[str, set[str]] = field(default_factory=lambda: {g: set() for g in GROUPS})

    def add(self, group: str, keys: Iterable[str]) -> None:
        self.groups[group].update(keys)

    def big(self, keys: Iterable[str]) -> None:
        """The ``big-`` keys of these lists: their pages that could not name a changed object."""
        self.groups["changed"].update(BIG + key for key in keys)

    def extend(self, grouped: Grouped) -> None:
        for group, keys in grouped:
            if group == "big":
                self.big(keys)
            else:
                self.add(group, keys)

    def all(self) -> list[str]:
        return sorted(set().union(*self.groups.values()))

    def by_group(self) -> dict[str, list[str]]:
        return {group: sorted(keys) for group, keys in self.groups.items()}


class Side:
    """One snapshot as the diff reads it: its manifest, its public projects, versions and users
    whole, and where each public build and page sits."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        problems = ProblemList(str(directory))
        if not directory.is_dir():
            problems.add(str(directory), None, "not a snapshot directory")
            problems.raise_if_any()
        manifest = read_manifest(directory, problems)
        problems.raise_if_any()
        assert manifest is not None
        self.manifest: Manifest = manifest
        projects = {p.id: p for p in self.decode("projects", Project)}
        self.projects = {i: p for i, p in projects.items() if p.privacy_level == "public"}
        self.versions = {v.id: v for v in self.decode("versions", Version) if v.privacy_level == "public" and v.project in self.projects}
        self.users = {u.id: u for u in self.decode("users", User)}
        self.builds = {b.id: b for b in self.decode("builds", BuildPlace) if b.version in self.versions}
        self.pages = {p.id: p for p in self.decode("pages", PagePlace) if p.version in self.versions}
        self._grouped: dict[tuple[str, str], dict[int, list[Any]]] = {}

    def decode(self, kind: str, cls: type) -> Iterator[Any]:
        problems = ProblemList(str(self.directory))
        for path in record_file(self.directory, kind):
            for _block, _line, records in decoded_blocks(path, cls, problems):
                yield from records
        problems.raise_if_any()

    def sealed(self, kind: str) -> dict[str, str]:
        """The digests the manifest records of this kind's files, by name."""
        return {p.name: self.manifest.files[p.name].sha256 for p in record_file(self.directory, kind) if p.name in self.manifest.files}

    def project_slug(self, project_id: int) -> str:
        return self.projects[project_id].slug

    def shown(self, project: int) -> ProjectShown:
        """What shows a project here."""
        return ProjectShown(self.of("versions", "project", project), (b.commit for b in self.of("builds", "project", project)),
                            bool(self.of("pages", "project", project)))

    def of(self, kind: str, field: str, ident: int) -> list[Any]:
        """The public versions, builds or pages whose ``field`` (project, version) is ``ident``,
        grouped once, when first asked."""
        grouped = self._grouped.get((kind, field))
        if grouped is None:
            grouped = self._grouped[kind, field] = {}
            for item in getattr(self, kind).values():
                grouped.setdefault(getattr(item, field), []).append(item)
        return grouped.get(ident, [])


def differing_lines(old: Side, new: Side, kind: str, helper: Executor) -> tuple[list[bytes], list[bytes]]:
    """The lines of ``kind`` only the old snapshot has, and only the new one has (none when the
    manifests seal the same files with the same digests). The old snapshot's files are read by
    ``helper`` (a forked process, so its hashes are this process's) while this one reads the new's."""
    sealed = old.sealed(kind)
    if sealed and sealed == new.sealed(kind):
        return [], []
    hashing = helper.submit(packed_line_hashes, old.directory, kind)
    after = line_hashes(new.directory, kind)
    before = set(hashing.result())
    gone, came = before - after, after - before
    del before, after
    reading = helper.submit(lines_hashed, old.directory, kind, gone) if gone else None
    came_lines = lines_hashed(new.directory, kind, came) if came else []
    return (reading.result() if reading is not None else []), came_lines


def line_hashes(directory: Path, kind: str) -> set[int]:
    """The hash of every line of a kind's files: Python's 64-bit SipHash of the bytes (a changed
    line and an unchanged one collide about once in 10^12 changes at the largest size), made
    in C a block at a time, so no line is kept."""
    found: set[int] = set()
    for block in line_blocks(directory, kind):
        found.update(map(hash, block))
    found.discard(hash(b""))
    return found


def packed_line_hashes(directory: Path, kind: str) -> array:
    """``line_hashes`` as 8-byte integers in one buffer: sent between processes in milliseconds,
    where a set of millions of integers takes seconds."""
    return array("q", line_hashes(directory, kind))


def lines_hashed(directory: Path, kind: str, wanted: set[int]) -> list[bytes]:
    """The lines of a kind whose hashes are ``wanted``."""
    return [line for block in line_blocks(directory, kind) for line in block if line and hash(line) in wanted]


def line_blocks(directory: Path, kind: str) -> Iterator[list[bytes]]:
    """The lines of a kind's files, a block at a time, as the loader reads them (a line longer
    than a record may be is a problem, not a read without end)."""
    problems = ProblemList(str(directory))
    for path in record_file(directory, kind):
        with open_records(path, False) as stream:
            for block, _lines in whole_line_blocks(stream, path.name, problems):
                yield block.split(b"\n")
    problems.raise_if_any()


def decoded_ids(lines: list[bytes], cls: type) -> set[int]:
    decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(cls)
    return {decoder.decode(line).id for line in lines}


# Where an object shows: the keys of every list it is in.


def version_lists(side: Side, version: Version) -> list[str]:
    return version_list_keys(side.project_slug(version.project), version)


def build_lists(side: Side, build: BuildPlace) -> list[str]:
    return build_list_keys(side.project_slug(build.project), build.commit)


def version_key_on(side: Side, version: Version) -> str:
    """The key of a version, as ``side`` names its project."""
    return version_key(side.project_slug(version.project), version.slug)


def compare(old_dir: Path, new_dir: Path) -> Keys:
    # Forked first, while this process is small; "fork" so that the helper hashes as this process does.
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as helper:
        helper.submit(int).result()
        return compare_with(old_dir, new_dir, helper)


def compare_with(old_dir: Path, new_dir: Path, helper: Executor) -> Keys:
    old, new = Side(old_dir), Side(new_dir)
    keys = Keys()
    if old.manifest.public_url != new.manifest.public_url:  # every link of every reply
        keys.add("changed", ("v1", "v2", "search"))
    compare_projects(old, new, keys)
    compare_versions(old, new, keys)
    compare_builds(old, new, keys, helper)
    compare_pages(old, new, keys, helper)
    compare_users(old, new, keys)
    if differing_lines(old, new, "relationships", helper) != ([], []):
        keys.add("changed", ("search",))  # which subprojects a doc search covers
    return keys


def compare_projects(old: Side, new: Side, keys: Keys) -> None:
    for pid in old.projects.keys() | new.projects.keys():
        before, after = old.projects.get(pid), new.projects.get(pid)
        if before != after:
            keys.extend(project_change_keys(before, after, (old.shown(pid), new.shown(pid))))


def compare_versions(old: Side, new: Side, keys: Keys) -> None:
    for vid in old.versions.keys() - new.versions.keys():
        version = old.versions[vid]
        keys.add("removed", [version_key_on(old, version)])
        keys.add("lists", version_lists(old, version))
    for vid in new.versions.keys() - old.versions.keys():
        version = new.versions[vid]
        keys.add("added", [version_key_on(new, version)])
        keys.add("lists", version_lists(new, version))
    for vid in old.versions.keys() & new.versions.keys():
        before, after = old.versions[vid], new.versions[vid]
        if before == after:
            continue  # a renamed project's versions: under the project's keys
        keys.add("changed", {version_key_on(old, before), version_key_on(new, after)})
        if version_placed(before) != version_placed(after):
            keys.add("lists", version_lists(old, before) + version_lists(new, after))
        else:
            keys.big(version_lists(new, after))
        if before.slug != after.slug:  # its builds' version_slug and docs_url, its files' URLs
            for side in (old, new):
                for build in side.of("builds", "version", vid):
                    keys.big(build_lists(side, build))
            keys.big([V1_FILES.key({})])
            keys.add("changed", ("search",))


def compare_builds(old: Side, new: Side, keys: Keys, helper: Executor) -> None:
    gone, came = differing_lines(old, new, "builds", helper)
    edited = decoded_ids(gone, Build) | decoded_ids(came, Build)
    gone, came = differing_lines(old, new, "build_commands", helper)
    decoder = msgspec.json.Decoder(CommandOwner)
    edited |= {decoder.decode(line).build for line in (*gone, *came)}
    for bid in old.builds.keys() - new.builds.keys():
        keys.add("removed", [build_key(bid)])
        keys.add("lists", build_lists(old, old.builds[bid]))
    for bid in new.builds.keys() - old.builds.keys():
        keys.add("added", [build_key(bid)])
        keys.add("lists", build_lists(new, new.builds[bid]))
    for bid in edited & old.builds.keys() & new.builds.keys():
        before, after = old.builds[bid], new.builds[bid]
        keys.add("changed", [build_key(bid)])
        if (before.project, before.date, before.commit) != (after.project, after.date, after.commit):
            keys.add("lists", build_lists(old, before) + build_lists(new, after))
        else:
            keys.big(build_lists(new, after))


def compare_pages(old: Side, new: Side, keys: Keys, helper: Executor) -> None:
    gone, came = differing_lines(old, new, "pages", helper)
    edited = decoded_ids(gone, PagePlace) | decoded_ids(came, PagePlace)
    removed = old.pages.keys() - new.pages.keys()
    added = new.pages.keys() - old.pages.keys()
    changed = edited & old.pages.keys() & new.pages.keys()
    if removed or added or changed:
        keys.extend(page_change_keys(removed, added, changed))
        keys.add("changed", ("search",))  # a page's words move every score: the index's statistics are global


def compare_users(old: Side, new: Side, keys: Keys) -> None:
    for uid in old.users.keys() | new.users.keys():
        before, after = old.users.get(uid), new.users.get(uid)
        if before != after:
            keys.extend(user_change_keys(before, after))
