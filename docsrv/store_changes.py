"""A changeset applied to a loaded store in memory: the store it makes, sharing all it does not change.

A server that follows a replica's changesets (``following.py``) applies each one in every worker,
without a reload. What is applied in memory is what the service changes every few seconds:
builds and their commands. A changeset that changes any other kind is not applied here: the pull
writes the snapshot it makes, checks it whole, and points ``current`` at it (a reload).

The store made is a new one; the one it is made from is never changed, so a request in flight
keeps reading one state. Builds by id and by project are overlays of the changes on the loaded
dictionaries (``utils/positions.Overlay``); a build that keeps its place is replaced where it
stands in the ordered list (``Replaced``); commit lookups resolve through the current builds
(``PatchedOrder``). What a changeset costs is then what it changed, but for a build that joins,
leaves or moves: the ordered list is copied, which touches every build and takes their pages out
of the workers' copy-on-write sharing (``bench/live.py`` measures what that costs); a fold's
reload shares them again.
"""

from __future__ import annotations

import copy
from bisect import bisect_left
from collections.abc import Mapping
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any

import msgspec

from .snapshot.changeset import Changeset, product_manifest
from .snapshot.commands import ChangedCommands, CommandFile
from .snapshot.records import Build, BuildCommand
from .store import Store
from .utils.positions import Overlay, PatchedOrder, Replaced

#: The kinds a changeset may change to be applied in memory.
LIVE_KINDS = frozenset({"builds", "build_commands"})
#: Where a build stands among builds: served newest first, then by id (``served_records``).
RANK = attrgetter("date", "id")

_build = msgspec.json.Decoder(Build)
_command = msgspec.json.Decoder(BuildCommand)


class Applied(msgspec.Struct, frozen=True):
    """A changeset applied: the store it makes, and each changed build as served before and after
    (the slug of its project and the build; None where it is not served)."""

    store: Store
    builds: dict[int, tuple[tuple[str, Build] | None, tuple[str, Build] | None]]


def in_memory(changeset: Changeset, public_url: str) -> bool:
    """Whether a server applies ``changeset`` in memory to a snapshot published at ``public_url``:
    it changes builds and their commands alone, names the build of each command it deletes, and
    keeps the public URL (which every reply's links begin with)."""
    return (changeset.kinds <= LIVE_KINDS and changeset.deletes["build_commands"] <= changeset.deleted_commands.keys()
            and changeset.header.product.public_url.rstrip("/") == public_url.rstrip("/"))


def applied(store: Store, changeset: Changeset, published_at: datetime | None = None) -> Applied | None:
    """The store ``changeset`` makes of ``store``; None when it is not applied in memory
    (``in_memory``) or does not follow ``store`` (by name: its sequence is the follower's to
    check, ``following.pending``). A build of a version the store does not serve
    is not served (the version is private: the publisher checked the snapshot it made whole)."""
    header = changeset.header
    product = product_manifest(changeset)
    if not in_memory(changeset, store.public_url) or header.follows != store.name:
        return None
    upserted = {identity: build for identity, line in changeset.upserts["builds"].items()
                if (build := _build.decode(line)).version in store.versions}
    before = {i: store.builds[i] for i in (*changeset.upserts["builds"], *changeset.deletes["builds"]) if i in store.builds}
    changes: dict[int, Build | None] = dict.fromkeys((*changeset.deletes["builds"], *changeset.upserts["builds"]))
    changes.update(upserted)
    builds = Overlay.of(store.builds, changes)
    commands, commanded = changed_commands(store, changeset)
    # A build that keeps its project and its place among builds is replaced where it stands;
    # the others leave (``gone``) and join (``came``) the lists.
    replaced = {i: b for i, b in upserted.items() if i in before and placement(before[i]) == placement(b)}
    gone = [b for i, b in before.items() if i not in replaced]
    came = [b for i, b in upserted.items() if i not in replaced]
    changed = set(before) | set(upserted)
    made = copy.copy(store)
    made.manifest, made.name, made.created_at, made.published_at = product, product.name, product.created_at, published_at
    made.builds = builds
    made.builds_ordered = reordered(store.builds_ordered, gone, came, replaced)
    made.builds_of_project = regrouped(store.builds_of_project, gone, came, replaced)
    moved = [b for b in came if b.id not in before or before[b.id].commit != b.commit]
    made.builds_by_commit = PatchedOrder.of(store.builds_by_commit, builds, moved, attrgetter("id"), attrgetter("commit"), RANK)
    made.commands = commands
    counted = changed | commanded
    made.counts = {**store.counts, "builds": len(builds), "build_commands": store.counts["build_commands"] + sum(
        (commands.count_of(b) if b in builds else 0) - (store.commands.count_of(b) if b in store.builds else 0) for b in counted
    )}
    # A build whose commands changed shows otherwise: its replies and lists show its commands.
    shown = {identity: (served(store, store.builds.get(identity)), served(store, builds.get(identity))) for identity in counted}
    return Applied(made, shown)


def served(store: Store, build: Build | None) -> tuple[str, Build] | None:
    return (store.projects[build.project].slug, build) if build is not None else None


def changed_commands(store: Store, changeset: Changeset) -> tuple[CommandFile | ChangedCommands, set[int]]:
    """The store's commands with the changeset's applied, and the builds whose commands changed."""
    upserts, deletes = changeset.upserts["build_commands"], changeset.deletes["build_commands"]
    if not upserts and not deletes:
        return store.commands, set()
    upserted: dict[int, dict[int, BuildCommand]] = {}
    for identity, line in upserts.items():
        command = _command.decode(line)
        upserted.setdefault(command.build, {})[identity] = command
    deleted: dict[int, set[int]] = {}
    for identity in deletes:
        deleted.setdefault(changeset.deleted_commands[identity], set()).add(identity)
    touched = set(upserted) | set(deleted)
    base, changed = (store.commands.base, dict(store.commands.changed)) if isinstance(store.commands, ChangedCommands) \
        else (store.commands, {})
    for build in touched:
        new, gone = upserted.get(build, {}), deleted.get(build, set())
        # As ``changeset.apply`` writes them: changed in place, the deleted left out, the new after.
        listed = [new.pop(c.id, c) for c in store.commands.in_file_order(build) if c.id not in gone]
        changed[build] = listed + list(new.values())
    return ChangedCommands(base, changed), touched


class Newest:
    """A rank compared the other way round: bisection over a list sorted highest first."""

    __slots__ = ("rank",)

    def __init__(self, rank: Any) -> None:
        self.rank = rank

    def __lt__(self, other: Newest) -> bool:
        return bool(self.rank > other.rank)


def newest_key(build: Build) -> Newest:
    return Newest(RANK(build))


def placement(build: Build) -> tuple:
    """What decides where a build stands in the store's lists: its project, and its rank."""
    return build.project, build.date, build.id


def reordered(items: list[Build] | Replaced[Build], gone: list[Build], came: list[Build],
              replaced: dict[int, Build]) -> list[Build] | Replaced[Build]:
    """``items`` (highest rank first) with the builds ``replaced`` in their places, without those
    ``gone``, and with those that ``came`` in theirs. Replacements alone make a ``Replaced`` of
    the list; a change of its members makes a new list (``rearranged``)."""
    if not (gone or came or replaced):
        return items
    at = {bisect_left(items, newest_key(build), key=newest_key): build for build in replaced.values()}
    if not (gone or came):
        return Replaced.of(items, at)
    whole = Replaced.of(items, at)
    return rearranged(whole.base, whole.at, gone, came)


def regrouped(groups: Mapping[int, list[Build]], gone: list[Build], came: list[Build], replaced: dict[int, Build]) -> Overlay[list[Build]]:
    """The builds of each project (highest rank first), with the lists of projects whose builds
    changed made again; a project left without builds has no group, as in a store loaded whole."""
    by_project: dict[int, tuple[list[Build], list[Build], list[Build]]] = {}
    for place, builds in enumerate((gone, came, replaced.values())):
        for build in builds:
            by_project.setdefault(build.project, ([], [], []))[place].append(build)
    changes: dict[int, list[Build] | None] = {}
    for project, (left, joined, kept) in by_project.items():
        items = groups.get(project, [])
        at = {bisect_left(items, newest_key(build), key=newest_key): build for build in kept}
        changes[project] = rearranged(items, at, left, joined) or None
    return Overlay.of(groups, changes)


#: What ``rearranged`` does at a position of the list: put a build in before the one there,
#: replace the one there, or leave it out (in this order at one position).
_PUT_IN, _REPLACE, _LEAVE_OUT = 0, 1, 2


def rearranged(items: list[Build], at: Mapping[int, Build], gone: list[Build], came: list[Build]) -> list[Build]:
    """A new list of ``items`` (highest rank first) with the builds ``at`` positions replaced,
    those ``gone`` left out and those that ``came`` put in their places. Each change is found by
    bisection and the list is assembled from the slices between them: one copy of the list
    however many builds changed (changing a list in place moves its tail once a change: a
    thousand changes of the two million builds of the large scale took over a second)."""
    replacing = dict(at)
    edits: list[tuple[int, int, Build | None]] = []
    for build in gone:
        position = bisect_left(items, newest_key(build), key=newest_key)
        if position < len(items) and items[position].id == build.id:
            replacing.pop(position, None)
            edits.append((position, _LEAVE_OUT, None))
    edits += [(position, _REPLACE, build) for position, build in replacing.items()]
    # Highest rank first, so that builds put in at one position keep that order (the sort is stable).
    edits += [(bisect_left(items, newest_key(build), key=newest_key), _PUT_IN, build)
              for build in sorted(came, key=RANK, reverse=True)]
    edits.sort(key=itemgetter(0, 1))
    result: list[Build] = []
    start = 0
    for position, edit, standing in edits:
        result += items[start:position]
        if standing is not None:
            result.append(standing)
        start = position if edit == _PUT_IN else position + 1
    result += items[start:]
    return result
