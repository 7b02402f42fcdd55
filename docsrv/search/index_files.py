"""A search index's files: its schema, its shards, the listing of what a server opens
(``segments.json``), and how a server opens them without writing a byte in the snapshot
(``open_index``), or checks that they can serve (``index_problem``)."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import tantivy

from ..utils import held_calls
from .highlight import Highlights

#: Changes whenever what the index holds changes: an index of another schema is rebuilt.
SCHEMA_VERSION = 24

#: Where an index keeps its shards (``build.py``), and where a shard keeps its pages'
#: tantivy index, its named entries', its sections' (``sections.py``) and its highlight files.
SHARDS_DIRECTORY, PAGES, ENTRIES, SECTIONS, HIGHLIGHT = "shards", "pages", "entries", "sections", "highlight"
#: The file that lists a tantivy index's segments, which tantivy reads when it opens the index.
META = "meta.json"
#: The file tantivy locks while it reads or writes an index's meta.json.
META_LOCK = ".tantivy-meta.lock"
#: What a server opens of an index, listed in one file (``Listing``).
LISTING = "segments.json"
#: What a shard was made from, in its directory (``search.build.Shard``).
SHARD_FILE = "shard.json"


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("scope", tokenizer_name="raw")
    builder.add_integer_field("slot", fast=True)
    #: 1 for a changelog (``search/changelogs.py``).
    builder.add_integer_field("changelog", fast=True)
    builder.add_text_field("title")
    builder.add_text_field("headings")
    builder.add_text_field("body")
    builder.add_text_field("path")
    #: The code syntax of the page's text (``symbols``), one token each.
    builder.add_text_field("symbols", tokenizer_name="whitespace")
    #: Every word of the page (title, headings, text, document name) stemmed, for which pages
    #: hold every word of a query in some form (``search.query.SearchIndex.search_pages``): no
    #: frequencies or positions, it scores nothing.
    builder.add_text_field("stems", tokenizer_name="en_stem", index_option="basic")
    return builder.build()


def shard_directories(index: Path) -> dict[int, Path]:
    """The shards of the index in ``index`` (``build.py``), by number; ValueError when there are none."""
    try:
        found = {int(entry.name): Path(entry.path) for entry in os.scandir(index / SHARDS_DIRECTORY)
                 if entry.is_dir() and entry.name.isdigit()}
    except FileNotFoundError:
        found = {}
    if not found:
        raise ValueError(f"{index}: no shard of a search index")
    return dict(sorted(found.items()))


#: The files of a shard's pages, entries or sections index, by their paths from the index's
#: directory, one a line: nothing a listing names is opened outside the index. Held to it whole,
#: in one match (``Listed``): a pattern on each path had a worker's read of a listing take three
#: times longer.
_SHARD_FILES = re.compile(r"(?:shards/[0-9]+/(?:pages|entries|sections)/[A-Za-z0-9][A-Za-z0-9._-]*(?:\n|\Z))*")


class Listed(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One tantivy index of a shard (its ``PAGES``, ``ENTRIES`` or ``SECTIONS``): its ``meta.json`` and its
    files, by path from the index's directory."""

    #: As written, not read (tantivy reads it when the index opens; a worker reads the listing
    #: at every changeset that changes the index, and the metas are most of it).
    meta: msgspec.Raw
    files: list[str]

    def __post_init__(self) -> None:
        if _SHARD_FILES.fullmatch("\n".join(self.files)) is None or "" in self.files:
            raise ValueError("a file of a shard's index is named by its path in the index's shards")

    def schema(self) -> Any:
        return msgspec.json.decode(self.meta).get("schema")


class ListedShard(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a server opens of one shard: what it is made of (its ``shard.json``'s digest) and its
    pages', entries' and sections' indexes (``Listed``)."""

    digest: str
    pages: Listed
    entries: Listed
    sections: Listed

    def parts(self) -> tuple[Listed, Listed, Listed]:
        return self.pages, self.entries, self.sections


class Listing(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a server opens of an index (``<index>/segments.json``, written by its build): each
    shard (``ListedShard``), by key, and the width of the index's blocks (``search.shards.Layout``),
    so that a worker opening a changeset's index reads one file, not three of each shard, opens
    the shards that changed alone and keeps those it already holds (``SearchIndex.open``)."""

    width: int
    shards: dict[int, ListedShard]


class ListingParts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A listing with each shard's part of it as written, not decoded (``read_listing``,
    ``listing_parts``), which is how it is written again after a change: a changeset's index
    lists the shards kept in the bytes of the index before (``search.rebuild.listing_after``)."""

    width: int
    shards: dict[int, msgspec.Raw]


class ReadListing(NamedTuple):
    """A listing as read, with each shard's part of its file as written (none for one read whole)."""

    listing: Listing
    parts: Mapping[int, msgspec.Raw]


class _Recorded(msgspec.Struct, frozen=True):
    """Of a shard's ``shard.json`` (``search.build.Shard``), what a listing holds."""

    digest: str
    width: int


_listing_parts = msgspec.json.Decoder(ListingParts)
_listed_shard = msgspec.json.Decoder(ListedShard)
_recorded = msgspec.json.Decoder(_Recorded)


def listed(shard: Path, part: str) -> Listed:
    """The tantivy index of ``part`` of the shard in ``shard``; ValueError when it is not one."""
    directory = shard / part
    found = json.loads((directory / META).read_bytes())
    if not isinstance(found, dict) or not isinstance(found.get("segments"), list):
        raise ValueError(f"{directory}/{META}: not a tantivy index's meta.json")
    files = sorted(f"{SHARDS_DIRECTORY}/{shard.name}/{part}/{entry.name}" for entry in os.scandir(directory)
                   if entry.is_file() and not entry.name.startswith(".") and entry.name != META)
    return Listed(msgspec.Raw(msgspec.json.encode(found)), files)


def listing_of(index: Path) -> Listing:
    """The listing of the index in ``index`` as its shards are: what its build writes, and what
    ``index_problem`` holds the written one to; ValueError when its shards' block widths or
    tantivy schemas differ (a search builds its queries once, for every shard)."""
    shards = {key: listed_shard(path) for key, path in shard_directories(index).items()}
    widths = {width for width, _shard in shards.values()}
    if len(widths) != 1:
        raise ValueError(f"{index}: shards of blocks of other widths")
    first = shards[min(shards)][1]
    for key, (_width, shard) in shards.items():
        if any(mine.schema() != theirs.schema() for mine, theirs in zip(shard.parts(), first.parts(), strict=True)):
            raise ValueError(f"{shard_path(index, key)}: another schema than the index's other shards")
    return Listing(widths.pop(), {key: shard for key, (_width, shard) in shards.items()})


def listed_shard(shard: Path) -> tuple[int, ListedShard]:
    """The block width of the shard in ``shard`` and what a listing holds of it."""
    recorded = _recorded.decode((shard / SHARD_FILE).read_bytes())
    return recorded.width, ListedShard(recorded.digest, listed(shard, PAGES), listed(shard, ENTRIES), listed(shard, SECTIONS))


def listing_parts(index: Path) -> ListingParts | None:
    """The listing written in ``index``, its shards' parts as written (not checked); None when
    there is none that reads."""
    try:
        return _listing_parts.decode((index / LISTING).read_bytes())
    except (OSError, msgspec.DecodeError):
        return None


def read_listing(index: Path, earlier: ReadListing | None = None) -> ReadListing | None:
    """The listing written in ``index``; None when there is none that reads (a server does not
    open such an index: ``index_problem`` says so). A shard listed in the same bytes as in
    ``earlier`` is taken from it, not decoded and checked again: a worker reads the listing of a
    changeset's index at each change of pages, all of whose shards but a few it holds already."""
    read = listing_parts(index)
    if read is None:
        return None
    kept = earlier.parts if earlier is not None else {}
    try:
        shards = {key: earlier.listing.shards[key] if earlier is not None and kept.get(key) == part else _listed_shard.decode(part)
                  for key, part in read.shards.items()}
    except msgspec.DecodeError:
        return None
    return ReadListing(Listing(read.width, shards), read.shards)


def shard_path(index: Path, shard: int) -> Path:
    return index / SHARDS_DIRECTORY / f"{shard:02d}"


#: Where ``open_index`` makes its directories of links, when the machine has it and it may be
#: written: a memory file system (Linux's, in a container too, where it is small; a link takes
#: about a kilobyte). A link is made there many times faster than on a disk's file system, and a
#: worker makes hundreds of them to open a changeset's index.
MEMORY_FILESYSTEM = "/dev/shm"
#: The prefix of those directories' names.
LINKS_PREFIX = "docsrv-open-"
#: A directory of links older than this is left over (its process was killed between making it
#: and removing it: an open takes seconds at most) and ``sweep_links`` removes it.
LINKS_LEFT_SECONDS = 600.0


@functools.cache
def links_root() -> str:
    """Where ``open_index`` makes its directories of links: MEMORY_FILESYSTEM when it may be
    written there, else the temporary directory (``TMPDIR``)."""
    return MEMORY_FILESYSTEM if os.access(MEMORY_FILESYSTEM, os.W_OK | os.X_OK) else tempfile.gettempdir()


def open_index(index: Path, part: Listed, leftovers: list[Path] | None = None) -> tantivy.Index:
    """The tantivy index of one part of a shard of the index in ``index`` opened without writing
    there.

    tantivy creates and locks ``.tantivy-meta.lock`` in the directory it opens, which fails on a
    read-only snapshot (a ``:ro`` volume, an image layer, a read-only NFS export). It opens the
    index through a directory of links to its files, made in a memory file system
    (``links_root``) with its ``meta.json``, and removed once the reader has
    mapped every segment: nothing is ever written in the snapshot. A worker opens a changeset's
    index in a thread beside its serving loop: the links are made without letting go of the GIL
    (``utils/held_calls.py``), and their directory is added to ``leftovers``, when given, to be
    removed once the index serves (``remove_links``): removing them there took longer than the rest
    of the open. When they cannot be made there (the memory file system is full), they are made in
    the temporary directory."""
    try:
        links = link_directory(index, part, links_root())
    except OSError:
        links = link_directory(index, part, tempfile.gettempdir())
    try:
        opened = quiet(tantivy.Index.open(str(links)))
    except BaseException:
        remove_links([links])
        raise
    if leftovers is None:
        remove_links([links])
    else:
        leftovers.append(links)
    return opened


def link_directory(index: Path, part: Listed, root: str) -> Path:
    """A new directory in ``root`` of links to the files of ``part`` of the index in ``index``,
    with the ``meta.json`` that lists their segments (``open_index``)."""
    links = tempfile.mkdtemp(prefix=LINKS_PREFIX, dir=root)
    try:
        base = os.path.abspath(index)  # links to absolute paths: a relative one would point nowhere
        for path in part.files:
            held_calls.symlink(f"{base}/{path}", f"{links}/{path.rpartition('/')[2]}")
        with open(f"{links}/meta.json", "wb") as meta:
            meta.write(msgspec.json.encode(part.meta))
    except BaseException:
        remove_links([Path(links)])
        raise
    return Path(links)


def remove_links(directories: list[Path]) -> None:
    """Remove the directories of links ``open_index`` left (an index opened maps its files), each
    link without letting go of the GIL (``utils/held_calls.py``)."""
    for directory in directories:
        try:
            for entry in os.scandir(directory):
                held_calls.unlink(entry.path)
            directory.rmdir()
        except OSError:
            shutil.rmtree(directory, ignore_errors=True)


def sweep_links() -> None:
    """Remove the directories of links left over (``LINKS_LEFT_SECONDS``) by processes killed
    while they opened an index, or before they removed its links (a master sweeps them now and
    then: its workers may be killed at any time)."""
    root = links_root()
    old = time.time() - LINKS_LEFT_SECONDS
    try:
        entries = [entry for entry in os.scandir(root) if entry.name.startswith(LINKS_PREFIX)]
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < old:
                shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue


def index_problem(directory: Path) -> str | None:
    """What keeps the index in ``directory`` from serving, in one line; None when it opens as a
    server opens it and answers a search (``answering``), and its listing lists what its shards
    hold (``checked_listing``)."""
    try:
        for key, listed_shard in checked_listing(directory).listing.shards.items():
            for part in listed_shard.parts():
                answering(open_index(directory, part))
            Highlights(shard_path(directory, key) / HIGHLIGHT)
    except (OSError, ValueError) as error:
        return " ".join(str(error).split())[:300]
    return None


def checked_listing(directory: Path) -> ReadListing:
    """The listing written in ``directory`` (``read_listing``), which lists what its shards hold;
    ValueError otherwise."""
    read = read_listing(directory)
    if read is None:
        raise ValueError(f"{directory}/{LISTING}: missing, or not a listing of the index")
    if read.listing != listing_of(directory):
        raise ValueError(f"{directory}/{LISTING}: lists other shards or files than the index holds")
    return read


def answering(index: tantivy.Index) -> tantivy.Index:
    """``index``, once it answered a search and a first document was read back from it, as a
    search reads them; ValueError when it cannot (a damaged segment opens all the same)."""
    searcher = index.searcher()
    found = searcher.search(tantivy.Query.all_query(), 1).hits
    if found:
        searcher.doc(found[0][1])
    return index


def quiet(index: tantivy.Index) -> tantivy.Index:
    """``index`` with a reader that never reloads by itself. tantivy's default reader watches
    meta.json from a thread of its own and, when it changes, reloads under a file lock (flock)
    on ``.tantivy-meta.lock``; a worker forked while that thread holds the lock keeps it for
    ever (the lock belongs to the open file, which the worker shares), and any other process
    opening the index then waits for ever. An index docsrv serves never changes (a new one is
    built aside and swapped in), so nothing is lost."""
    index.config_reader("Manual", 0)
    return index


def version_scope(project: str, version: str) -> str:
    """The one term a page is filtered by: its project and version (a project slug holds no "/")."""
    return f"{project}/{version}"

