"""The search index, built in shards of versions, and built again shard by shard after a change.

A build of a version uploads its pages again (under new ids, the old ones deleted), so the pages
a change touches are those of a few versions. The index is kept in shards: a changed page costs
building its shard again and linking the others. Each shard is a whole small index, in
``<index>/shards/<key>/``:

    pages/       a tantivy index of the shard's pages (``search.build_schema``)
    entries/     a tantivy index of their named entries (``named_entries.py``)
    highlight/   their highlight files (``highlight.py``)
    derived.msgpack  what the build derived from each page (``Derived``)
    shard.json   what the shard was made from (``Shard``)

Each shard is searched on its own, scored by its own statistics (``search.SearchIndex``): a
page's score depends on the pages its shard holds, and as a float on their order too (the sum of
its words' scores is taken in an order that depends on the documents before it in its segment),
as does the order of pages of equal scores. An index built again therefore holds exactly the
shards an index built whole of the same pages holds, each with the same pages in the same order:
which shard holds a version's pages is a function of the version and its own pages alone
(``shard_layout.Layout``), never of the index's history. Each shard lists its pages by version,
then id. An index changed by deleting documents would not answer alike either (tantivy counts
deleted documents until a merge): a shard is built again whole, never patched. What a change of
one version's pages costs is building its shard.

What a shard is made of (``shard_digests``): the lines of its public pages in the snapshot's
pages file, in the shard's order, and the scope (the slugs of its project and version) of each
version it holds. What every shard is made of too: the operators the pages of the whole index
name (``code_syntax.operator_names``), which decide the syntax each page's text is found by;
when those change, every shard is built again (``plan_rebuild`` says so).

A shard built again keeps the earlier shard's ``entries/`` (hard links) when what it is made of
did not change (``entries_digest``: each page's scope, title, sections and named entries, in
order): a change of pages' text alone costs the pages' index and highlight files alone, under the
same ids or under new ones in the same order (a build of the service uploads its version's pages
again so), which the entries index does not hold (a slot says the page: ``named_entries.py``).
A shard built again after a changeset takes what the earlier shard holds of the pages the
changeset did not change (``Recorded``): their highlight records, copied as a whole build would
write them, and what was derived from each (``Derived``). When every page of the shard is what it
was but for its id (``documents_digest``: a build of a commit that changed no page uploads its
version's pages again, under new ids), the shard keeps its pages index and highlight files too,
and writes their ids alone (``highlight.relabel``).
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import tantivy

from . import code_syntax, named_entries
from .changelogs import is_changelog
from .highlight import Highlights, HighlightWriter, relabel, slot_of
from .search import (
    ENTRIES,
    HIGHLIGHT,
    LISTING,
    PAGES,
    SCHEMA_VERSION,
    SHARD_FILE,
    SHARDS_DIRECTORY,
    Listing,
    build_schema,
    listed_shard,
    listing_of,
    quiet,
    read_listing,
    shard_directories,
    shard_path,
    version_scope,
)
from .shard_layout import Layout
from .snapshot.errors import ProblemList
from .snapshot.lines import decoded_blocks, describe
from .snapshot.load import record_file
from .snapshot.records import Page, PageHead, Version
from .store import Store
from .utils.files import link_or_copy
from .utils.progress import progress_bar, wanted

#: tantivy's memory for one shard's writer: the largest shard fits in one segment.
WRITER_HEAP = 128 << 20

#: What a shard's build derived from each of its pages (``Derived``), beside its indexes.
DERIVED_FILE = "derived.msgpack"

#: Each page line of a shard to build it from: its version, id, the file it is in, its number
#: there (0 for a changeset's), and the line; by shard key.
ShardLines = dict[int, list[tuple[int, int, str, int, bytes]]]


class Shard(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one shard was built from: a digest of its pages and their scopes (``shard_digest``),
    how many pages it holds, the operators they name (the index's are those of every shard), and
    a digest of what its entries index was made of (``entries_digest``)."""

    digest: str
    pages: int
    operators: list[str]
    #: The ``search.SCHEMA_VERSION`` it was built with: a shard of another is not built from.
    schema: int
    #: The index's block width (``Layout``): when it changes, every shard is built again.
    width: int
    entries: str
    #: What its pages index and highlight files were made of (``documents_digest``).
    documents: str = ""


class Derived(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a shard's build derived from each of its pages, in the shard's order: whether it is a
    changelog (``changelogs.is_changelog``), its code syntax (``code_syntax.page_tokens``, the
    ``symbols`` field, as the index's operators find it) and, of those that name any, the
    operators it names (``code_syntax.operator_names``), with each page's id and characters of
    text as a guard. A shard built again takes those of the pages a changeset did not change
    (``Recorded``) instead of deriving them again."""

    ids: list[int]
    chars: list[int]
    changelog: list[bool]
    symbols: list[str]
    operators: dict[int, list[str]]


#: Each page's operators (by id, of those that name any), by shard.
NamedOperators = dict[int, frozenset[str]]


class _Placed(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=False):
    """A page's line read for its id and version alone (the rest is skipped, not decoded)."""

    id: int
    version: int


_shard = msgspec.json.Decoder(Shard)
_derived = msgspec.msgpack.Decoder(Derived)
_derived_encoder = msgspec.msgpack.Encoder()
_named = msgspec.msgpack.Encoder()
_placed = msgspec.json.Decoder(_Placed)
_page = msgspec.json.Decoder(Page)


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


def entries_digest(pages: list[Page], scopes: dict[int, str]) -> str:
    """A digest of what the entries index of a shard of ``pages`` (in its order, their versions'
    ``scopes``) is made of: each page's scope, title, sections and named entries
    (``named_entries.documents``), its slot being its place. Not its id, which the entries index
    does not hold: a build of the service uploads every page of its version again under a new
    id, most of them with the same names."""
    hasher = _hasher()
    encode = _named.encode
    for page in pages:
        hasher.update(encode((scopes[page.version], page.title, page.sections, page.entries)))
    return hasher.hexdigest()


def documents_digest(pages: list[Page], scopes: dict[int, str], operators: frozenset[str]) -> str:
    """A digest of what the pages index and the highlight files of a shard of ``pages`` (in its
    order, their versions' ``scopes``, the index's ``operators``) are made of: each page's scope,
    title, sections, text and document name, its slot being its place. Not its id, which the
    highlight files' page ids alone hold (``highlight.relabel``)."""
    hasher = _hasher()
    encode = _named.encode
    hasher.update(encode(sorted(operators)))
    for page in pages:
        hasher.update(encode((scopes[page.version], page.title, page.sections, page.text, page.document_name)))
    return hasher.hexdigest()


def build_index(store: Store, directory: Path, print_progress: bool | None = None) -> float:
    """Index every public page of ``store`` (loaded with the pages' text) into ``directory``, new
    or empty, in shards (``Layout``); return the seconds taken.
    (``serving.build_index_aside`` builds beside the index in use and swaps.)"""
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
    blocks ``width`` ids wide in ``index``, one after another: the commit of one
    (tantivy's, without the GIL) runs in a thread while the next one's pages are added, so both
    cores work (one at a time, each shard's writer had the build take a fifth longer than one
    index's of two threads). ``built`` is told how many pages each shard held. A shard of
    ``earlier`` (an index) whose entries index was made of the same keeps it (``entries_digest``);
    one ``recorded`` holds (by key) takes what it holds of its unchanged pages."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="docsrv-commit") as committing:
        previous: Future[None] | None = None
        for shard, pages, digest, named in shards:
            scopes = version_scopes(store, pages)
            made = Shard(digest=digest, pages=len(pages), operators=sorted(frozenset().union(*named.values())), schema=SCHEMA_VERSION,
                         width=width, entries=entries_digest(pages, scopes), documents=documents_digest(pages, scopes, operators))
            kept, same = kept_parts(shard_path(earlier, shard), made) if earlier is not None else (None, None)
            commit = build_shard(index, shard, pages, scopes, operators, named, made, kept, (recorded or {}).get(shard), same)
            if previous is not None:
                previous.result()  # one commit at a time: a shard's writer holds WRITER_HEAP until it is done
            previous = committing.submit(commit)
            if built is not None:
                built(len(pages))
        if previous is not None:
            previous.result()


def kept_parts(shard: Path, made: Shard) -> tuple[Path | None, tuple[Path, Derived] | None]:
    """What a shard built as ``made`` says keeps of the earlier shard in ``shard``: its entries
    index, if made of the same (``entries_digest``); and the shard itself with what its build
    derived from its pages, if its pages index and highlight files were made of the same pages,
    but for their ids (``documents_digest``)."""
    try:
        was = _shard.decode((shard / SHARD_FILE).read_bytes())
    except (OSError, ValueError):
        return None, None
    entries = shard / ENTRIES if was.entries == made.entries else None
    if not was.documents or was.documents != made.documents:
        return entries, None
    try:
        derived = _derived.decode((shard / DERIVED_FILE).read_bytes())
    except (OSError, msgspec.DecodeError):
        return entries, None
    return entries, (shard, derived) if len(derived.ids) == made.pages and matches(derived, derived.ids) else None


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


def matches(derived: Derived, ids: list[int]) -> bool:
    """Whether ``derived`` is of the pages of ``ids`` (a shard's, in its order), a value for each."""
    return derived.ids == ids and len(derived.chars) == len(derived.changelog) == len(derived.symbols) == len(ids)


def build_shard(index: Path, shard: int, pages: list[Page], scopes: dict[int, str], operators: frozenset[str], named: NamedOperators,
                made: Shard, kept_entries: Path | None = None, recorded: Recorded | None = None,
                same: tuple[Path, Derived] | None = None) -> Callable[[], None]:
    """Add one shard's ``pages`` (in its order, their versions' ``scopes``, the operators each
    names: ``named``) to an index of its own in ``index``, ``operators`` being those of the whole
    index; return what commits it and writes what it was ``made`` from. With ``kept_entries``, an
    entries index made of the same, its files are linked instead; with ``recorded``, what it holds
    of its unchanged pages is taken from it; with ``same`` (an earlier shard whose pages index and
    highlight files were made of the same pages, and what it derived from them), those are linked,
    under the pages' ids now."""
    directory = shard_path(index, shard)
    directory.mkdir(parents=True)
    entries = None
    if kept_entries is not None:
        link_files(kept_entries, directory / ENTRIES)
    else:
        (directory / ENTRIES).mkdir()
        entries_index = named_entries.register_tokenizers(quiet(tantivy.Index(named_entries.build_schema(), path=str(directory / ENTRIES))))
        entries = entries_index.writer(heap_size=64 << 20, num_threads=1)
    documents = None
    if same is not None:
        earlier, before = same
        link_files(earlier / PAGES, directory / PAGES)
        ids = [page.id for page in pages]
        relabel(earlier / HIGHLIGHT, directory / HIGHLIGHT, ids)
        renamed = dict(zip(before.ids, ids, strict=True))
        derived = Derived(ids, before.chars, before.changelog, before.symbols,
                          {renamed[identity]: names for identity, names in before.operators.items()})
        if entries is not None:
            for place, page in enumerate(pages):
                for document in named_entries.documents(page, scopes[page.version], slot_of(shard, place), derived.changelog[place]):
                    entries.add_json(document)
    else:
        (directory / PAGES).mkdir()
        documents = quiet(tantivy.Index(build_schema(), path=str(directory / PAGES))).writer(heap_size=WRITER_HEAP, num_threads=1)
        derived = Derived([], [], [], [], {identity: sorted(names) for identity, names in named.items()})
        with HighlightWriter(directory / HIGHLIGHT) as highlights:
            for page in pages:
                scope = scopes[page.version]
                slot = slot_of(shard, highlights.add(page.id, page.text, recorded.of(page.id) if recorded is not None else None))
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
                documents.add_document(
                    tantivy.Document(
                        scope=scope,
                        slot=slot,
                        changelog=int(changelog),
                        title=page.title,
                        headings=" ".join(section.title for section in page.sections),
                        body=page.text,
                        path=page.document_name,
                        symbols=symbols,
                    )
                )
                if entries is not None:
                    for document in named_entries.documents(page, scope, slot, changelog):
                        entries.add_json(document)
    (directory / DERIVED_FILE).write_bytes(_derived_encoder.encode(derived))

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
    width: int
    digests: dict[int, str]
    changed: dict[int, list[Page]]
    operators: frozenset[str]
    #: The operators each page of each changed shard names (``operators_by_page``).
    named: dict[int, NamedOperators]
    #: What the earlier index's shards hold of the pages whose text did not change, by key (of
    #: the changed shards that were in it; none when any page's text may have changed).
    recorded: dict[int, Recorded] = field(default_factory=dict)


def read_shards(index: Path, width: int) -> dict[int, Shard] | None:
    """What each shard of the index in ``index`` was built from, by key; None when one does not
    read, or is of another schema or block width (``Layout``)."""
    try:
        shards = {shard: _shard.decode((directory / SHARD_FILE).read_bytes()) for shard, directory in shard_directories(index).items()}
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
    placed = {identity: (where, _placed.decode(line), line) for identity, found in changes.items() if found is not None
              for where, line in (found,)}
    found = places.shard_lines(store, changes, placed, layout, shards) if places is not None else None
    lines = found if found is not None else read_shard_lines(store, changes, placed, layout, shards)
    kept = {shard: found.digest for shard, found in before.items() if shard not in shards}
    return planned(store, previous, before, kept, lines, layout.width, changes.keys())


def planned(store: Store, previous: Path, before: dict[int, Shard], kept: dict[int, str], lines: ShardLines,
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
                changed[shard].append(_page.decode(line))
            except msgspec.DecodeError as error:
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


def read_shard_lines(store: Store, changes: Mapping[int, object], placed: dict[int, tuple[str, _Placed, bytes]],
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


def _add_changed(lines: ShardLines, placed: dict[int, tuple[str, _Placed, bytes]], layout: Layout, pages: Mapping[int, object]) -> None:
    """Add to ``lines`` the public pages a change ``placed`` in their shards."""
    for identity, (where, record, line) in placed.items():
        held = lines.get(layout.shard_of(record.version))
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
    its files are in: a changeset's index (``changeset_index.py``), which then costs its own
    shards and a link a shard, not a tree of links to every file of the index (at the large
    scale, 372 directories and 1,900 links, a fifth of a sidecar's time under load).
    Return the seconds taken."""
    started = time.perf_counter()
    building = [(shard, pages, plan.digests[shard], plan.named[shard]) for shard, pages in plan.changed.items()]
    if built_in is None:
        for shard in plan.digests.keys() - plan.changed.keys():
            link_files(shard_path(plan.previous, shard), shard_path(directory, shard))
    build_shards(store, directory if built_in is None else built_in, building, plan.operators, plan.width, earlier=plan.previous,
                 recorded=plan.recorded)
    if built_in is not None:
        (directory / SHARDS_DIRECTORY).mkdir(parents=True)
        here = os.path.realpath(directory / SHARDS_DIRECTORY)
        built, earlier = (os.path.realpath(index / SHARDS_DIRECTORY) for index in (built_in, plan.previous))
        for shard in plan.digests:
            name = shard_path(directory, shard).name
            home = os.path.join(built if shard in plan.changed else earlier, name)
            if shard not in plan.changed:
                # A shard of an earlier changeset's index is a link: to where it links, in one
                # system call (a real path took a dozen, a fifth of a sidecar's step at large).
                with contextlib.suppress(OSError):  # a directory: the snapshot's own index's
                    home = os.path.normpath(os.path.join(earlier, os.readlink(home)))
            os.symlink(os.path.relpath(home, here), shard_path(directory, shard))
    write_listing(directory, listing_after(plan, directory))
    return time.perf_counter() - started


def listing_after(plan: Rebuild, index: Path) -> Listing | None:
    """The listing of the index built in ``index`` as ``plan`` says: the earlier index's, the
    shards built again listed anew (a shard read, not every shard's three files: at a changeset,
    what is read stays in proportion to the change); None when the earlier index has none of its
    block width, or lacks a shard kept."""
    earlier = read_listing(plan.previous)
    if earlier is None or earlier.width != plan.width or not plan.digests.keys() - plan.changed.keys() <= earlier.shards.keys():
        return None
    shards = {}
    for key in plan.digests:
        if key in plan.changed:
            width, shards[key] = listed_shard(shard_path(index, key))
            if width != plan.width:
                return None
        else:
            shards[key] = earlier.shards[key]
    return Listing(plan.width, shards)


def write_listing(index: Path, listing: Listing | None = None) -> None:
    """What a server opens of the index in ``index`` (``search.Listing``), once its shards are
    built: ``listing``, or the listing of its shards as they are."""
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
