"""The search index, built in shards of versions, and built again shard by shard after a change.

A build of a version uploads its pages again (under new ids, the old ones deleted), so the pages
a change touches are those of a few versions. The index is kept in shards: a changed page costs
building its shard again and linking the others. Each shard is a whole small index, in
``<index>/shards/<key>/``:

    pages/       a tantivy index of the shard's pages (``search.index_files.build_schema``)
    entries/     a tantivy index of their named entries (``search/named_entries.py``)
    highlight/   their highlight files (``search/highlight.py``)
    derived.msgpack  what the build derived from each page (``Derived``)
    shard.json   what the shard was made from (``Shard``)

Each shard is searched on its own, scored by its own statistics (``search.query.SearchIndex``): a
page's score depends on the pages its shard holds, and on how they are cut into segments too:
tantivy's sloppy phrases (the sections' near pairs) score a section otherwise in a shard made of
segments built apart than in one built whole, where words and exact phrases score alike
(``bench/segment_scores.py``). An index built again therefore holds exactly the
shards an index built whole of the same pages holds, each with the same pages in the same order:
which shard holds a version's pages is a function of the version and its own pages alone
(``search.shards.Layout``), never of the index's history. Each shard lists its pages by version,
then id. An index changed by deleting documents would not answer alike either (tantivy counts
deleted documents until a merge): a shard is built again whole, never patched. What a change of
one version's pages costs is building its shard.

What a shard is made of (``shard_digests``): the lines of its public pages in the snapshot's
pages file, in the shard's order, and the scope (the slugs of its project and version) of each
version it holds. What every shard is made of too: the operators the pages of the whole index
name (``search.code_syntax.operator_names``), which decide the syntax each page's text is found by;
when those change, every shard is built again (``plan_rebuild`` says so).

A shard built again keeps the earlier shard's ``entries/`` (hard links) when what it is made of
did not change (``entries_digests``: each page's version, scope, title, sections and named
entries, in order): a change of pages' text alone costs the pages' index and highlight files
alone, under the same ids or under new ones in the same order (a build of the service uploads its
version's pages again so), which the entries index does not hold (a slot says the page:
``search/named_entries.py``). A block that only lost versions (made private, or deleted) keeps it
too, their documents deleted (``kept_entries``): a page's slot names its version and its place
among its version's pages, so those of the versions that stay are what they were, and no lookup
reads the index's statistics, which count deleted documents, so it answers as one built whole.
A shard built again after a changeset takes what the earlier shard holds of the pages the
changeset did not change (``Recorded``): their highlight records, copied as a whole build would
write them, and what was derived from each (``Derived``). When every page of the shard is what it
was but for its id (``ranges_digest``: a build of a commit that changed no page uploads its
version's pages again, under new ids), the shard keeps its pages index and highlight files too,
and writes their ids alone (``search.highlight.relabel``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import msgspec
import tantivy

from ..snapshot.errors import ProblemList
from ..snapshot.lines import decoded_blocks
from ..snapshot.load import record_file
from ..snapshot.records import Page, PageHead, Version
from ..store.loaded import Store
from ..utils.files import link_or_copy
from ..utils.progress import progress_bar, wanted
from . import code_syntax, named_entries, sections
from .changelogs import is_changelog
from .highlight import Highlights, HighlightWriter, numbered_by_version, relabel, slots_of, version_slots
from .index_files import (
    ENTRIES,
    HIGHLIGHT,
    LISTING,
    META,
    PAGES,
    SCHEMA_VERSION,
    SECTIONS,
    SHARD_FILE,
    ListingParts,
    build_schema,
    listing_of,
    quiet,
    shard_path,
    version_scope,
)
from .shards import Layout, segment_of

#: tantivy's memory for one shard's writer: the largest shard fits in one segment.
WRITER_HEAP = 128 << 20

#: What a shard's build derived from each of its pages (``Derived``), beside its indexes.
DERIVED_FILE = "derived.msgpack"

#: Each page line of a shard to build it from: its version, id, the file it is in, its number
#: there (0 for a changeset's), and the line; by shard key.
ShardLines = dict[int, list[tuple[int, int, str, int, bytes]]]


class Segment(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A segment of a tantivy index as its ``meta.json`` lists it (its files are named by its id,
    without the dashes)."""

    segment_id: str
    max_doc: int


class Part(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The pages of one range of a block's versions (``search.shards.segment_of``): what they were
    made of (``documents_digest``, their first slot with it), and the segments that hold them in
    the shard's pages and sections indexes, built apart from the other ranges'."""

    documents: str
    pages: list[Segment]
    sections: list[Segment]


class Shard(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one shard was built from: a digest of its pages and their scopes (``shard_digest``),
    how many pages it holds, the operators they name (the index's are those of every shard), and
    a digest of what its entries index was made of (``entries_digests``)."""

    digest: str
    pages: int
    operators: list[str]
    #: The ``search.index_files.SCHEMA_VERSION`` it was built with: a shard of another is not built from.
    schema: int
    #: The index's block width (``Layout``): when it changes, every shard is built again.
    width: int
    entries: str
    #: What its pages index and highlight files were made of: its ranges' digests (``ranges_digest``).
    documents: str = ""
    #: Of a block whose slots are numbered by version (``search.highlight.slots_of``), what its
    #: entries index holds of each version (``entries_digests``), by id: a shard built again of
    #: the same versions, each the same, but some gone keeps the earlier shard's entries index,
    #: the documents of those gone deleted (``kept_entries``).
    versions: dict[int, str] = msgspec.field(default_factory=dict)
    #: Pages whose documents its entries index holds deleted: tantivy keeps them until a merge,
    #: found by no lookup (none reads the index's statistics: ``search.named_entries.best``).
    deleted: int = 0
    #: Its pages' ranges (``search.shards.segment_of``), by number: a shard built again of a range
    #: made of the same keeps its segments (``build_shard``).
    parts: dict[int, Part] = msgspec.field(default_factory=dict)


class ShardHead(msgspec.Struct, frozen=True):
    """What a plan of a build reads of each earlier shard's ``Shard`` (``search.rebuild.read_shards``):
    the rest of it is skipped, not decoded (it grows with the shard's versions and segments)."""

    digest: str
    pages: int
    operators: list[str]
    schema: int
    width: int


class Derived(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a shard's build derived from each of its pages, in the shard's order: whether it is a
    changelog (``search.changelogs.is_changelog``), its code syntax (``search.code_syntax.page_tokens``, the
    ``symbols`` field, as the index's operators find it) and, of those that name any, the
    operators it names (``search.code_syntax.operator_names``), with each page's id and characters of
    text as a guard. A shard built again takes those of the pages a changeset did not change
    (``Recorded``) instead of deriving them again."""

    ids: list[int]
    chars: list[int]
    changelog: list[bool]
    symbols: list[str]
    operators: dict[int, list[str]]


#: Each page's operators (by id, of those that name any), by shard.
NamedOperators = dict[int, frozenset[str]]


class Placed(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=False):
    """A page's line read for its id and version alone (the rest is skipped, not decoded)."""

    id: int
    version: int


SHARD_DECODER = msgspec.json.Decoder(Shard)
SHARD_HEAD_DECODER = msgspec.json.Decoder(ShardHead)
_derived = msgspec.msgpack.Decoder(Derived)
_derived_encoder = msgspec.msgpack.Encoder()
_named = msgspec.msgpack.Encoder()
PLACED_DECODER = msgspec.json.Decoder(Placed)
PAGE_DECODER = msgspec.json.Decoder(Page)


def served_blocks(store: Store) -> Iterator[tuple[str, int, list[Placed], list[bytes]]]:
    """(file name, number of the first line, records, lines) of each block of ``store``'s
    snapshot's pages file, read again (a file changed since the store was loaded is a
    SnapshotError naming it). Each line is looked at once, in a loop of the caller's: at the large
    scale a generator of lines cost as much as reading them."""
    assert store.path is not None
    problems = ProblemList(str(store.path))
    for path in record_file(store.path, "pages"):
        for block, first, records in decoded_blocks(path, Placed, problems):
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


def shard_digests(store: Store, layout: Layout) -> dict[int, str]:
    """``shard_digest`` of each shard of ``store``'s index (``layout``) that holds a public page
    of its snapshot's pages file, and of shard 0 always (an index of no pages is one empty
    shard)."""
    rows: dict[int, list[tuple[int, int, bytes]]] = {0: []}
    pages = store.pages
    shards: dict[int, int] = {}
    for _name, _first, records, lines in served_blocks(store):
        for record, line in zip(records, lines, strict=False):
            if record.id in pages:
                version = record.version
                shard = shards.get(version)
                if shard is None:
                    shard = shards[version] = layout.shard_of(version)
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


def entries_digests(shard: int, pages: list[Page], scopes: dict[int, str]) -> tuple[str, dict[int, str]]:
    """A digest of what the entries index of ``shard``, of ``pages`` (in its order, their
    versions' ``scopes``), is made of: each page's version, scope, title, sections and named
    entries (``search.named_entries.documents``), its slot being its version and its place
    (``search.highlight.slots_of``). Not its id, which the entries index does not hold: a build
    of the service uploads every page of its version again under a new id, most of them with the
    same names. And, of a block numbered by version, a digest of each version's part of it."""
    hasher = _hasher()
    encode = _named.encode
    by_version = numbered_by_version(shard, pages[-1].version) if pages else False
    versions: dict[int, hashlib.blake2b] = {}
    for page in pages:
        made = encode((page.version, scopes[page.version], page.title, page.sections, page.entries))
        hasher.update(made)
        if by_version:
            (versions.get(page.version) or versions.setdefault(page.version, _hasher())).update(made)
    return hasher.hexdigest(), {version: digest.hexdigest() for version, digest in versions.items()}


def documents_digest(pages: list[Page], scopes: dict[int, str], operators: frozenset[str], first_slot: int) -> str:
    """A digest of what the segments and highlight records of a range of a shard's pages (a
    ``Part``: ``pages`` in its order, their versions' ``scopes``, the index's ``operators``, the
    slot of its first page) are made of: each page's version, scope, title, sections, text and
    document name, its slot being its version and its place. Not its id, which the highlight
    files' page ids alone hold (``search.highlight.relabel``)."""
    hasher = _hasher()
    encode = _named.encode
    hasher.update(encode(sorted(operators)))
    hasher.update(encode(first_slot))
    for page in pages:
        hasher.update(encode((page.version, scopes[page.version], page.title, page.sections, page.text, page.document_name)))
    return hasher.hexdigest()


#: Each range of a shard's pages (``ranges_of``): its number, first place, the place after its
#: last, and its ``documents_digest``.
Ranges = list[tuple[int, int, int, str]]


def shard_ranges(shard: int, width: int, pages: list[Page], scopes: dict[int, str], operators: frozenset[str],
                 slots: list[int]) -> Ranges:
    """The ranges of ``shard``'s ``pages`` (their ``slots``), each with its ``documents_digest``."""
    return [(number, start, end, documents_digest(pages[start:end], scopes, operators, slots[start]))
            for number, start, end in ranges_of(shard, width, pages)]


def ranges_digest(ranges: Ranges) -> str:
    """What a shard's pages index and highlight files are made of (``Shard.documents``): the digests
    of its ranges, in order (its pages are not read again for it)."""
    hasher = _hasher()
    for number, _start, _end, digest in ranges:
        hasher.update(f"{number} {digest}\n".encode())
    return hasher.hexdigest()


def build_index(store: Store, directory: Path, print_progress: bool | None = None) -> float:
    """Index every public page of ``store`` (loaded with the pages' text) into ``directory``, new
    or empty, in shards (``Layout``); return the seconds taken.
    (``search.location.build_index_aside`` builds beside the index in use and swaps.)"""
    started = time.perf_counter()
    pages = [page for page in store.pages_ordered if isinstance(page, Page)]
    if len(pages) != len(store.pages_ordered):
        raise TypeError("the index is built from a store loaded with the pages' text")
    pages.sort(key=_place)
    layout = Layout.of(store)
    digests = shard_digests(store, layout)
    by_shard: dict[int, list[Page]] = {shard: [] for shard in digests}
    for page in pages:
        by_shard[layout.shard_of(page.version)].append(page)
    named = {shard: operators_by_page(held) for shard, held in by_shard.items()}
    operators = frozenset().union(*(names for by_page in named.values() for names in by_page.values()))
    with progress_bar(len(pages), "index pages", wanted() if print_progress is None else print_progress, unit="page") as bar:
        build_shards(store, directory, [(shard, held, digests[shard], named[shard]) for shard, held in by_shard.items()], operators,
                     layout.width, None if bar is None else bar.update)
    write_listing(directory)
    return time.perf_counter() - started


def _place(page: PageHead) -> tuple[int, int]:
    """Where a page is in the index: by version, then id."""
    return page.version, page.id


def operators_by_page(pages: Iterable[Page], recorded: Recorded | None = None) -> NamedOperators:
    """The operators each of ``pages`` names, by id, of those that name any; those of the pages
    ``recorded`` holds unchanged taken from it."""
    named = {}
    for page in pages:
        known = recorded.derived(page) if recorded is not None else None
        found = code_syntax.operator_names((page,)) if known is None else known[2]
        if found:
            named[page.id] = found
    return named


def build_shards(store: Store, index: Path, shards: list[tuple[int, list[Page], str, NamedOperators]], operators: frozenset[str],
                 width: int, built: Callable[[int], object] | None = None, earlier: Path | None = None,
                 recorded: Mapping[int, Recorded] | None = None) -> None:
    """Build ``shards`` (key, pages, digest, the operators those pages name, by page) of an index of
    blocks ``width`` ids wide in ``index``, one after another: the commit of each segment
    (tantivy's, without the GIL) runs in a thread while the next one's pages are added, so both
    cores work (one at a time, each shard's writer had the build take a fifth longer than one
    index's of two threads). ``built`` is told how many pages each shard held. A shard of
    ``earlier`` (an index) keeps what it may of it (``kept_parts``); one ``recorded`` holds (by
    key) takes what it holds of its unchanged pages."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="docsrv-commit") as committing:
        previous: Future[None] | None = None
        for shard, pages, digest, named in shards:
            scopes = version_scopes(store, pages)
            entries, versions = entries_digests(shard, pages, scopes)
            numbered = slots_of(shard, [page.version for page in pages])
            ranges = shard_ranges(shard, width, pages, scopes, operators, numbered[0])
            made = Shard(digest=digest, pages=len(pages), operators=sorted(frozenset().union(*named.values())), schema=SCHEMA_VERSION,
                         width=width, entries=entries, documents=ranges_digest(ranges), versions=versions)
            kept = kept_parts(shard_path(earlier, shard), made) if earlier is not None else None
            if kept is not None and kept.entries is not None:
                made = msgspec.structs.replace(made, deleted=kept.entries.deleted)
            for commit in build_shard(index, shard, pages, scopes, operators, named, made, numbered, ranges, kept,
                                      (recorded or {}).get(shard)):
                if previous is not None:
                    previous.result()  # one commit at a time: a writer holds WRITER_HEAP until it is done
                previous = committing.submit(commit)
            if built is not None:
                built(len(pages))
        if previous is not None:
            previous.result()


@dataclass(frozen=True)
class KeptEntries:
    """An earlier shard's entries index that a shard built again keeps (linked), the documents of
    ``leaving`` (version ids) deleted; ``deleted``: pages whose documents it then holds deleted."""

    directory: Path
    leaving: list[int]
    deleted: int


@dataclass(frozen=True)
class KeptShard:
    """What a shard built again keeps of the earlier shard in ``directory``: its entries index
    (``kept_entries``); its pages and sections indexes and highlight files whole, with what its
    build derived from its pages (``same``), when they were made of the same pages but for their
    ids (``ranges_digest``); else the segments of each range of its pages made of the same
    (``parts``, by number)."""

    directory: Path
    entries: KeptEntries | None
    same: Derived | None
    parts: dict[int, Part]


def kept_parts(shard: Path, made: Shard) -> KeptShard | None:
    """What a shard built as ``made`` keeps of the earlier shard in ``shard`` (``KeptShard``);
    None when there is none that reads."""
    try:
        was = SHARD_DECODER.decode((shard / SHARD_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    entries = kept_entries(shard, was, made)
    parts = was.parts if (was.schema, was.width) == (made.schema, made.width) else {}
    if not was.documents or was.documents != made.documents:
        return KeptShard(shard, entries, None, parts)
    try:
        derived = _derived.decode((shard / DERIVED_FILE).read_bytes())
    except (OSError, msgspec.DecodeError):
        return KeptShard(shard, entries, None, parts)
    same = derived if len(derived.ids) == made.pages and matches(derived, derived.ids) else None
    return KeptShard(shard, entries, same, parts)


def kept_entries(shard: Path, was: Shard, made: Shard) -> KeptEntries | None:
    """The entries index of the earlier shard in ``shard`` (built as ``was``) that a shard built
    as ``made`` keeps: as it is, if made of the same (``entries_digests``); with the documents of
    the versions gone deleted, if ``made`` holds the same versions, each the same, but those (a
    version made private or deleted: building its block's entries again was more than half of
    building the block), unless it would then hold more pages deleted than not (a build of it
    whole drops them)."""
    if was.entries == made.entries:
        return KeptEntries(shard / ENTRIES, [], was.deleted)
    leaving = sorted(was.versions.keys() - made.versions.keys())
    if not made.versions or not leaving or any(was.versions.get(version) != digest for version, digest in made.versions.items()):
        return None
    deleted = was.deleted + was.pages - made.pages
    return KeptEntries(shard / ENTRIES, leaving, deleted) if deleted <= made.pages else None


class Recorded:
    """What a shard as an earlier index holds it recorded of the pages whose text did not change
    since (those not ``changed``): their highlight records, copied (``HighlightWriter.add``), and
    what its build derived from each (``Derived``; a shard built before it was kept has none)."""

    def __init__(self, files: Highlights, derived: Derived | None, changed: Container[int]) -> None:
        self.files = files
        self.places = dict(zip(files.page_ids, range(len(files.page_ids)), strict=True))
        self.derived_pages = derived if derived is not None and matches(derived, files.page_ids.tolist()) else None
        self.changed = changed

    @classmethod
    def open(cls, shard: Path, changed: Container[int]) -> Recorded | None:
        """Those of the shard in ``shard``; None when it has no highlight files that open (a shard
        new to the index)."""
        try:
            files = Highlights(shard / HIGHLIGHT)
        except (OSError, ValueError):
            return None
        try:
            derived = _derived.decode((shard / DERIVED_FILE).read_bytes())
        except (OSError, msgspec.DecodeError):
            derived = None
        return cls(files, derived, changed)

    def of(self, page: int) -> tuple[Highlights, int] | None:
        """Where the page of id ``page`` is recorded, if it is and did not change."""
        place = self.places.get(page) if page not in self.changed else None
        return None if place is None else (self.files, place)

    def derived(self, page: Page) -> tuple[bool, str, frozenset[str]] | None:
        """What was derived from ``page`` (changelog, symbols, operators), if it did not change."""
        found = self.derived_pages
        place = self.places.get(page.id) if found is not None and page.id not in self.changed else None
        if place is None or found is None or found.chars[place] != len(page.text):
            return None
        return found.changelog[place], found.symbols[place], frozenset(found.operators.get(page.id, ()))

    def run(self, pages: list[Page]) -> int | None:
        """The place of the first of ``pages`` when all of them are recorded one after another
        from there, unchanged, with what was derived from each: ``HighlightWriter.copy_run`` and
        ``derived_run`` take them at once, not page by page. None otherwise."""
        found = self.derived_pages
        first = self.places.get(pages[0].id) if pages and found is not None else None
        if first is None or found is None:
            return None
        places, changed, chars = self.places, self.changed, found.chars
        for place, page in enumerate(pages, start=first):
            if places.get(page.id) != place or page.id in changed or chars[place] != len(page.text):
                return None
        return first

    def derived_run(self, into: Derived, first: int, count: int) -> None:
        """Add to ``into`` what was derived from the ``count`` pages recorded from ``first`` on (``run``)."""
        found = self.derived_pages
        assert found is not None
        end = first + count
        into.ids.extend(found.ids[first:end])
        into.chars.extend(found.chars[first:end])
        into.changelog.extend(found.changelog[first:end])
        into.symbols.extend(found.symbols[first:end])


def matches(derived: Derived, ids: list[int]) -> bool:
    """Whether ``derived`` is of the pages of ``ids`` (a shard's, in its order), a value for each."""
    return derived.ids == ids and len(derived.chars) == len(derived.changelog) == len(derived.symbols) == len(ids)


def ranges_of(shard: int, width: int, pages: list[Page]) -> Iterator[tuple[int, int, int]]:
    """(number, first place, place after the last) of each range of ``shard``'s ``pages`` (in its
    order: by version) that a segment holds (``search.shards.segment_of``, found once a version)."""
    count = len(pages)
    number = start = 0
    version = None
    for place, page in enumerate(pages):
        if page.version != version:
            version = page.version
            found = segment_of(shard, width, count, version)
            if place and found != number:
                yield number, start, place
                start = place
            number = found
    if count:
        yield number, start, count


class RangeWriters:
    """The writers of one range of a shard's pages (a ``Part``, of ``number``, made as ``digest``
    says): its segments of the pages and sections indexes, each built in an index of its own
    beside the shard's (``<part>-<number>``), then moved into the shard's."""

    def __init__(self, directory: Path, number: int, digest: str) -> None:
        self.directory, self.number, self.digest = directory, number, digest
        self.places = {part: directory / f"{part}-{number}" for part in (PAGES, SECTIONS)}
        for place in self.places.values():
            place.mkdir()
        self.pages = quiet(tantivy.Index(build_schema(), path=str(self.places[PAGES]))).writer(heap_size=WRITER_HEAP, num_threads=1)
        self.sections = quiet(tantivy.Index(sections.build_schema(), path=str(self.places[SECTIONS]))).writer(
            heap_size=WRITER_HEAP, num_threads=1)

    def commit_into(self, parts: dict[int, Part]) -> None:
        """Commit both segments, move their files into the shard's indexes, and add the range to ``parts``."""
        for writer in (self.pages, self.sections):
            writer.commit()
            writer.wait_merging_threads()
        parts[self.number] = Part(self.digest, self._moved(PAGES), self._moved(SECTIONS))

    def _moved(self, part: str) -> list[Segment]:
        """The segments of ``part``, their files moved into the shard's; the index they were built in removed."""
        place = self.places[part]
        segments = segments_of(place)
        for segment in segments:
            for path in segment_files(place, segment):
                path.rename(self.directory / part / path.name)
        shutil.rmtree(place)
        return segments


def segments_of(directory: Path) -> list[Segment]:
    """The segments the tantivy index in ``directory`` lists, in order; ValueError for one with
    deleted documents (an index built here holds none)."""
    listed = json.loads((directory / META).read_bytes())["segments"]
    if any(segment.get("deletes") is not None for segment in listed):
        raise ValueError(f"{directory}/{META}: a segment with deleted documents")
    return [Segment(segment["segment_id"], segment["max_doc"]) for segment in listed]


#: The files every segment of the pages' and sections' indexes has (their fields: no stored
#: document is read, but tantivy writes its store all the same).
SEGMENT_FILES = (".fast", ".fieldnorm", ".idx", ".pos", ".store", ".term")


def segment_files(directory: Path, segment: Segment) -> list[Path]:
    prefix = segment.segment_id.replace("-", "") + "."
    return [Path(entry.path) for entry in os.scandir(directory) if entry.name.startswith(prefix)]


class EarlierSegments:
    """The files of each segment of an earlier shard's pages and sections indexes (in
    ``directory``), listed once for every range a shard built again links (``linked_part``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files: dict[str, dict[str, list[str]]] = {}

    def of(self, part: str, segment: Segment) -> list[str]:
        """The names of the files of ``segment`` of the index ``part``."""
        listed = self.files.get(part)
        if listed is None:
            listed = self.files[part] = {}
            for name in os.listdir(self.directory / part):
                prefix, dot, _suffix = name.partition(".")
                if dot:
                    listed.setdefault(prefix, []).append(name)
        return listed.get(segment.segment_id.replace("-", ""), [])


def linked_part(earlier: EarlierSegments, directory: Path, part: Part) -> Part | None:
    """``part`` of the earlier shard ``earlier``, its segments' files linked into the shard in
    ``directory``; None, nothing linked, when a segment's files are not all there (a damaged
    shard: the range is built again)."""
    found = [(name, earlier.of(name, segment)) for name, segments in ((PAGES, part.pages), (SECTIONS, part.sections))
             for segment in segments]
    if any(len(files) < len(SEGMENT_FILES) for _name, files in found):
        return None
    for name, files in found:
        source, target = f"{earlier.directory}/{name}", f"{directory}/{name}"
        for file in files:
            link_or_copy(f"{source}/{file}", f"{target}/{file}")
    return part


def write_segments(directory: Path, segments: list[Segment]) -> None:
    """The tantivy index made in ``directory`` lists ``segments`` (their files there), in order,
    as a search visits them."""
    meta = json.loads((directory / META).read_bytes())
    meta["segments"] = [{"segment_id": segment.segment_id, "max_doc": segment.max_doc, "deletes": None} for segment in segments]
    meta["opstamp"] = sum(segment.max_doc for segment in segments) + 1
    written = directory / f"{META}.new"
    written.write_text(json.dumps(meta))
    written.replace(directory / META)


def build_shard(index: Path, shard: int, pages: list[Page], scopes: dict[int, str], operators: frozenset[str], named: NamedOperators,
                made: Shard, numbered: tuple[list[int], list[int]], ranges: Ranges, kept: KeptShard | None = None,
                recorded: Recorded | None = None) -> Iterator[Callable[[], None]]:
    """Add one shard's ``pages`` (in its order, their versions' ``scopes``, the operators each
    names: ``named``; their slots and its table of versions: ``numbered``) to an index of its own
    in ``index``, ``operators`` being those of the whole index; yield what commits each range's
    segments (``ranges``), and last what commits the rest and writes what the shard was ``made``
    from. With ``kept``, what it keeps of an earlier shard: its entries index, linked (the leaving
    versions' documents deleted); its pages and sections indexes and highlight files, linked,
    under the pages' ids now, when made of the same pages; else the segments of each range made of
    the same, linked. With ``recorded``, what it holds of its unchanged pages is taken from it."""
    directory = shard_path(index, shard)
    directory.mkdir(parents=True)
    slots, versions = numbered
    entries = patched = None
    if kept is not None and kept.entries is not None:
        link_files(kept.entries.directory, directory / ENTRIES)
        if kept.entries.leaving:
            patched = without_versions(directory / ENTRIES, shard, kept.entries.leaving)
    else:
        (directory / ENTRIES).mkdir()
        entries_index = named_entries.register_tokenizers(quiet(tantivy.Index(named_entries.build_schema(), path=str(directory / ENTRIES))))
        entries = entries_index.writer(heap_size=64 << 20, num_threads=1)
    parts: dict[int, Part] = {}
    if kept is not None and kept.same is not None:
        before = kept.same
        link_files(kept.directory / PAGES, directory / PAGES)
        link_files(kept.directory / SECTIONS, directory / SECTIONS)
        ids = [page.id for page in pages]
        relabel(kept.directory / HIGHLIGHT, directory / HIGHLIGHT, ids)
        renamed = dict(zip(before.ids, ids, strict=True))
        derived = Derived(ids, before.chars, before.changelog, before.symbols,
                          {renamed[identity]: names for identity, names in before.operators.items()})
        parts.update(kept.parts)
        if entries is not None:
            for place, page in enumerate(pages):
                for document in named_entries.documents(page, scopes[page.version], slots[place], derived.changelog[place]):
                    entries.add_json(document)
    else:
        for part, schema in ((PAGES, build_schema()), (SECTIONS, sections.build_schema())):
            (directory / part).mkdir()
            quiet(tantivy.Index(schema, path=str(directory / part)))  # its meta.json, which will list the segments
        derived = Derived([], [], [], [], {identity: sorted(names) for identity, names in named.items()})
        earlier = kept.parts if kept is not None else {}
        segments = EarlierSegments(kept.directory) if kept is not None else None
        with HighlightWriter(directory / HIGHLIGHT, versions) as highlights:
            for number, start, end, digest in ranges:
                writers = None
                linked = None
                if segments is not None and number in earlier and earlier[number].documents == digest:
                    linked = linked_part(segments, directory, earlier[number])
                if linked is not None:
                    parts[number] = linked
                    # A range linked whole, of an entries index kept: its pages' records and
                    # derived values are the earlier shard's, taken as a run when they are one.
                    first = recorded.run(pages[start:end]) if recorded is not None and entries is None else None
                    if recorded is not None and first is not None:
                        highlights.copy_run(recorded.files, first, end - start)
                        recorded.derived_run(derived, first, end - start)
                        continue
                else:
                    writers = RangeWriters(directory, number, digest)
                for place in range(start, end):
                    page = pages[place]
                    scope = scopes[page.version]
                    slot = slots[highlights.add(page.id, page.text, recorded.of(page.id) if recorded is not None else None)]
                    known = recorded.derived(page) if recorded is not None else None
                    if known is None:
                        changelog = is_changelog(page.title, [section.title for section in page.sections])
                        symbols = " ".join(code_syntax.page_tokens(page.text, operators))
                    else:
                        changelog, symbols, _named = known
                    derived.ids.append(page.id)
                    derived.chars.append(len(page.text))
                    derived.changelog.append(changelog)
                    derived.symbols.append(symbols)
                    if writers is not None:
                        headings = " ".join(section.title for section in page.sections)
                        writers.pages.add_document(
                            tantivy.Document(
                                scope=scope,
                                slot=slot,
                                changelog=int(changelog),
                                title=page.title,
                                headings=headings,
                                body=page.text,
                                path=page.document_name,
                                symbols=symbols,
                                stems=[page.title, headings, page.text, page.document_name],
                            )
                        )
                        for section in sections.documents(page, scope, slot, symbols):
                            writers.sections.add_document(section)
                    if entries is not None:
                        for document in named_entries.documents(page, scope, slot, changelog):
                            entries.add_json(document)
                if writers is not None:
                    yield partial(writers.commit_into, parts)
    (directory / DERIVED_FILE).write_bytes(_derived_encoder.encode(derived))

    def commit() -> None:
        for writer in (entries, patched):
            if writer is not None:
                writer.commit()
                writer.wait_merging_threads()
        if kept is None or kept.same is None:
            ranges = [parts[number] for number in sorted(parts)]
            write_segments(directory / PAGES, [segment for part in ranges for segment in part.pages])
            write_segments(directory / SECTIONS, [segment for part in ranges for segment in part.sections])
        (directory / SHARD_FILE).write_bytes(msgspec.json.encode(msgspec.structs.replace(made, parts=dict(sorted(parts.items())))))

    yield commit


def without_versions(directory: Path, shard: int, versions: list[int]) -> tantivy.IndexWriter:
    """A writer of the entries index in ``directory`` (an earlier shard's files, linked: tantivy
    writes a commit's deletes and its ``meta.json`` as new files) that deletes the documents of
    ``versions``, to commit."""
    index = named_entries.register_tokenizers(quiet(tantivy.Index.open(str(directory))))
    writer = index.writer(heap_size=16 << 20, num_threads=1)
    for version in versions:
        low, high = version_slots(shard, version)
        writer.delete_documents_by_query(tantivy.Query.range_query(index.schema, "slot", tantivy.FieldType.Integer, low, high))
    return writer


def write_listing(index: Path, listing: ListingParts | None = None) -> None:
    """What a server opens of the index in ``index`` (``search.index_files.Listing``), once its shards are
    built: ``listing`` (the listing after a change, ``search.rebuild.listing_after``), or the listing
    of its shards as they are."""
    (index / LISTING).write_bytes(msgspec.json.encode(listing if listing is not None else listing_of(index)))


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

