"""The search index, built in shards of versions, and built again shard by shard after a change.

A build of a version uploads its pages again, so the pages a change touches are those of a few
versions. The index is kept in shards of versions (``shard_of``): a changed page costs building
its shard again, a SHARDS-th of the index, and linking the others. Each shard is a whole small
index, in ``<index>/shards/NN/``:

    pages/       a tantivy index of the shard's pages (``search.build_schema``)
    entries/     a tantivy index of their named entries (``named_entries.py``)
    highlight/   their highlight files (``highlight.py``)
    shard.json   what the shard was made from (``Shard``)

A server opens the segments of every shard as one index (``search.open_index``). tantivy's
BM25 statistics (how many documents, how many tokens a field holds, how many documents hold a
term) are sums over the segments, so a page scores exactly as it does in one index of the same
pages however they are split. An index changed by deleting documents would not: tantivy counts
deleted documents until a merge. A shard is therefore built again whole, never patched.

What a shard is made of (``shard_digests``): the lines of its public pages in the snapshot's
pages file, each with its scope (the slugs of its project and version). What every shard is
made of too: the operators the pages of the whole index name (``code_syntax.operator_names``),
which decide the syntax each page's text is found by; when those change, every shard is built
again (``plan_rebuild`` says so).

A shard built again keeps the earlier shard's ``entries/`` (hard links) when what it is made of
did not change (``entries_digest``: each page's id, scope, title, sections and named entries, in
order): a change of pages' text alone, under the same ids, costs the pages' index and highlight
files alone. The entries index was about 70 % of a shard's build (the largest shard of the
medium scale, 36,330 pages and 144,960 entries: 2.6 of 3.85 s). The service's builds give their
pages new ids, so their shards' entries are built again.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

import msgspec
import tantivy

from . import code_syntax, named_entries
from .changelogs import is_changelog
from .highlight import HighlightWriter, slot_of
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
from .snapshot.errors import Problem, ProblemList, SnapshotError
from .snapshot.lines import decoded_blocks, describe
from .snapshot.load import record_file
from .snapshot.records import Page, PageHead, Version
from .store import Store
from .utils.files import link_or_copy
from .utils.progress import progress_bar, wanted

#: How many shards the pages are spread over: what a change of one version's pages costs is a
#: SHARDS-th of the whole build, and what a search costs grows with them (it visits a segment or
#: two of each). At the medium scale (194k pages; ``bench/index_rebuild.py``), a search of one
#: version took 0.15 ms in one shard, 0.47 ms in 16 and 1.28 ms in 64; one of every version 3.6,
#: 4.6 and 6.4 ms.
SHARDS = 16
#: What a shard was made from, in its directory.
SHARD_FILE = "shard.json"
#: tantivy's memory for one shard's writer: a shard of the large scale fits in one segment.
WRITER_HEAP = 128 << 20


class Shard(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one shard was built from: a digest of its pages and their places (``shard_digests``),
    how many pages it holds, the operators they name (the index's are those of every shard), and
    a digest of what its entries index was made of (``entries_digest``; empty in a shard built
    before it was recorded)."""

    digest: str
    pages: int
    operators: list[str]
    entries: str = ""


class _Placed(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=False):
    """A page's line read for its id and version alone (the rest is skipped, not decoded)."""

    id: int
    version: int


_shard = msgspec.json.Decoder(Shard)
_named = msgspec.msgpack.Encoder()
_placed = msgspec.json.Decoder(_Placed)
_page = msgspec.json.Decoder(Page)


def shard_of(version: int) -> int:
    """The shard a version's pages are in."""
    return version % SHARDS


def shard_path(index: Path, shard: int) -> Path:
    return index / SHARDS_DIRECTORY / f"{shard:02d}"


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


def shard_digests(store: Store) -> dict[int, str]:
    """A digest of what each shard of ``store``'s index is made of: the lines of its public pages,
    in the file's order, and the scope of each version they name (a line names its version, and a
    page's project is its version's). Shard 0 is always there (an index of no pages is one empty
    shard)."""
    hashers = {0: _hasher()}
    pages = store.pages
    for _name, _first, records, lines in served_blocks(store):
        held: dict[int, list[bytes]] = {}
        for record, line in zip(records, lines, strict=False):
            if record.id in pages:
                held.setdefault(record.version % SHARDS, []).append(line)
        for shard, found in held.items():
            hasher = hashers.get(shard)
            if hasher is None:
                hasher = hashers[shard] = _hasher()
            hasher.update(b"\n".join(found) + b"\n")
    hash_scopes(store, hashers)
    return {shard: hasher.hexdigest() for shard, hasher in sorted(hashers.items())}


def hash_scopes(store: Store, hashers: dict[int, hashlib.blake2b]) -> None:
    """Add to each shard's digest in ``hashers`` the scope of each version of ``store`` it holds pages of."""
    for version in sorted(store.versions_with_pages):
        hasher = hashers.get(shard_of(version))
        if hasher is not None:
            hasher.update(f"{version} {scope_of(store, store.versions[version])}\n".encode())


def _hasher() -> hashlib.blake2b:
    hasher = hashlib.blake2b(digest_size=16)
    hasher.update(f"schema {SCHEMA_VERSION}\n".encode())
    return hasher


def scope_of(store: Store, page: PageHead | Version) -> str:
    """The scope a page of ``page`` (a page, or its version) is found under."""
    version = page if isinstance(page, Version) else store.versions[page.version]
    return version_scope(store.projects[version.project].slug, version.slug)


def version_scopes(store: Store, pages: list[Page]) -> dict[int, str]:
    """The scope of each version ``pages`` are of (``scope_of``), found once for all its pages."""
    return {version: scope_of(store, store.versions[version]) for version in {page.version for page in pages}}


def entries_digest(pages: list[Page], scopes: dict[int, str]) -> str:
    """A digest of what the entries index of a shard of ``pages`` (in id order, their versions'
    ``scopes``) is made of: each page's id (its slot is its place), scope, title, sections and
    named entries (``named_entries.documents``)."""
    hasher = _hasher()
    encode = _named.encode
    for page in pages:
        hasher.update(encode((page.id, scopes[page.version], page.title, page.sections, page.entries)))
    return hasher.hexdigest()


def build_index(store: Store, directory: Path, print_progress: bool | None = None) -> float:
    """Index every public page of ``store`` (loaded with the pages' text) into ``directory``, new
    or empty, shard by shard; return the seconds taken. (``serving.build_index_aside`` builds
    beside the index in use and swaps.)"""
    started = time.perf_counter()
    pages = [page for page in store.pages_ordered if isinstance(page, Page)]
    if len(pages) != len(store.pages_ordered):
        raise TypeError("the index is built from a store loaded with the pages' text")
    digests = shard_digests(store)
    by_shard: dict[int, list[Page]] = {shard: [] for shard in digests}
    for page in pages:  # in id order, as every shard lists its pages
        by_shard[shard_of(page.version)].append(page)
    named = {shard: code_syntax.operator_names(held) for shard, held in by_shard.items()}
    operators = frozenset().union(*named.values())
    with progress_bar(len(pages), "index pages", wanted() if print_progress is None else print_progress, unit="page") as bar:
        build_shards(store, directory, [(shard, held, digests[shard], named[shard]) for shard, held in by_shard.items()], operators,
                     None if bar is None else bar.update)
    return time.perf_counter() - started


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
            made = Shard(digest=digest, pages=len(pages), operators=sorted(named), entries=entries_digest(pages, scopes))
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
    """What building an index again from an earlier one takes: the shards whose pages changed,
    with those pages (their text read again), and the digest of every shard."""

    previous: Path
    digests: dict[int, str]
    changed: dict[int, list[Page]]
    operators: frozenset[str]
    #: The operators the pages of each changed shard name.
    named: dict[int, frozenset[str]]


def read_shards(index: Path) -> dict[int, Shard] | None:
    """What each shard of the index in ``index`` was built from; None when one does not read."""
    try:
        return {shard: _shard.decode((directory / SHARD_FILE).read_bytes()) for shard, directory in shard_directories(index).items()}
    except (OSError, ValueError):
        return None


def plan_rebuild(store: Store, previous: Path) -> Rebuild | None:
    """What building the index of ``store`` (loaded without its pages' text) from the index in
    ``previous`` takes; None when every shard must be built (``build_index``): the operators the
    pages name changed, or ``previous`` does not say what its shards were built from."""
    before = read_shards(previous)
    if before is None:
        return None
    digests = shard_digests(store)
    wanted_shards = {shard for shard, digest in digests.items() if shard not in before or before[shard].digest != digest}
    changed: dict[int, list[Page]] = {shard: [] for shard in sorted(wanted_shards)}
    if changed:
        # A server loads pages without their text, sections and entries, which it does not check:
        # those of the changed shards are checked here, where the index is built from them.
        served = store.pages
        for name, first, records, lines in served_blocks(store):
            for number, (record, line) in enumerate(zip(records, lines, strict=False), start=first):
                held = changed.get(record.version % SHARDS)
                if held is not None and record.id in served:
                    try:
                        held.append(_page.decode(line))
                    except msgspec.DecodeError as error:
                        raise SnapshotError(str(store.path), [Problem(name, number, describe(error))]) from None
    for pages in changed.values():
        pages.sort(key=attrgetter("id"))
    return planned(previous, before, digests, changed)


def planned(previous: Path, before: dict[int, Shard], digests: dict[int, str], changed: dict[int, list[Page]]) -> Rebuild | None:
    """The plan to build the ``changed`` shards again and link the others of ``previous`` (whose
    shards were built from ``before``); None when the operators the pages name change."""
    named = {shard: code_syntax.operator_names(pages) for shard, pages in changed.items()}
    kept = [set(before[shard].operators) for shard in digests if shard not in changed]
    operators = frozenset().union(*kept, *named.values())
    if operators != frozenset().union(*(shard.operators for shard in before.values())):
        return None
    return Rebuild(previous, dict(sorted(digests.items())), changed, operators, named)


#: A shard's lines to build it from: (the file a line is in, its number there or 0, the line).
ShardLines = dict[int, list[tuple[str, int, bytes]]]


def plan_changed_shards(store: Store, changes: Mapping[int, tuple[str, bytes] | None], shards: set[int], previous: Path,
                        places: PageLines | None = None) -> Rebuild | None:
    """What building the index of ``store`` from the index in ``previous`` takes when ``store`` is
    its snapshot's (``store.path``) with the pages ``changes`` makes (by id: where each new line is
    from and the line, or None for a page deleted; changesets applied in memory) and ``shards``
    are those whose pages they touched: those shards built again from the snapshot's lines of
    theirs with the changes made, in the order a fold of the changes writes them (each where it
    was, the new ones last), so that a fold's index finds them current. The lines are found by
    ``places`` when it is given and can (else the pages file is read through). None, as
    ``plan_rebuild``, when the operators the pages name change or ``previous`` does not say what
    it was built from."""
    before = read_shards(previous)
    if before is None:
        return None
    placed = {identity: (where, _placed.decode(line), line) for identity, found in changes.items() if found is not None
              for where, line in (found,)}
    found = places.shard_lines(store, changes, placed, shards) if places is not None else None
    lines = found if found is not None else read_shard_lines(store, changes, placed, shards)
    hashers = {shard: _hasher() for shard, held in lines.items() if held or shard == 0}
    for shard, hasher in hashers.items():
        hasher.update(b"".join(line + b"\n" for _where, _number, line in lines[shard]))
    hash_scopes(store, hashers)
    problems = ProblemList(str(store.path))
    changed: dict[int, list[Page]] = {}
    for shard in hashers:
        changed[shard] = []
        for where, number, line in lines[shard]:
            try:
                changed[shard].append(_page.decode(line))
            except msgspec.DecodeError as error:
                problems.add(where, number or None, describe(error))
        changed[shard].sort(key=attrgetter("id"))
    problems.raise_if_any()
    digests = {shard: found.digest for shard, found in before.items() if shard not in shards}
    digests |= {shard: hasher.hexdigest() for shard, hasher in hashers.items()}
    return planned(previous, before, digests, changed)


def read_shard_lines(store: Store, changes: Mapping[int, object], placed: dict[int, tuple[str, _Placed, bytes]],
                     shards: set[int]) -> ShardLines:
    """The lines of ``shards`` (``plan_changed_shards``), the snapshot's pages file read through."""
    placed = dict(placed)
    lines: ShardLines = {shard: [] for shard in shards}
    pages = store.pages
    for name, first, records, block in served_blocks(store):
        for number, (record, line) in enumerate(zip(records, block, strict=False), start=first):
            identity = record.id
            if identity in changes:
                found = placed.pop(identity, None)
                if found is None:
                    continue
                where, record, line = found
                held = lines.get(record.version % SHARDS)
                if held is not None and identity in pages:
                    held.append((where, 0, line))
            else:
                held = lines.get(record.version % SHARDS)
                if held is not None and identity in pages:
                    held.append((name, number, line))
    for identity, (where, record, line) in placed.items():  # new pages, last
        held = lines.get(record.version % SHARDS)
        if held is not None and identity in pages:
            held.append((where, 0, line))
    return lines


class PageLines:
    """Where each line of a snapshot's pages file is, by shard (read in one pass, once), so that
    building a shard again reads its own lines alone: at the large scale, reading the file
    through took about 4 s of each changeset's 16-20 s. A pages file that is compressed has no
    places of lines (``of`` gives none)."""

    def __init__(self, path: Path, shards: dict[int, tuple[array, array, array, array]]) -> None:
        self.path = path
        #: By shard, in the file's order: each line's page id, offset, length and number.
        self.shards = shards
        #: By shard, its page ids sorted: whether a page is in the file, and in which shard.
        self.sorted_ids = {shard: array("q", sorted(ids)) for shard, (ids, _offsets, _lengths, _numbers) in shards.items()}
        with open(path, "rb") as file:
            self.map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if path.stat().st_size else None

    @classmethod
    def of(cls, store: Store) -> PageLines | None:
        """The places of the lines of ``store``'s snapshot's pages file; None when it is compressed."""
        assert store.path is not None
        files = record_file(store.path, "pages")
        if len(files) != 1 or files[0].suffix != ".jsonl":
            return None
        shards: dict[int, tuple[array, array, array, array]] = {}
        offset = 0
        for _name, first, records, lines in served_blocks(store):
            for number, (record, line) in enumerate(zip(records, lines, strict=False), start=first):
                held = shards.get(record.version % SHARDS)
                if held is None:
                    held = shards[record.version % SHARDS] = (array("q"), array("q"), array("q"), array("q"))
                for column, value in zip(held, (record.id, offset, len(line), number), strict=True):
                    column.append(value)
                offset += len(line) + 1
        return cls(files[0], shards)

    def shard_of(self, identity: int) -> int | None:
        """The shard whose lines hold page ``identity``'s, if the file holds it."""
        for shard, ids in self.sorted_ids.items():
            at = bisect_left(ids, identity)
            if at < len(ids) and ids[at] == identity:
                return shard
        return None

    def shard_lines(self, store: Store, changes: Mapping[int, object], placed: dict[int, tuple[str, _Placed, bytes]],
                    shards: set[int]) -> ShardLines | None:
        """The lines of ``shards`` (``plan_changed_shards``), each found where it is; None when a
        changed page moves to another shard (its place among its new shard's lines is where it
        was: the file is then read through)."""
        if store.path is None or record_file(store.path, "pages") != [self.path]:
            return None
        new = []
        for identity, (_where, record, _line) in placed.items():
            was = self.shard_of(identity)
            if was is None:
                new.append(identity)
            elif was != record.version % SHARDS:
                return None
        lines: ShardLines = {shard: [] for shard in shards}
        pages, name = store.pages, self.path.name
        for shard in shards:
            held = lines[shard]
            ids, offsets, lengths, numbers = self.shards.get(shard, ((), (), (), ()))
            for at, identity in enumerate(ids):
                if identity in changes:
                    found = placed.get(identity)
                    if found is not None and identity in pages:
                        held.append((found[0], 0, found[2]))
                elif identity in pages:
                    assert self.map is not None
                    held.append((name, numbers[at], self.map[offsets[at]:offsets[at] + lengths[at]]))
        for identity in new:  # new pages, last
            where, record, line = placed[identity]
            held = lines.get(record.version % SHARDS)  # type: ignore[assignment]
            if held is not None and identity in pages:
                held.append((where, 0, line))
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
