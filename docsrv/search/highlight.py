"""Highlighting from word positions found once, when the index is built.

Finding where a query's words are in long pages was nearly all the work of a search: done in
Python at query time it took many times tantivy's part. So, as Lucene does with term vectors and offsets, the index build reads every
page once and records, for each distinct word of the page, where its first occurrences are.
The page's text is kept beside them HTML-escaped and UTF-8 encoded, so a search looks its words
up in the pages it found and cuts fragments out of ready bytes: no scanning and no escaping per
request, and nothing in a page can inject markup (everything in the text is escaped; only our
own tags are added). A short page (SHORT_PAGE_BYTES) gets no positions: finding words in it
when a search shows it costs about what looking them up does, and a corpus of many short pages
would otherwise spend most of its index on them.

The files live in each shard of the index (``<index>/shards/<key>/highlight/``: ``search/build.py``)
and are mapped into memory, so the workers of a machine share them and no page text sits in a
worker's heap. A page's ``slot`` (a fast field of its tantivy documents) is its shard and its
number there (``slots_of``): in a block of versions, its version's offset in the block and its
place among its version's pages, so that a version leaving the block moves no other page to
another slot; in a shard of one version, its place in the shard's files. Numbers are little-endian:

    text       every page's escaped text, UTF-8, one after another
    page-ids   per slot, the page's id (int64)
    slots      per slot, a SLOT record: where the page's text starts and its size in bytes,
               its length in characters (to size fragments in characters), and its entries
    keys       per entry (one entry per distinct word of a page), the word's key (see
               ``term_key``; uint64), ascending within a page
    entries    per entry, an ENTRY record: its first position, how many, the word's length in bytes
    positions  where each occurrence starts, in bytes from the page's start (uint32)
    versions   per version of a block, its offset in the block and the place of its first page
               (int64 pairs, in order); none in a shard whose numbers are places
"""

from __future__ import annotations

import hashlib
import html
import mmap
import re
import struct
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import repeat
from pathlib import Path
from typing import Literal, NamedTuple

from ..utils.files import link_or_copy

#: Occurrences of a word recorded per page: enough to fill three fragments of a page where
#: the word is dense. Fragments never reach past the last recorded occurrence of a word that
#: may have more, so no occurrence inside a fragment goes unmarked.
MAX_POSITIONS = 32
#: Occurrences of each word read when a query has several words, whose occurrences are merged:
#: three fragments rarely hold more, and a fragment stops short of the first one not read.
MERGE_POSITIONS = 12
#: A word longer than this (in bytes: a hash, a base64 blob) is not recorded: no query matches it.
MAX_WORD_BYTES = 255
#: How far past a fragment's end a space is looked for, to end it on a word boundary.
END_SLACK = 20
#: Pages of at most this many bytes of escaped text are searched for words when shown, not
#: recorded: recording every short page made the index build three times as long and the index
#: several times larger, for a highlight of the Python docs a little faster.
SHORT_PAGE_BYTES = 2048

#: text start, text bytes, characters, first entry, entries
SLOT = struct.Struct("<QIIQI")
#: first position, positions, word length in bytes
ENTRY = struct.Struct("<QBB")
_SLOT_UNPACK = SLOT.unpack_from
_ENTRY_UNPACK = ENTRY.unpack_from
_ARRAYS = {"page-ids": "q", "keys": "Q", "positions": "I", "versions": "q"}
_RECORDS = ("slots", "entries")

#: A word (as the query reader and tantivy see them) or an entity that escaping made: the
#: words inside ``&amp;`` and ``&#x27;`` are not the page's.
_TOKEN = re.compile(r"&(?:amp|lt|gt|quot|#x27);|\w+")
#: A passage's words are told apart by the low bits of their positions: at most this many.
GROUP_BITS = 3
MAX_GROUPS = 1 << GROUP_BITS
GROUP_MASK = MAX_GROUPS - 1
#: Pages written between two flushes of the arrays to disk.
_FLUSH_EVERY = 4096
#: A slot is its shard's key, shifted by SHARD_BITS, and the page's number in the shard.
SHARD_BITS = 32
_NUMBER = (1 << SHARD_BITS) - 1
#: The largest key of a shard a slot holds (tantivy's integer fields are signed 64-bit).
MAX_SHARD_KEY = (1 << (63 - SHARD_BITS)) - 1
#: In a block of versions, a page's number is its version's offset in the block, shifted by
#: VERSION_BITS, and its place among its version's pages (a block holds versions of at most
#: ``search.shards.VERSION_PAGES`` pages).
VERSION_BITS = 11
_IN_VERSION = (1 << VERSION_BITS) - 1


def slot_of(shard: int, number: int) -> int:
    return shard << SHARD_BITS | number


def numbered_by_version(shard: int, last: int) -> bool:
    """Whether the slots of ``shard``, whose last version is ``last``, are numbered by version
    (``slots_of``): it is a block, whose offsets a number holds."""
    return not shard & 1 and not (last - shard // 2) >> (SHARD_BITS - VERSION_BITS)


def version_slots(shard: int, version: int) -> tuple[int, int]:
    """The first and the last slot a page of ``version`` may have in ``shard``, a block numbered by version."""
    offset = version - shard // 2
    return slot_of(shard, offset << VERSION_BITS), slot_of(shard, (offset + 1) << VERSION_BITS) - 1


def slots_of(shard: int, versions: Sequence[int]) -> tuple[list[int], list[int]]:
    """The slot of each page of ``shard`` (a key of ``search.shards.Layout``), whose pages are
    of ``versions`` (each page's, in the shard's order), and its ``versions`` file (offset and
    first place of each version, one after another; empty when its numbers are places: a shard
    of one version, whose key is odd, or a block whose offsets a number does not hold)."""
    first = shard // 2
    if not numbered_by_version(shard, versions[-1] if versions else first):
        return [slot_of(shard, place) for place in range(len(versions))], []
    slots, table, last, start = [], [], None, 0
    for place, version in enumerate(versions):
        if version != last:
            table += [version - first, place]
            last, start = version, place
        slots.append(slot_of(shard, (version - first) << VERSION_BITS | (place - start)))
    return slots, table


@lru_cache(maxsize=1 << 18)
def term_key(term: str) -> int:
    """A stable 64-bit key of a lower-case word, the same at index time and query time."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=8).digest(), "little")


class Words(NamedTuple):
    """The lower-case words of a query, and their keys, as highlighting looks them up."""

    terms: tuple[str, ...]
    keys: tuple[int, ...]


def query_words(terms: Iterable[str]) -> Words:
    terms = tuple(dict.fromkeys(terms))
    return Words(terms, tuple(term_key(term) for term in terms))


def word_positions(escaped: str) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Where each distinct lower-case word of ``escaped`` starts (in UTF-8 bytes), and its length.

    Only the first MAX_POSITIONS occurrences of a word are kept. Where lower-casing makes one
    word of two spellings of different byte lengths (a rare Unicode case), only the spelling seen
    first is recorded, so that a mark never cuts a character.
    """
    positions: dict[str, list[int]] = {}
    lengths: dict[str, int] = {}
    ascii_only = escaped.isascii()
    byte = char = 0
    for match in _TOKEN.finditer(escaped):
        word = match.group()
        if word[0] == "&":
            continue
        start = match.start()
        if ascii_only:
            byte, size = start, len(word)
        else:
            byte += len(escaped[char:start].encode())
            char = start
            size = len(word.encode())
        if size > MAX_WORD_BYTES:
            continue
        term = word.lower()
        found = positions.get(term)
        if found is None:
            positions[term] = [byte]
            lengths[term] = size
        elif len(found) < MAX_POSITIONS and lengths[term] == size:
            found.append(byte)
    return positions, lengths


class HighlightWriter:
    """Writes the highlight files of an index, page by page (a slot each), in bounded memory."""

    def __init__(self, directory: Path, versions: Sequence[int] = ()) -> None:
        """``versions``: the shard's table of versions (``slots_of``)."""
        require_little_endian()
        directory.mkdir(parents=True, exist_ok=True)
        self.arrays = {name: array(code) for name, code in _ARRAYS.items()}
        self.arrays["versions"].extend(versions)
        self.records = {name: bytearray() for name in _RECORDS}
        self.files = {name: open(directory / name, "wb") for name in ("text", *_ARRAYS, *_RECORDS)}  # noqa: SIM115 - closed in close()
        self.slots = self.text_size = self.entries = self.positions = 0

    def add(self, page_id: int, text: str, earlier: tuple[Highlights, int] | None = None) -> int:
        """Record one page; return its place in the files. ``earlier``: where an earlier build of these files
        recorded the same page with the same text (the files, and the page's place in them),
        whose record is copied instead: escaping the text and finding its words again was about
        a third of what building a shard again cost when few of its pages changed."""
        copied = self._copied(page_id, len(text), *earlier) if earlier is not None else None
        if copied is not None:
            return self._added(copied)
        escaped = html.escape(text)
        data = escaped.encode()
        positions, lengths = word_positions(escaped) if len(data) > SHORT_PAGE_BYTES else ({}, {})
        self.arrays["page-ids"].append(page_id)
        self.records["slots"] += SLOT.pack(self.text_size, len(data), len(text), self.entries, len(positions))
        keys, entries, all_positions = self.arrays["keys"], self.records["entries"], self.arrays["positions"]
        for key, term in sorted((term_key(term), term) for term in positions):
            found = positions[term]
            keys.append(key)
            entries += ENTRY.pack(self.positions, len(found), lengths[term])
            all_positions.extend(found)
            self.positions += len(found)
        self.entries += len(positions)
        return self._added(data)

    def _copied(self, page_id: int, chars: int, source: Highlights, place: int) -> bytes | None:
        """Record the page at ``place`` of ``source``, its entries and positions moved to where
        this file's are, and return its escaped text (for ``_added``); None, recording nothing,
        when that page is not ``page_id`` of ``chars`` characters (not the same page)."""
        start, size, recorded_chars, first, count = _SLOT_UNPACK(source.slots, place * SLOT.size)
        if source.page_ids[place] != page_id or recorded_chars != chars:
            return None
        self.arrays["page-ids"].append(page_id)
        self.records["slots"] += SLOT.pack(self.text_size, size, chars, self.entries, count)
        if count:
            self.arrays["keys"].frombytes(source.keys[first:first + count].tobytes())
            found = list(ENTRY.iter_unpack(source.entries[first * ENTRY.size:(first + count) * ENTRY.size]))
            low, (last, last_count, _length) = found[0][0], found[-1]
            moved = self.positions - low
            self.records["entries"] += b"".join([ENTRY.pack(position + moved, recorded, length) for position, recorded, length in found])
            self.arrays["positions"].frombytes(source.positions[low:last + last_count].tobytes())
            self.positions += last + last_count - low
        self.entries += count
        return source.text[start:start + size]

    def copy_run(self, source: Highlights, first: int, count: int) -> None:
        """Record the ``count`` pages of ``source`` from its place ``first`` on, in order, as
        ``add`` records each copied page, at once: a range of a shard whose pages did not change
        (``search.build``) is a run of slots, text, keys and positions, and only the slots' and
        entries' offsets are moved."""
        if count <= 0:
            return
        rows = list(SLOT.iter_unpack(source.slots[first * SLOT.size:(first + count) * SLOT.size]))
        text_low, entry_low = rows[0][0], rows[0][3]
        text_high, entry_high = rows[-1][0] + rows[-1][1], rows[-1][3] + rows[-1][4]
        text_moved, entries_moved = self.text_size - text_low, self.entries - entry_low
        self.arrays["page-ids"].frombytes(source.page_ids[first:first + count].tobytes())
        self.records["slots"] += b"".join([SLOT.pack(start + text_moved, size, chars, entry + entries_moved, entries)
                                           for start, size, chars, entry, entries in rows])
        if entry_high > entry_low:
            self.arrays["keys"].frombytes(source.keys[entry_low:entry_high].tobytes())
            found = list(ENTRY.iter_unpack(source.entries[entry_low * ENTRY.size:entry_high * ENTRY.size]))
            low, (last, last_count, _length) = found[0][0], found[-1]
            moved = self.positions - low
            self.records["entries"] += b"".join([ENTRY.pack(position + moved, recorded, length) for position, recorded, length in found])
            self.arrays["positions"].frombytes(source.positions[low:last + last_count].tobytes())
            self.positions += last + last_count - low
        self.entries += entry_high - entry_low
        self.files["text"].write(source.text[text_low:text_high])
        self.text_size += text_high - text_low
        before, self.slots = self.slots, self.slots + count
        if self.slots // _FLUSH_EVERY != before // _FLUSH_EVERY:
            self._flush()

    def _added(self, data: bytes) -> int:
        """The place of the page whose record was just made, its escaped text ``data`` written."""
        self.files["text"].write(data)
        self.text_size += len(data)
        self.slots += 1
        if self.slots % _FLUSH_EVERY == 0:
            self._flush()
        return self.slots - 1

    def _flush(self) -> None:
        for name, values in self.arrays.items():
            values.tofile(self.files[name])
            del values[:]
        for name, record in self.records.items():
            self.files[name].write(record)
            del record[:]

    def close(self) -> None:
        self._flush()
        for handle in self.files.values():
            handle.close()

    def __enter__(self) -> HighlightWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def relabel(source: Path, target: Path, page_ids: Sequence[int]) -> None:
    """The highlight files in ``source`` made again in ``target`` for the same pages, in the same
    order, under ``page_ids``: every file linked (files of an index are never written again once
    made) but the page ids, written. A build of the service uploads a version's pages again under
    new ids, often with the same text."""
    require_little_endian()
    target.mkdir(parents=True)
    for name in ("text", *_ARRAYS, *_RECORDS):
        if name != "page-ids":
            link_or_copy(source / name, target / name)
    with open(target / "page-ids", "wb") as handle:
        array("q", page_ids).tofile(handle)


def require_little_endian() -> None:
    """The arrays are written and read in the machine's byte order, which the format fixes as little-endian."""
    if sys.byteorder != "little":
        raise RuntimeError("docsrv's highlight files are little-endian, and this machine is not")


def _mapped(path: Path) -> mmap.mmap | bytes:
    with open(path, "rb") as handle:
        size = handle.seek(0, 2)
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""


def _cast(path: Path, code: Literal["q", "Q", "I"]) -> memoryview:
    """A file of fixed-size numbers, mapped; ValueError naming it when its length is no whole number of them."""
    data = memoryview(_mapped(path))
    if len(data) % struct.calcsize(code):
        raise ValueError(f"highlight/{path.name}: {len(data)} bytes, not a whole number of {struct.calcsize(code)}-byte numbers")
    return data.cast(code)


def _boundary(text: mmap.mmap | bytes, at: int, floor: int) -> int:
    """``at``, moved back to the start of a UTF-8 character and out of an escaped entity."""
    while at > floor and text[at] & 0xC0 == 0x80:
        at -= 1
    amp = text.rfind(b"&", max(floor, at - 7), at)
    if amp >= 0 and text.find(b";", amp, at) < 0:
        at = amp
    return at


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def scan(data: bytes, terms: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start, length) in bytes of every whole-word occurrence of ``terms`` in a short page's
    escaped text ``data``, in any case, in order; never a word inside an escaped entity."""
    page = data.decode()
    lowered = page.lower()
    found: list[tuple[int, int]] = []
    if len(lowered) == len(page):
        size = len(lowered)
        for term in terms:
            length = len(term)
            at = lowered.find(term)
            while at >= 0:
                end = at + length
                if (
                    (at == 0 or not _is_word(lowered[at - 1]))
                    and (end == size or not _is_word(lowered[end]))
                    and lowered[at - 1 : at] != "&"
                    and lowered[at - 2 : at] != "&#"
                ):
                    found.append((at, length))
                at = lowered.find(term, end)
    else:  # lower-casing changed the text's length (a rare Unicode case): offsets must come from the page itself
        pattern = re.compile(r"(?<!&)(?<!&#)\b(?:" + "|".join(map(re.escape, terms)) + r")\b", re.IGNORECASE)
        found = [(match.start(), match.end() - match.start()) for match in pattern.finditer(page)]
    if len(page) != len(data):  # characters are not bytes: count bytes
        found = [(len(page[:at].encode()), len(page[at : at + length].encode())) for at, length in found]
    found.sort()
    return found


class Highlights:
    """The highlight files of an index, mapped read-only. Safe to use from any thread."""

    def __init__(self, directory: Path) -> None:
        require_little_endian()
        self.text = _mapped(directory / "text")
        self.page_ids = _cast(directory / "page-ids", "q")
        self.keys = _cast(directory / "keys", "Q")
        self.positions = _cast(directory / "positions", "I")
        self.slots = _mapped(directory / "slots")
        self.entries = _mapped(directory / "entries")
        versions = _cast(directory / "versions", "q")
        pairs = dict(zip(versions[::2], versions[1::2], strict=False))
        #: Where each version's pages start, by its offset in the block; None when numbers are places.
        self.starts: dict[int, int] | None = pairs or None
        problem = self.problem() or self._versions_problem(len(versions), pairs)
        if problem is not None:
            raise ValueError(f"highlight/: {problem}")

    def _versions_problem(self, numbers: int, pairs: dict[int, int]) -> str | None:
        """What is wrong with the table of versions, if anything: pairs, of distinct offsets, the
        first version starting the files and none past their last page."""
        if numbers % 2:
            return f"versions holds {numbers} numbers, not pairs"
        starts = sorted(pairs.values())
        if starts and (starts[0] != 0 or starts[-1] >= len(self.page_ids) or len(starts) != numbers // 2):
            return "versions does not start each version at a slot of the files (cut short, or of another build)"
        return None

    def place(self, number: int) -> int:
        """The place in the files of the page numbered ``number`` in its shard (``slots_of``)."""
        starts = self.starts
        return number if starts is None else starts[number >> VERSION_BITS] + (number & _IN_VERSION)

    def problem(self) -> str | None:
        """What is wrong with the files' shapes, if anything: each table a whole number of rows,
        one page id a slot, one key an entry, and the last slot and entry ending where the text and
        the positions do (a file cut short or of another build does not). Checked at open, so that
        no search finds it out by answering 500."""
        slots, rest = divmod(len(self.slots), SLOT.size)
        if rest:
            return f"slots holds {len(self.slots)} bytes, not a whole number of {SLOT.size}-byte slots"
        entries, rest = divmod(len(self.entries), ENTRY.size)
        if rest:
            return f"entries holds {len(self.entries)} bytes, not a whole number of {ENTRY.size}-byte entries"
        if len(self.page_ids) != slots:
            return f"page-ids holds {len(self.page_ids)} ids for {slots} slots"
        if len(self.keys) != entries:
            return f"keys holds {len(self.keys)} keys for {entries} entries"
        if slots:
            low, size, _chars, first, count = _SLOT_UNPACK(self.slots, (slots - 1) * SLOT.size)
            if low + size != len(self.text) or first + count != entries:
                return "the last slot does not end where text and entries do (cut short, or of another build)"
        if entries:
            start, recorded, _length = _ENTRY_UNPACK(self.entries, (entries - 1) * ENTRY.size)
            if start + recorded != len(self.positions):
                return "the last entry does not end where positions do (cut short, or of another build)"
        return None

    def fragments(
        self, slot: int, words: Words, *, count: int, width: int, open_tag: bytes, close_tag: bytes, ellipsis: bool,
        passage: int = -1,
    ) -> list[str]:
        """Up to ``count`` windows of about ``width`` characters around the first matches of ``words``,
        or with ``passage`` (a byte offset: see ``passage``), the first matches from there on.

        A window starts a third of its width before its first match (at a space when there is one
        near, and never before the end of the window before it) and ends at the first space after
        its width; every match inside it is wrapped in the tags. With ``ellipsis``, ``...`` marks
        where a window cuts the page's text.

        Windows never reach past the end of the last recorded occurrence of a word that may have
        more (one cut at MAX_POSITIONS), so no occurrence inside a window goes unmarked. This runs
        for every hit of every search, so it is one function with a path for one-word queries.
        """
        low, size, chars, first, entries = _SLOT_UNPACK(self.slots, slot * SLOT.size)
        text = self.text
        keys = words.keys
        recorded_page = entries > 0  # the index build recorded this page's words: not a short page
        single = len(keys) == 1 and recorded_page and passage < 0
        marks: list = []  # one word: its positions; several, or a short page: (position, length), in order
        length = 0
        known = size
        if not recorded_page:
            marks = scan(text[low : low + size], words.terms)
        else:
            last = first + entries
            all_keys = self.keys
            for key in keys:
                entry = bisect_left(all_keys, key, first, last)
                if entry < last and all_keys[entry] == key:
                    start, recorded, length = _ENTRY_UNPACK(self.entries, entry * ENTRY.size)
                    cut = recorded == MAX_POSITIONS
                    if not single and passage < 0 and recorded > MERGE_POSITIONS:
                        recorded, cut = MERGE_POSITIONS, True
                    positions = self.positions[start : start + recorded].tolist()
                    if cut and positions[-1] + length < known:
                        known = positions[-1] + length
                    if single:
                        marks = positions
                    else:
                        marks += zip(positions, repeat(length))
            if not single:
                marks.sort()
        if not marks:
            return []
        span = width * size // chars if size > chars else width  # bytes of about ``width`` characters
        before = span // 3
        high = low + size
        known += low
        out: list[str] = []
        index, total = 0, len(marks)
        floor = low  # windows do not overlap: each starts where the one before ended, or later
        if passage > 0:  # start at the passage, after the last match before it (no match goes unmarked)
            index = bisect_left(marks, (passage, 0))
            if index:
                floor = low + marks[index - 1][0] + marks[index - 1][1]
            if index == total:  # the passage holds only other forms of the words: from the start
                index, floor = 0, low
        while index < total and len(out) < count:
            position = low + (marks[index] if single else marks[index][0])
            if position >= known:
                break
            start = position - before
            if start <= floor:
                start = floor
            else:
                back = position - span + 1
                space = text.rfind(b" ", back if back > floor else floor, start + 1)
                start = space + 1 if space >= 0 else _boundary(text, start, floor)
            end = start + span
            if end >= known:
                end = known
            else:
                space = text.find(b" ", end, end + END_SLACK if end + END_SLACK < known else known)
                end = space if space >= 0 else _boundary(text, end, start)
            pieces: list[bytes] = []
            cursor = start
            while index < total:
                if single:
                    at = low + marks[index]
                else:
                    at, length = marks[index]
                    at += low
                if at >= end:
                    break
                index += 1
                if at >= cursor and at + length <= end:
                    pieces += (text[cursor:at], open_tag, text[at : at + length], close_tag)
                    cursor = at + length
            pieces.append(text[cursor:end])
            floor = end
            fragment = b"".join(pieces).strip().decode()
            if ellipsis:
                fragment = ("..." if start > low else "") + fragment + ("..." if end < high else "")
            out.append(fragment)
        return out

    def passage(self, slot: int, groups: Sequence[Words], span: int) -> tuple[int, int]:
        """The window of at most ``span`` bytes of a page's text that holds the most of
        ``groups`` (each the forms of one query word: any form counts), the earliest such window:
        (how many groups it holds, where it starts in bytes from the page's start), or (0, -1).

        A recorded page's words are looked up (up to MAX_POSITIONS occurrences of each), a short
        page's are found in its text."""
        low, size, _chars, first, entries = _SLOT_UNPACK(self.slots, slot * SLOT.size)
        found: list[int] = []  # position << GROUP_BITS | group: ints sort faster than pairs
        if entries:
            last = first + entries
            all_keys, positions = self.keys, self.positions
            for group, words in enumerate(groups[:MAX_GROUPS]):
                for key in words.keys:
                    entry = bisect_left(all_keys, key, first, last)
                    if entry < last and all_keys[entry] == key:
                        start, recorded, _length = _ENTRY_UNPACK(self.entries, entry * ENTRY.size)
                        found += [at << GROUP_BITS | group for at in positions[start : start + recorded].tolist()]
        else:
            group_of = {term: group for group, words in enumerate(groups[:MAX_GROUPS]) for term in words.terms}
            data = self.text[low : low + size]
            for at, length in scan(data, tuple(group_of)):
                spelled = group_of.get(bytes(data[at : at + length]).decode().lower())
                if spelled is not None:  # None: lower-casing spelled it otherwise (a rare Unicode case)
                    found.append(at << GROUP_BITS | spelled)
        found.sort()
        wanted = min(len(groups), MAX_GROUPS)
        held = [0] * wanted
        best = (0, -1)
        kinds = left = 0
        spread = span << GROUP_BITS  # an event is past a window starting at ``start`` if > (start | MASK) + spread
        for event in found:
            group = event & GROUP_MASK
            if not held[group]:
                kinds += 1
            held[group] += 1
            while event > (found[left] | GROUP_MASK) + spread:
                dropped = found[left] & GROUP_MASK
                held[dropped] -= 1
                if not held[dropped]:
                    kinds -= 1
                left += 1
            if kinds > best[0]:
                best = (kinds, found[left] >> GROUP_BITS)
                if kinds == wanted:
                    break
        return best

    def opening(self, slot: int, width: int) -> str:
        """The first ``width`` characters of a page or so, escaped: the highlight of a title-only match."""
        low, size, _chars, _first, _count = _SLOT_UNPACK(self.slots, slot * SLOT.size)
        high = low + size
        stop = min(high, low + 4 * width)  # a character takes at most 4 bytes
        head = self.text[low : stop if stop == high else _boundary(self.text, stop, low)].decode()
        if stop == high and len(head) <= width:
            return head
        limit = low + len(head[:width].encode())
        cut = self.text.rfind(b" ", low, limit)
        if cut <= low + (limit - low) // 2:
            cut = _boundary(self.text, limit, low)
        return self.text[low:cut].decode()


class ShardedHighlights:
    """The highlight files of every shard of an index, a page found by its slot (``slots_of``)."""

    def __init__(self, shards: dict[int, Highlights]) -> None:
        self.shards = shards

    def _at(self, slot: int) -> tuple[Highlights, int]:
        files = self.shards[slot >> SHARD_BITS]
        return files, files.place(slot & _NUMBER)

    def page_id(self, slot: int) -> int:
        files, place = self._at(slot)
        return int(files.page_ids[place])

    def fragments(
        self, slot: int, words: Words, *, count: int, width: int, open_tag: bytes, close_tag: bytes, ellipsis: bool,
        passage: int = -1,
    ) -> list[str]:
        """``Highlights.fragments`` of the page at ``slot``."""
        files, place = self._at(slot)
        return files.fragments(place, words, count=count, width=width, open_tag=open_tag, close_tag=close_tag, ellipsis=ellipsis,
                               passage=passage)

    def passage(self, slot: int, groups: Sequence[Words], span: int) -> tuple[int, int]:
        """``Highlights.passage`` of the page at ``slot``."""
        files, place = self._at(slot)
        return files.passage(place, groups, span)

    def opening(self, slot: int, width: int) -> str:
        """``Highlights.opening`` of the page at ``slot``."""
        files, place = self._at(slot)
        return files.opening(place, width)
