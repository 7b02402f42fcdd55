"""The search index built again after a change, shard by shard: the shards whose pages changed are
built (``build.build_shards``), the others linked from the earlier index (``build.py`` says why a
shard is built whole, never patched). ``plan_rebuild`` plans it from a snapshot,
``plan_changed_shards`` from the pages a changeset changes."""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from array import array
from bisect import bisect_left
from collections.abc import Container, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from ..snapshot.errors import DECODE_ERRORS, ProblemList
from ..snapshot.lines import describe
from ..snapshot.load import record_file
from ..snapshot.records import Page
from ..store.loaded import Store
from .build import (
    PAGE_DECODER,
    PLACED_DECODER,
    SHARD_HEAD_DECODER,
    NamedOperators,
    Placed,
    Recorded,
    ShardHead,
    ShardLines,
    build_shards,
    line_digest,
    link_files,
    operators_by_page,
    served_blocks,
    shard_digest,
    shard_digests,
    write_listing,
)
from .index_files import (
    SCHEMA_VERSION,
    SHARD_FILE,
    SHARDS_DIRECTORY,
    ListingParts,
    listed_shard,
    listing_parts,
    shard_directories,
    shard_path,
)
from .shards import Layout


@dataclass(frozen=True)
class Rebuild:
    """What building an index again from an earlier one takes: the shards whose pages changed,
    with those pages (their text read again), and the digest of every shard."""

    previous: Path
    width: int
    digests: dict[int, str]
    changed: dict[int, list[Page]]
    operators: frozenset[str]
    #: The operators each page of each changed shard names (``operators_by_page``).
    named: dict[int, NamedOperators]
    #: What the earlier index's shards hold of the pages whose text did not change, by key (of
    #: the changed shards that were in it; none when any page's text may have changed).
    recorded: dict[int, Recorded] = field(default_factory=dict)


def read_shards(index: Path, width: int) -> dict[int, ShardHead] | None:
    """What each shard of the index in ``index`` was built from, by key (what a plan reads of it);
    None when one does not read, or is of another schema or block width (``Layout``)."""
    try:
        shards = {shard: SHARD_HEAD_DECODER.decode((directory / SHARD_FILE).read_bytes())
                  for shard, directory in shard_directories(index).items()}
    except (OSError, ValueError):
        return None
    if 0 not in shards or any(shard.schema != SCHEMA_VERSION or shard.width != width for shard in shards.values()):
        return None
    return shards


def plan_rebuild(store: Store, previous: Path) -> Rebuild | None:
    """What building the index of ``store`` (loaded without its pages' text) from the index in
    ``previous`` takes; None when every shard must be built (``build_index``): the operators the
    pages name or the block width changed, or ``previous`` does not say what its shards were
    built from."""
    layout = Layout.of(store)
    before = read_shards(previous, layout.width)
    if before is None:
        return None
    digests = shard_digests(store, layout)
    kept = {shard: digest for shard, digest in digests.items() if shard in before and before[shard].digest == digest}
    wanted_shards = digests.keys() - kept.keys()
    # A server loads pages without their text, sections and entries, which it does not check:
    # those of the changed shards are checked here, where the index is built from them.
    lines = read_shard_lines(store, {}, {}, layout, wanted_shards) if wanted_shards else {}
    return planned(store, previous, before, kept, lines, layout.width)


def plan_changed_shards(store: Store, changes: Mapping[int, tuple[str, bytes] | None], versions: set[int], previous: Path,
                        places: PageLines | None = None) -> Rebuild | None:
    """What building the index of ``store`` from the index in ``previous`` takes when ``store`` is
    its snapshot's (``store.path``) with the pages ``changes`` makes (by id: where each new line is
    from and the line, or None for a page deleted; changesets applied in memory), the pages of
    ``versions`` being those they touched: the shards those versions' pages were in or are in
    now built again, from the snapshot's lines of theirs with the changes made. The lines are
    found by ``places`` when it is given and can (else the pages file is read through). None,
    as ``plan_rebuild``, when the operators the pages name or the block width change, or
    ``previous`` does not say what it was built from."""
    layout = Layout.of(store)
    before = read_shards(previous, layout.width)
    if before is None:
        return None
    shards = {shard for version in versions for shard in (layout.block(version), layout.alone(version))
              if shard in before or shard == layout.shard_of(version)}
    placed = {identity: (where, PLACED_DECODER.decode(line), line) for identity, found in changes.items() if found is not None
              for where, line in (found,)}
    found = places.shard_lines(store, changes, placed, layout, shards) if places is not None else None
    lines = found if found is not None else read_shard_lines(store, changes, placed, layout, shards)
    kept = {shard: found.digest for shard, found in before.items() if shard not in shards}
    return planned(store, previous, before, kept, lines, layout.width, changes.keys())


def planned(store: Store, previous: Path, before: dict[int, ShardHead], kept: dict[int, str], lines: ShardLines,
            width: int, changed_pages: Container[int] | None = None) -> Rebuild | None:
    """The plan to build again the shards whose ``lines`` are given (one whose pages all left is
    gone, but shard 0) and to link the others of ``previous`` (whose shards were built from
    ``before``), those whose digests are ``kept``, ``changed_pages`` being the ids of the pages
    whose text may differ from ``previous``'s (None: any page's); None when the operators the
    pages name change."""
    problems = ProblemList(str(store.path))
    digests = dict(kept)
    changed: dict[int, list[Page]] = {}
    for shard, held in sorted(lines.items()):
        if not held and shard != 0:
            continue
        held.sort(key=_row_place)
        digests[shard] = shard_digest(store, ((version, line_digest(line)) for version, _identity, _where, _number, line in held))
        changed[shard] = []
        for _version, _identity, where, number, line in held:
            try:
                changed[shard].append(PAGE_DECODER.decode(line))
            except DECODE_ERRORS as error:
                problems.add(where, number or None, describe(error))
    problems.raise_if_any()
    recorded = {shard: found for shard in changed if changed_pages is not None and shard in before
                and (found := Recorded.open(shard_path(previous, shard), changed_pages)) is not None}
    named = {shard: operators_by_page(pages, recorded.get(shard)) for shard, pages in changed.items()}
    operators = frozenset().union(*(before[shard].operators for shard in kept), *(names for by_page in named.values()
                                                                                 for names in by_page.values()))
    if operators != frozenset().union(*(shard.operators for shard in before.values())):
        return None
    return Rebuild(previous, width, dict(sorted(digests.items())), changed, operators, named, recorded)


def _row_place(row: tuple[int, int, str, int, bytes]) -> tuple[int, int]:
    return row[0], row[1]


def read_shard_lines(store: Store, changes: Mapping[int, object], placed: dict[int, tuple[str, Placed, bytes]],
                     layout: Layout, shards: Iterable[int]) -> ShardLines:
    """The lines of ``shards`` (``plan_changed_shards``), the snapshot's pages file read through."""
    lines: ShardLines = {shard: [] for shard in shards}
    pages = store.pages
    held_by_version: dict[int, list[tuple[int, int, str, int, bytes]] | None] = {}
    for name, first, records, block in served_blocks(store):
        for number, (record, line) in enumerate(zip(records, block, strict=False), start=first):
            identity = record.id
            if identity in changes or identity not in pages:
                continue
            version = record.version
            if version not in held_by_version:
                held_by_version[version] = lines.get(layout.shard_of(version))
            held = held_by_version[version]
            if held is not None:
                held.append((version, identity, name, number, line))
    _add_changed(lines, placed, layout, pages)
    return lines


def _add_changed(lines: ShardLines, placed: dict[int, tuple[str, Placed, bytes]], layout: Layout, pages: Mapping[int, object]) -> None:
    """Add to ``lines`` the public pages a change ``placed`` in their shards."""
    for identity, (where, record, line) in placed.items():
        held = lines.get(layout.shard_of(record.version))
        if held is not None and identity in pages:
            held.append((record.version, identity, where, 0, line))


class PageLines:
    """Where each line of a snapshot's pages file is, by version (read in one pass, once), so
    that building a shard again reads its own lines alone, not the whole file. A pages file that is compressed has no
    places of lines (``of`` gives none)."""

    def __init__(self, path: Path, versions: array, starts: array, rows: tuple[array, array, array, array]) -> None:
        self.path = path
        #: The versions the file holds pages of, in order, and where the rows of each start
        #: (one more: where the last one's end).
        self.versions = versions
        self.starts = starts
        #: Each line's page id, offset, length and number, by version, in the file's order.
        self.rows = rows
        with open(path, "rb") as file:
            self.map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if path.stat().st_size else None

    @classmethod
    def of(cls, store: Store) -> PageLines | None:
        """The places of the lines of ``store``'s snapshot's pages file; None when it is compressed."""
        assert store.path is not None
        files = record_file(store.path, "pages")
        if len(files) != 1 or files[0].suffix != ".jsonl":
            return None
        found = version_of, ids, offsets, lengths, numbers = tuple(array("q") for _column in range(5))
        offset = 0
        for _name, first, records, lines in served_blocks(store):
            for number, (record, line) in enumerate(zip(records, lines, strict=False), start=first):
                for column, value in zip(found, (record.version, record.id, offset, len(line), number), strict=True):
                    column.append(value)
                offset += len(line) + 1
        order = sorted(range(len(ids)), key=version_of.__getitem__)  # stable: the file's order within a version
        rows = tuple(array("q", (column[at] for at in order)) for column in (ids, offsets, lengths, numbers))
        versions, starts = array("q"), array("q")
        for place, at in enumerate(order):
            if not versions or versions[-1] != version_of[at]:
                versions.append(version_of[at])
                starts.append(place)
        starts.append(len(order))
        return cls(files[0], versions, starts, rows)  # type: ignore[arg-type]

    def shard_lines(self, store: Store, changes: Mapping[int, object], placed: dict[int, tuple[str, Placed, bytes]],
                    layout: Layout, shards: Iterable[int]) -> ShardLines | None:
        """The lines of ``shards`` (``plan_changed_shards``), each found where it is; None when
        ``store``'s pages file is not this one."""
        if store.path is None or record_file(store.path, "pages") != [self.path]:
            return None
        lines: ShardLines = {shard: [] for shard in shards}
        pages, name = store.pages, self.path.name
        ids, offsets, lengths, numbers = self.rows
        for shard, held in lines.items():
            low, high = layout.versions_of(shard)
            first = bisect_left(self.versions, low)
            last = bisect_left(self.versions, high) if high is not None else len(self.versions)
            for at in range(first, last):
                version = self.versions[at]
                if layout.shard_of(version) != shard:
                    continue
                for row in range(self.starts[at], self.starts[at + 1]):
                    identity = ids[row]
                    if identity not in changes and identity in pages:
                        assert self.map is not None
                        held.append((version, identity, name, numbers[row], self.map[offsets[row]:offsets[row] + lengths[row]]))
        _add_changed(lines, placed, layout, pages)
        return lines


def rebuild_index(store: Store, plan: Rebuild, directory: Path, built_in: Path | None = None) -> float:
    """Build the index of ``store`` into ``directory``, new or empty, as ``plan`` says: the shards
    that changed built again, the others hard links to the earlier index's files (never written
    again once made). With ``built_in`` (a new directory), the shards that changed are built
    there instead, and every shard of ``directory`` is a relative symbolic link to the directory
    its files are in: a changeset's index (``replica/changeset_index.py``), which then costs its own
    shards and a link a shard, not a tree of links to every file of the index (at the large
    scale, 372 directories and 1,900 links, a fifth of a sidecar's time under load). The links of
    the shards kept are made in a thread while the others are built (a system call each, without
    the GIL). Return the seconds taken."""
    started = time.perf_counter()
    building = [(shard, pages, plan.digests[shard], plan.named[shard]) for shard, pages in plan.changed.items()]
    if built_in is None:
        for shard in plan.digests.keys() - plan.changed.keys():
            link_files(shard_path(plan.previous, shard), shard_path(directory, shard))
        build_shards(store, directory, building, plan.operators, plan.width, earlier=plan.previous, recorded=plan.recorded)
    else:
        (directory / SHARDS_DIRECTORY).mkdir(parents=True)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="docsrv-links") as linking:
            kept = linking.submit(link_shards, directory, plan.previous, [key for key in plan.digests if key not in plan.changed])
            build_shards(store, built_in, building, plan.operators, plan.width, earlier=plan.previous, recorded=plan.recorded)
            kept.result()
        link_shards(directory, built_in, list(plan.changed))
    write_listing(directory, listing_after(plan, directory))
    return time.perf_counter() - started


def link_shards(directory: Path, home: Path, keys: list[int]) -> None:
    """Link each shard of ``keys`` of the index in ``directory`` (a relative symbolic link) to
    where its files are: the same shard in the index in ``home``, or where that shard links. A
    shard of an earlier changeset's index beside it is that link itself, linked (a hard link: a
    name, not a new inode; a file system allocated and freed an inode for each shard of each
    changeset's index otherwise, which made the links a large part of a changeset's cost)."""
    here = os.path.realpath(directory / SHARDS_DIRECTORY)
    there = os.path.realpath(home / SHARDS_DIRECTORY)
    towards = os.path.relpath(there, here)
    beside = os.path.dirname(os.path.dirname(here)) == os.path.dirname(os.path.dirname(there))  # its links resolve alike here
    for key in keys:
        name = shard_path(directory, key).name
        source, made = os.path.join(there, name), os.path.join(here, name)
        if beside and os.path.islink(source):
            try:
                os.link(source, made, follow_symlinks=False)
                continue
            except OSError:  # a file system without hard links of symbolic links: a link of its own
                pass
        target = os.path.join(towards, name)
        with contextlib.suppress(OSError):  # a directory: a whole index's own, not a changeset's
            # A shard of an earlier changeset's index is a link: to where it links, in one system
            # call (a real path takes a dozen).
            target = os.path.normpath(os.path.join(towards, os.readlink(source)))
        os.symlink(target, made)


def listing_after(plan: Rebuild, index: Path) -> ListingParts | None:
    """The listing of the index built in ``index`` as ``plan`` says: the earlier index's parts of
    the shards kept, as written there (neither decoded nor encoded again: at a changeset, what is
    read and written stays in proportion to the change), the shards built again listed anew; None
    when the earlier index has none of its block width, or lacks a shard kept."""
    earlier = listing_parts(plan.previous)
    if earlier is None or earlier.width != plan.width or not plan.digests.keys() - plan.changed.keys() <= earlier.shards.keys():
        return None
    shards = {}
    for key in plan.digests:
        if key in plan.changed:
            width, listed = listed_shard(shard_path(index, key))
            if width != plan.width:
                return None
            shards[key] = msgspec.Raw(msgspec.json.encode(listed))
        else:
            shards[key] = earlier.shards[key]
    return ListingParts(plan.width, shards)
