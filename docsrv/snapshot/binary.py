"""The records as a server holds them, in MessagePack: what a load that trusts an earlier check
decodes instead of JSON Lines.

Decoding JSON Lines is the most of a trusted load: text is scanned, numbers and dates read
from digits, and a page's text skipped character by character when only its head is kept. The
same records in msgspec's MessagePack decode faster, pages without their text most of all.
What the store then computes from them is kept too: each kind's file holds its public records in
the order they are served (no filter or sort at the next load) and the store's groupings and
sorted orders of them as positions (``utils/sequences.py``).

After a load that knows its records are right (it checked them, or trusted a record of a check)
and kept pages without their text (a server whose search index holds it), the store writes them
beside the record files, one ``.docsrv-<kind>.msgpack`` a kind, and the record of the check
(``verified.py``) lists them with the record files: a later load of the same files decodes them.
They are a private cache of one directory, as the commands' ranges are: never published or
pulled (a snapshot's hidden files are not), never read unless the record of the check names
them as they are, and rewritten after any change. JSON Lines stays the snapshot's format.

A kind's records are kept in pieces of DECODE_PIECE, decoded one at a time: msgspec holds the GIL
while it decodes, and a process that loads a store beside a loop of its own (a sidecar loading
its state ahead of the next change of pages, while it goes on pulling) would have that loop wait
as long. Each piece is written as one MessagePack byte string holding the piece's array: finding
the pieces then reads their lengths, where an array of arrays had to be walked record by record
before a piece could be decoded (all of it once more). The files of an earlier docsrv are read
too: pieces written as arrays (PIECES_AS_ARRAYS_LAYOUT), without the pages' groupings
(UNGROUPED_PAGES_LAYOUT, which the store then makes) or with the records in one array
(ONE_ARRAY_LAYOUT, split into each record's bytes first); a prepare writes any of them again.
"""

from __future__ import annotations

import logging
import mmap
import operator
from pathlib import Path
from typing import Generic, TypeVar

import msgspec

from ..utils.files import replace_file
from ..utils.sequences import POSITION_BYTES, Grouping, positions_of
from .records import Build, PageHead, Project, ProjectRelationship, User, Version

log = logging.getLogger("docsrv")

T = TypeVar("T")

#: The kinds kept in MessagePack, as a load without page text holds them.
BINARY_KINDS: dict[str, type] = {
    "users": User,
    "projects": Project,
    "relationships": ProjectRelationship,
    "versions": Version,
    "builds": Build,
    "pages": PageHead,
}
#: Raised when what the files hold changes, so that older files are not read as newer ones.
LAYOUT_VERSION = 5
#: Earlier layouts, still read: each kind's records in one array; then in pieces, without the
#: pages' groupings by project and by version (how many pages each has); then with them.
ONE_ARRAY_LAYOUT = 2
UNGROUPED_PAGES_LAYOUT = 3
PIECES_AS_ARRAYS_LAYOUT = 4
#: The records of a piece, decoded in one call, which holds the GIL: a kind's records in one call
#: held it for seconds at the large scale, and a sidecar's pulls beside the load waited as long.
DECODE_PIECE = 16384
#: The MessagePack head of an array of up to 2**32 - 1 items, its length after it (big-endian).
_ARRAY_32 = b"\xdd"


class Derived(msgspec.Struct, array_like=True):
    """What the store computes from one kind's served records, by name: its groupings and sorted
    orders (positions in the served list)."""

    groupings: dict[str, Grouping] = msgspec.field(default_factory=dict)
    orders: dict[str, bytes] = msgspec.field(default_factory=dict)


class ServedRecords(msgspec.Struct, Generic[T], array_like=True):
    """One kind's file: its public records in served order, in pieces (each piece's MessagePack,
    ``pieces_of``), and what was derived from them."""

    layout_version: int
    records: list[T]
    derived: Derived


def binary_path(directory: Path, kind: str) -> Path:
    return directory / f".docsrv-{kind}.msgpack"


def write_binary(directory: Path, records: dict[str, list], derived: dict[str, Derived]) -> list[Path]:
    """Write the served records of every kind and what was derived from them; the files written.
    An OSError (a full disk, a read-only directory) is raised: no record of a check lists them."""
    encoder = msgspec.msgpack.Encoder()
    paths = []
    for kind in BINARY_KINDS:
        path = binary_path(directory, kind)
        pieces = [encoder.encode(piece) for piece in pieces_of(records[kind])]
        replace_file(path, encoder.encode(ServedRecords(LAYOUT_VERSION, pieces, derived.get(kind, Derived()))))
        paths.append(path)
    return paths


def pieces_of(records: list[T]) -> list[list[T]]:
    return [records[start:start + DECODE_PIECE] for start in range(0, len(records), DECODE_PIECE)]


#: A file of this layout: each piece a view of its bytes in the map of the file (not copied).
_pieces = msgspec.msgpack.Decoder(ServedRecords[memoryview])
#: A file of an earlier layout: each piece (or record) found by walking through it.
_walked = msgspec.msgpack.Decoder(ServedRecords[msgspec.Raw])
#: How a file of records begins: an array of three items (MessagePack's fixarray), the first the
#: layout version (a positive fixint: one byte below 0x80).
_ARRAY_OF_THREE = 0x93


def read_binary(directory: Path) -> tuple[dict[str, list], dict[str, Derived], bool] | None:
    """The served records of every kind and what was derived from them, decoded from maps of the
    files (not copied into memory first), a piece at a time, and whether any file is of an
    earlier layout (a prepare writes them again); None, with the file named in the log, when one
    cannot be read, does not decode, or does not match its records."""
    records: dict[str, list] = {}
    derived: dict[str, Derived] = {}
    earlier = False
    for kind, cls in BINARY_KINDS.items():
        path = binary_path(directory, kind)
        try:
            with open(path, "rb") as file:
                mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            split = split_pieces(mapped)  # the bytes of each piece (each record, in the first layout), in the map
            decoder = msgspec.msgpack.Decoder(list[cls])  # type: ignore[valid-type]
            found: list = []
            if split.layout_version in (LAYOUT_VERSION, PIECES_AS_ARRAYS_LAYOUT, UNGROUPED_PAGES_LAYOUT):
                for piece in split.records:
                    found += decoder.decode(piece)
                earlier = earlier or split.layout_version != LAYOUT_VERSION
            elif split.layout_version == ONE_ARRAY_LAYOUT:
                found, earlier = in_pieces(split.records, decoder), True
            else:
                raise ValueError(f"layout version {split.layout_version}, not {LAYOUT_VERSION}")
            mismatch = mismatched(len(found), split.derived)
        except (OSError, ValueError, msgspec.DecodeError) as error:
            mismatch = str(error)
        if mismatch:
            log.warning("%s: not the records docsrv wrote (%s); reading the JSON Lines", path.name, mismatch)
            return None
        records[kind], derived[kind] = found, split.derived
    return records, derived, earlier


def split_pieces(mapped: mmap.mmap) -> ServedRecords[memoryview] | ServedRecords[msgspec.Raw]:
    """A kind's file with the bytes of each piece (each record, in the first layout) in the map,
    as its layout version says they are kept (ValueError, msgspec.DecodeError: not a file of
    records)."""
    this_layout = len(mapped) > 1 and mapped[0] == _ARRAY_OF_THREE and mapped[1] == LAYOUT_VERSION
    return _pieces.decode(mapped) if this_layout else _walked.decode(mapped)


def in_pieces(encoded: list[msgspec.Raw] | list[memoryview], decoder: msgspec.msgpack.Decoder[list[T]]) -> list[T]:
    """The records ``encoded`` holds (each one's MessagePack), decoded DECODE_PIECE at a time."""
    records: list[T] = []
    for start in range(0, len(encoded), DECODE_PIECE):
        piece = encoded[start:start + DECODE_PIECE]
        records += decoder.decode(b"".join((_ARRAY_32, len(piece).to_bytes(4, "big"), *piece)))
    return records


def mismatched(count: int, derived: Derived) -> str | None:
    """Why what was ``derived`` cannot be of ``count`` records, if it cannot: lengths, and every
    position within the records and every group's end after the one before (scanned in C: a
    position out of bounds would answer 500, or stop a start). The record of the check seals the
    content."""
    for name, grouping in derived.groupings.items():
        ends = positions_of(grouping.ends)
        if len(grouping.order) != POSITION_BYTES * count or len(ends) != len(grouping.keys) or (ends[-1] if ends else 0) != count:
            return f"its grouping {name!r} is of other records"
        if not within(grouping.order, count) or not all(map(operator.lt, ends[:-1], ends[1:])):
            return f"its grouping {name!r} has positions out of bounds"
    for name, order in derived.orders.items():
        if len(order) != POSITION_BYTES * count:
            return f"its order {name!r} is of other records"
        if not within(order, count):
            return f"its order {name!r} has positions out of bounds"
    return None


def within(order: bytes, count: int) -> bool:
    """Whether every position in ``order`` is one of ``count`` records."""
    found = positions_of(order)
    return not found or max(found) < count

