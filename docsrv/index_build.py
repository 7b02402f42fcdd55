"""The search index, built in shards of versions, and built again shard by shard after a change.

A build of a version uploads its pages again (under new ids, the old ones deleted), so the pages
a change touches are those of a few versions. The index is kept in shards, each the pages of a
run of versions in id order: a changed page costs building its shard again and linking the
others. Each shard is a whole small index, in ``<index>/shards/<key>/``, its key the first
version of its run (the first shard's is 0):

    pages/       a tantivy index of the shard's pages (``search.build_schema``)
    entries/     a tantivy index of their named entries (``named_entries.py``)
    highlight/   their highlight files (``highlight.py``)
    shard.json   what the shard was made from (``Shard``)

A server opens the segments of every shard, in the order of their keys, as one index
(``search.open_index``). tantivy's BM25 statistics (how many documents, how many tokens a field
holds, how many documents hold a term) are sums over the segments, so a page scores exactly as
it does in one index of the same pages however they are split; and tantivy breaks a tie of
scores by the segment, then the document, so that every index of the same pages lists them in
one order, by version, then id, whatever its cuts. An index changed by deleting documents would
not answer alike: tantivy counts deleted documents until a merge. A shard is therefore built
again whole, never patched, and kept small: a whole build cuts the versions' runs at
``shard_size`` pages (a version with more is a shard alone), and a shard built again that grew
past twice that is cut again (``pieces``). What a change of one version's pages costs is
building the shard of that version, of at most SHARD_PAGES pages, not a share of the index.

What a shard is made of (``shard_digests``): the lines of its public pages in the snapshot's
pages file, in the shard's order, and the scope (the slugs of its project and version) of each
version it holds. What every shard is made of too: the operators the pages of the whole index
name (``code_syntax.operator_names``), which decide the syntax each page's text is found by;
when those change, every shard is built again (``plan_rebuild`` says so).

A shard built again keeps the earlier shard's ``entries/`` (hard links) when what it is made of
did not change (``entries_digest``: each page's id, scope, title, sections and named entries, in
order): a change of pages' text alone, under the same ids, costs the pages' index and highlight
files alone.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import msgspec
import tantivy

from . import code_syntax, named_entries
from .changelogs import is_changelog
from .highlight import MAX_SHARD_KEY, HighlightWriter, slot_of
from .search import (
    ENTRIES,
    HIGHLIGHT,
    PAGES,
    SCHEMA_VERSION,
    SHARDS_DIRECTORY,
    build_schema,
    quiet,
    shard_directories,
    version_scope,
)
from .snapshot.errors import ProblemList
from .snapshot.lines import decoded_blocks, describe
from .snapshot.load import record_file
from .snapshot.records import Page, PageHead, Version
from .store import Store
from .utils.files import link_or_copy
from .utils.progress import progress_bar, wanted

#: The most pages a whole build puts in a shard (a version with more is a shard alone): what a
#: change of one version's pages costs building, against what a search costs, which visits a
#: segment of each shard. At the medium scale (200,000 pages; ``bench/index_rebuild.py``) ...
SHARD_PAGES = 4096
#: The fewest shards an index of more than that many pages is cut into: a small index in shards
#: of a sixteenth of it, as large ones are.
MIN_SHARDS = 16
#: What a shard was made from, in its directory.
SHARD_FILE = "shard.json"
#: tantivy's memory for one shard's writer: the largest shard fits in one segment.
WRITER_HEAP = 128 << 20

#: Each page line of a shard to build it from: its version, id, the file it is in, its number
#: there (0 for a changeset's), and the line; by shard key.
ShardLines = dict[int, list[tuple[int, int, str, int, bytes]]]


class Shard(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one shard was built from: a digest of its pages and their scopes (``shard_digest``),
    how many pages it holds, the operators they name (the index's are those of every shard), and
    a digest of what its entries index was made of (``entries_digest``; empty in a shard built
    before it was recorded)."""

    digest: str
    pages: int
    operators: list[str]
    #: The ``search.SCHEMA_VERSION`` it was built with: a shard of another is not built from.
    schema: int
    entries: str = ""


class _Placed(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=False):
    """A page's line read for its id and version alone (the rest is skipped, not decoded)."""

    id: int
    version: int


_shard = msgspec.json.Decoder(Shard)
_named = msgspec.msgpack.Encoder()
_placed = msgspec.json.Decoder(_Placed)
_page = msgspec.json.Decoder(Page)


def shard_of(layout: Sequence[int], version: int) -> int:
    """The key of the shard of an index cut at ``layout`` (its shards' keys, in order, the first
    0) that holds ``version``'s pages: the last key at or before it."""
    return layout[bisect_right(layout, version) - 1]


def layout_of(index: Path) -> list[int]:
    """The keys of the shards of the index in ``index``, in order."""
    return list(shard_directories(index))


def shard_path(index: Path, shard: int) -> Path:
    return index / SHARDS_DIRECTORY / f"{shard:02d}"


def shard_size(pages: int) -> int:
    """How many pages each shard of an index of ``pages`` pages holds at most when it is cut."""
    return max(1, min(SHARD_PAGES, -(-pages // MIN_SHARDS)))


def cut(counts: Iterable[tuple[int, int]], size: int, first: int = 0) -> list[int]:
    """The keys of the shards that runs of versions make, from each version's number of pages
    (in the order of versions) and the most pages of a shard, the first shard's key ``first``.
    A shard starts at a version only if it is a key a slot holds (``highlight.MAX_SHARD_KEY``)."""
    keys, held = [first], 0
    for version, count in counts:
        if held and held + count > size and version <= MAX_SHARD_KEY:
            keys.append(version)
            held = 0
        held += count
    return keys


def served_blocks(store: Store) -> Iterator[tuple[str, int, list[_Placed], list[bytes]]]:
    """(file name, number of the first line, records, lines) of each block of ``store``'s
    snapshot's pages file, read again (a file changed since the store was loaded is a
    SnapshotError naming it). Each line is looked at once, in a loop of the caller's: at the large
    scale a generator of lines cost as much as reading them."""
    assert store.path is not None
    problems = ProblemList(str(store.path))
    for path in record_file(store.path, "pages"):
        for block, first, records in decoded_blocks(path, _Placed, problems):
            yield path.name, first, records, block.split(b"\n")
    problems.raise_if_any()


def _hasher() -> hashlib.blake2b:
    hasher = hashlib.blake2b(digest_size=16)
    hasher.update(f"schema {SCHEMA_VERSION}\n".encode())
    return hasher


def line_digest(line: bytes) -> bytes:
    return hashlib.blake2b(line, digest_size=16).digest()


def shard_digest(store: Store, rows: Iterable[tuple[int, bytes]]) -> str:
    """The digest of what a shard is made of, from (version, ``line_digest``) of each of its
    pages' lines in its order: those, and the scope of each version."""
    hasher, last = _hasher(), None
    for version, digest in rows:
        if version != last:
            hasher.update(f"{version} {scope_of(store, store.versions[version])}\n".encode())
            last = version
        hasher.update(digest)
    return hasher.hexdigest()


def shard_digests(store: Store, layout: Sequence[int]) -> dict[int, str]:
    """``shard_digest`` of each shard of ``store``'s index cut at ``layout`` that holds a public
    page of its snapshot's pages file, and of the first one always (an index of no pages is one
    empty shard)."""
    rows: dict[int, list[tuple[int, int, bytes]]] = {0: []}
    pages = store.pages
    shards: dict[int, int] = {}
    for _name, _first, records, lines in served_blocks(store):
        for record, line in zip(records, lines, strict=False):
            if record.id in pages:
                version = record.version
                shard = shards.get(version)
                if shard is None:
                    shard = shards[version] = shard_of(layout, version)
                rows.setdefault(shard, []).append((version, record.id, line_digest(line)))
    digests = {}
    for shard, held in sorted(rows.items()):
        held.sort()
        digests[shard] = shard_digest(store, ((version, digest) for version, _identity, digest in held))
    return digests


def scope_of(store: Store, page: PageHead | Version) -> str:
    """The scope a page of ``page`` (a page, or its version) is found under."""
    version = page if isinstance(page, Version) else store.versions[page.version]
    return version_scope(store.projects[version.project].slug, version.slug)


def version_scopes(store: Store, pages: list[Page]) -> dict[int, str]:
    """The scope of each version ``pages`` are of (``scope_of``), found once for all its pages."""
    return {version: scope_of(store, store.versions[version]) for version in {page.version for page in pages}}


def entries_digest(pages: list[Page], scopes: dict[int, str]) -> str:
    """A digest of what the entries index of a shard of ``pages`` (in its order, their versions'
    ``scopes``) is made of: each page's id (its slot is its place), scope, title, sections and
    named entries (``named_entries.documents``)."""
    hasher = _hasher()
    encode = _named.encode
    for page in pages:
        hasher.update(encode((page.id, scopes[page.version], page.title, page.sections, page.entries)))
    return hasher.hexdigest()


def build_index(store: Store, directory: Path, print_progress: bool | None = None) -> float:
    """Index every public page of ``store`` (loaded with the pages' text) into ``directory``, new
    or empty, in shards cut at ``shard_size`` pages; return the seconds taken.
    (``serving.build_index_aside`` builds beside the index in use and swaps.)"""
    started = time.perf_counter()
    pages = [page for page in store.pages_ordered if isinstance(page, Page)]
    if len(pages) != len(store.pages_ordered):
        raise TypeError("the index is built from a store loaded with the pages' text")
    pages.sort(key=_place)
    counts = store.versions_with_pages
    layout = cut(((version, counts[version]) for version in sorted(counts)), shard_size(len(pages)))
    digests = shard_digests(store, layout)
    by_shard: dict[int, list[Page]] = {shard: [] for shard in digests}
    for page in pages:
        by_shard[shard_of(layout, page.version)].append(page)
    named = {shard: code_syntax.operator_names(held) for shard, held in by_shard.items()}
    operators = frozenset().union(*named.values())
    with progress_bar(len(pages), "index pages", wanted() if print_progress is None else print_progress, unit="page") as bar:
        build_shards(store, directory, [(shard, held, digests[shard], named[shard]) for shard, held in by_shard.items()], operators,
                     None if bar is None else bar.update)
    return time.perf_counter() - started


def _place(page: PageHead) -> tuple[int, int]:
    """Where a page is in the index: by version, then id."""
    return page.version, page.id


def build_shards(store: Store, index: Path, shards: list[tuple[int, list[Page], str, frozenset[str]]], operators: frozenset[str],
                 built: Callable[[int], object] | None = None, earlier: Path | None = None) -> None:
    """Build ``shards`` (number, pages, digest, the operators those pages name) in ``index``, one after another: the commit of one
    (tantivy's, without the GIL) runs in a thread while the next one's pages are added, so both
    cores work (one at a time, each shard's writer had the build take a fifth longer than one
    index's of two threads). ``built`` is told how many pages each shard held. A shard of
    ``earlier`` (an index) whose entries index was made of the same keeps it (``entries_digest``)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="docsrv-commit") as committing:
        previous: Future[None] | None = None
        for shard, pages, digest, named in shards:
            scopes = version_scopes(store, pages)
            made = Shard(digest=digest, pages=len(pages), operators=sorted(named), schema=SCHEMA_VERSION,
                         entries=entries_digest(pages, scopes))
            kept = earlier_entries(shard_path(earlier, shard), made.entries) if earlier is not None else None
            commit = build_shard(index, shard, pages, scopes, operators, made, kept)
            if previous is not None:
                previous.result()  # one commit at a time: a shard's writer holds WRITER_HEAP until it is done
            previous = committing.submit(commit)
            if built is not None:
                built(len(pages))
        if previous is not None:
            previous.result()


def earlier_entries(shard: Path, digest: str) -> Path | None:
    """The entries index of the shard in ``shard``, if it was made of what ``digest`` says."""
    try:
        was = _shard.decode((shard / SHARD_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return shard / ENTRIES if was.entries == digest else None


def build_shard(index: Path, shard: int, pages: list[Page], scopes: dict[int, str], operators: frozenset[str],
                made: Shard, kept_entries: Path | None = None) -> Callable[[], None]:
    """Add one shard's ``pages`` (in id order, their versions' ``scopes``) to an index of its own
    in ``index``, ``operators`` being those of the whole index; return what commits it and writes
    what it was ``made`` from. With ``kept_entries``, an entries index made of the same, its files
    are linked instead."""
    directory = shard_path(index, shard)
    (directory / PAGES).mkdir(parents=True)
    documents = quiet(tantivy.Index(build_schema(), path=str(directory / PAGES))).writer(heap_size=WRITER_HEAP, num_threads=1)
    entries = None
    if kept_entries is not None:
        link_files(kept_entries, directory / ENTRIES)
    else:
        (directory / ENTRIES).mkdir()
        entries_index = quiet(tantivy.Index(named_entries.build_schema(), path=str(directory / ENTRIES)))
        entries = entries_index.writer(heap_size=64 << 20, num_threads=1)
    with HighlightWriter(directory / HIGHLIGHT) as highlights:
        for page in pages:
            scope = scopes[page.version]
            slot = slot_of(shard, highlights.add(page.id, page.text))
            changelog = is_changelog(page.title, [section.title for section in page.sections])
            documents.add_document(
                tantivy.Document(
                    scope=scope,
                    slot=slot,
                    changelog=int(changelog),
                    title=page.title,
                    headings=" ".join(section.title for section in page.sections),
                    body=page.text,
                    path=page.document_name,
                    symbols=" ".join(code_syntax.page_tokens(page.text, operators)),
                )
            )
            if entries is not None:
                for document in named_entries.documents(page, scope, slot, changelog):
                    entries.add_json(document)

    def commit() -> None:
        for writer in (documents, entries):
            if writer is not None:
                writer.commit()
                writer.wait_merging_threads()
        (directory / SHARD_FILE).write_bytes(msgspec.json.encode(made))

    return commit


@dataclass(frozen=True)
class Rebuild:
    """What building an index again from an earlier one takes: the shards to build (those whose
    pages changed, and the shards a grown one is cut into), with their pages (their text read
    again), and the digest of every shard of the index it makes."""

    previous: Path
    digests: dict[int, str]
    changed: dict[int, list[Page]]
    operators: frozenset[str]
    #: The operators the pages of each changed shard name.
    named: dict[int, frozenset[str]]


def read_shards(index: Path) -> dict[int, Shard] | None:
    """What each shard of the index in ``index`` was built from, by key; None when one does not
    read, or is of another schema (and so of another order of pages)."""
    try:
        shards = {shard: _shard.decode((directory / SHARD_FILE).read_bytes()) for shard, directory in shard_directories(index).items()}
    except (OSError, ValueError):
        return None
    if 0 not in shards or any(shard.schema != SCHEMA_VERSION for shard in shards.values()):
        return None
    return shards


def plan_rebuild(store: Store, previous: Path) -> Rebuild | None:
    """What building the index of ``store`` (loaded without its pages' text) from the index in
    ``previous`` takes, cut as ``previous`` is; None when every shard must be built
    (``build_index``): the operators the pages name changed, or ``previous`` does not say what
    its shards were built from."""
    before = read_shards(previous)
    if before is None:
        return None
    layout = sorted(before)
    digests = shard_digests(store, layout)
    kept = {shard: digest for shard, digest in digests.items() if shard in before and before[shard].digest == digest}
    wanted_shards = digests.keys() - kept.keys()
    # A server loads pages without their text, sections and entries, which it does not check:
    # those of the changed shards are checked here, where the index is built from them.
    lines = read_shard_lines(store, {}, {}, layout, wanted_shards) if wanted_shards else {}
    return planned(store, previous, before, kept, lines)


def plan_changed_shards(store: Store, changes: Mapping[int, tuple[str, bytes] | None], versions: set[int], previous: Path,
                        places: PageLines | None = None) -> Rebuild | None:
    """What building the index of ``store`` from the index in ``previous`` takes when ``store`` is
    its snapshot's (``store.path``) with the pages ``changes`` makes (by id: where each new line is
    from and the line, or None for a page deleted; changesets applied in memory), the pages of
    ``versions`` (before or after) being those they touched: the shards of those versions built
    again from the snapshot's lines of theirs with the changes made. The lines are found by
    ``places`` when it is given and can (else the pages file is read through). None, as
    ``plan_rebuild``, when the operators the pages name change or ``previous`` does not say what
    it was built from."""
    before = read_shards(previous)
    if before is None:
        return None
    layout = sorted(before)
    shards = {shard_of(layout, version) for version in versions}
    placed = {identity: (where, _placed.decode(line), line) for identity, found in changes.items() if found is not None
              for where, line in (found,)}
    found = places.shard_lines(store, changes, placed, layout, shards) if places is not None else None
    lines = found if found is not None else read_shard_lines(store, changes, placed, layout, shards)
    return planned(store, previous, before, {shard: found.digest for shard, found in before.items() if shard not in shards}, lines)


def planned(store: Store, previous: Path, before: dict[int, Shard], kept: dict[int, str], lines: ShardLines) -> Rebuild | None:
    """The plan to build again the shards whose ``lines`` are given (a grown one cut again:
    ``pieces``; one whose pages all left gone, but the first) and to link the others of
    ``previous`` (whose shards were built from ``before``), those whose digests are ``kept``;
    None when the operators the pages name change."""
    size = shard_size(len(store.pages))
    problems = ProblemList(str(store.path))
    digests = dict(kept)
    changed: dict[int, list[Page]] = {}
    for shard, held in sorted(lines.items()):
        held.sort(key=_row_place)
        for key, piece in pieces(shard, held, size):
            if not piece and key != 0:
                continue  # its versions' next pages go to the shard before it
            digests[key] = shard_digest(store, ((version, line_digest(line)) for version, _identity, _where, _number, line in piece))
            changed[key] = []
            for _version, _identity, where, number, line in piece:
                try:
                    changed[key].append(_page.decode(line))
                except msgspec.DecodeError as error:
                    problems.add(where, number or None, describe(error))
    problems.raise_if_any()
    named = {shard: code_syntax.operator_names(pages) for shard, pages in changed.items()}
    operators = frozenset().union(*(before[shard].operators for shard in kept), *named.values())
    if operators != frozenset().union(*(shard.operators for shard in before.values())):
        return None
    return Rebuild(previous, dict(sorted(digests.items())), changed, operators, named)


def _row_place(row: tuple[int, int, str, int, bytes]) -> tuple[int, int]:
    return row[0], row[1]


def pieces(shard: int, rows: list[tuple[int, int, str, int, bytes]], size: int) -> list[tuple[int, list[tuple[int, int, str, int, bytes]]]]:
    """The shards (key, rows) that a shard built again of ``rows`` (in its order) makes: itself,
    or, when it holds more than twice ``size`` pages, the shards ``cut`` makes of its versions."""
    if len(rows) <= 2 * size:
        return [(shard, rows)]
    counts: dict[int, int] = {}
    for version, *_rest in rows:
        counts[version] = counts.get(version, 0) + 1
    keys = cut(counts.items(), size, first=shard)
    made: dict[int, list[tuple[int, int, str, int, bytes]]] = {key: [] for key in keys}
    for row in rows:
        made[shard_of(keys, row[0])].append(row)
    return list(made.items())


def read_shard_lines(store: Store, changes: Mapping[int, object], placed: dict[int, tuple[str, _Placed, bytes]],
                     layout: Sequence[int], shards: Iterable[int]) -> ShardLines:
    """The lines of ``shards`` of an index cut at ``layout`` (``plan_changed_shards``), the
    snapshot's pages file read through."""
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
                held_by_version[version] = lines.get(shard_of(layout, version))
            held = held_by_version[version]
            if held is not None:
                held.append((version, identity, name, number, line))
    _add_changed(lines, placed, layout, pages)
    return lines


def _add_changed(lines: ShardLines, placed: dict[int, tuple[str, _Placed, bytes]], layout: Sequence[int],
                 pages: Mapping[int, object]) -> None:
    """Add to ``lines`` the public pages a change ``placed`` in their shards."""
    for identity, (where, record, line) in placed.items():
        held = lines.get(shard_of(layout, record.version))
        if held is not None and identity in pages:
            held.append((record.version, identity, where, 0, line))


class PageLines:
    """Where each line of a snapshot's pages file is, by version (read in one pass, once), so
    that building a shard again reads its own lines alone: at the large scale, reading the file
    through took about 4 s of each changeset's 16-20 s. A pages file that is compressed has no
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

    def shard_lines(self, store: Store, changes: Mapping[int, object], placed: dict[int, tuple[str, _Placed, bytes]],
                    layout: Sequence[int], shards: Iterable[int]) -> ShardLines | None:
        """The lines of ``shards`` of an index cut at ``layout`` (``plan_changed_shards``), each
        found where it is; None when ``store``'s pages file is not this one."""
        if store.path is None or record_file(store.path, "pages") != [self.path]:
            return None
        lines: ShardLines = {shard: [] for shard in shards}
        pages, name = store.pages, self.path.name
        ids, offsets, lengths, numbers = self.rows
        for shard, held in lines.items():
            after = bisect_right(layout, shard)
            first = bisect_left(self.versions, shard)
            last = bisect_left(self.versions, layout[after]) if after < len(layout) else len(self.versions)
            for at in range(first, last):
                version = self.versions[at]
                for row in range(self.starts[at], self.starts[at + 1]):
                    identity = ids[row]
                    if identity not in changes and identity in pages:
                        assert self.map is not None
                        held.append((version, identity, name, numbers[row], self.map[offsets[row]:offsets[row] + lengths[row]]))
        _add_changed(lines, placed, layout, pages)
        return lines


def rebuild_index(store: Store, plan: Rebuild, directory: Path) -> float:
    """Build the index of ``store`` into ``directory``, new or empty, as ``plan`` says: the shards
    that changed built again, the others hard links to the earlier index's files (never written
    again once made). Return the seconds taken."""
    started = time.perf_counter()
    for shard in plan.digests.keys() - plan.changed.keys():
        link_files(shard_path(plan.previous, shard), shard_path(directory, shard))
    build_shards(store, directory, [(shard, pages, plan.digests[shard], plan.named[shard]) for shard, pages in plan.changed.items()],
                 plan.operators, earlier=plan.previous)
    return time.perf_counter() - started


def link_files(source: Path, target: Path) -> None:
    """Hard links in ``target`` to every file of the index (a shard, or a part of one) in
    ``source`` (tantivy's own hidden files aside: locks and its list of files, which a reader
    does not need)."""
    for root, _directories, files in os.walk(source):
        here = target / Path(root).relative_to(source)
        here.mkdir(parents=True, exist_ok=True)
        for name in files:
            if not name.startswith("."):
                link_or_copy(Path(root) / name, here / name)
