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

The versions and builds are not decoded at the load (ON_READ_KINDS): they are most of a large
snapshot's records, and a request reads few of them. Their files hold each record's MessagePack
one after the other, where each starts, and their ids in ascending order with each one's
position: a record is decoded when first read and kept (``Undecoded``), and found by id through
those (``utils.sequences.ById``). A worker then decodes what its requests read, in its own memory.
"""

from __future__ import annotations

import logging
import mmap
import operator
from array import array
from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

import msgspec

from ..utils.files import replace_file
from ..utils.sequences import POSITION, POSITION_BYTES, ById, Grouping, positions_of
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
#: The kinds whose records are decoded when first read (``Undecoded``), not at the load.
ON_READ_KINDS = frozenset({"versions", "builds"})
#: Raised when what the files hold changes, so that older files are not read as newer ones.
LAYOUT_VERSION = 6
#: Earlier layouts, still read: each kind's records in one array; then in pieces, without the
#: pages' groupings by project and by version (how many pages each has); then with them; then
#: each piece a byte string, the builds' too (decoded at the load).
ONE_ARRAY_LAYOUT = 2
UNGROUPED_PAGES_LAYOUT = 3
PIECES_AS_ARRAYS_LAYOUT = 4
BYTE_PIECES_LAYOUT = 5
#: Array type codes of where each record of a kind decoded when read starts (and the last, where
#: the records end) and of their ids, in the machine's byte order (a private cache, as positions are).
START, ID = "Q", "q"
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
    #: Counts of what is under them, by name: the commands of the builds (counting them reads
    #: every build's id, which a load that decodes builds when read does not hold).
    counts: dict[str, int] = msgspec.field(default_factory=dict)


class ServedRecords(msgspec.Struct, Generic[T], array_like=True):
    """One kind's file: its public records in served order, in pieces (each piece's MessagePack,
    ``pieces_of``), and what was derived from them. Of a kind decoded when read, one piece of
    each record's MessagePack after the other, and where each starts (``START``), their ids
    ascending (``ID``) and the position of each of those among the records."""

    layout_version: int
    records: list[T]
    derived: Derived
    starts: bytes = b""
    ids: bytes = b""
    places: bytes = b""


def binary_path(directory: Path, kind: str) -> Path:
    return directory / f".docsrv-{kind}.msgpack"


def write_binary(directory: Path, records: Mapping[str, Sequence[Any]], derived: dict[str, Derived]) -> list[Path]:
    """Write the served records of every kind and what was derived from them; the files written.
    An OSError (a full disk, a read-only directory) is raised: no record of a check lists them."""
    encoder = msgspec.msgpack.Encoder()
    paths = []
    for kind in BINARY_KINDS:
        path = binary_path(directory, kind)
        kept = derived.get(kind, Derived())
        if kind in ON_READ_KINDS:
            served = one_by_one(records[kind], kept, encoder)
        else:
            served = ServedRecords(LAYOUT_VERSION, [encoder.encode(piece) for piece in pieces_of(records[kind])], kept)
        replace_file(path, encoder.encode(served))
        paths.append(path)
    return paths


def one_by_one(records: Sequence[Any], derived: Derived, encoder: msgspec.msgpack.Encoder) -> ServedRecords[bytes]:
    """The file of a kind decoded when read: each record's MessagePack, where each starts, and
    their ids ascending with the position of each."""
    encoded = [encoder.encode(record) for record in records]
    by_id = sorted(range(len(records)), key=[record.id for record in records].__getitem__)
    return ServedRecords(LAYOUT_VERSION, [b"".join(encoded)], derived, array(START, accumulate(map(len, encoded), initial=0)).tobytes(),
                         array(ID, [records[place].id for place in by_id]).tobytes(), array(POSITION, by_id).tobytes())


def pieces_of(records: Sequence[T]) -> list[Sequence[T]]:
    return [records[start:start + DECODE_PIECE] for start in range(0, len(records), DECODE_PIECE)]


#: A file of this layout: each piece a view of its bytes in the map of the file (not copied).
_pieces = msgspec.msgpack.Decoder(ServedRecords[memoryview])
#: A file of an earlier layout: each piece (or record) found by walking through it.
_walked = msgspec.msgpack.Decoder(ServedRecords[msgspec.Raw])
#: How a file of records begins: an array of six items (MessagePack's fixarray; three before
#: this layout), the first the layout version (a positive fixint: one byte below 0x80).
_ARRAY_OF_SIX, _ARRAY_OF_THREE = 0x96, 0x93


def read_binary(directory: Path) -> tuple[dict[str, Sequence[Any]], dict[str, Derived], bool] | None:
    """The served records of every kind and what was derived from them, decoded from maps of the
    files (not copied into memory first), a piece at a time, and whether any file is of an
    earlier layout (a prepare writes them again); None, with the file named in the log, when one
    cannot be read, does not decode, or does not match its records."""
    records: dict[str, Sequence[Any]] = {}
    derived: dict[str, Derived] = {}
    earlier = False
    for kind, cls in BINARY_KINDS.items():
        path = binary_path(directory, kind)
        try:
            with open(path, "rb") as file:
                mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            split = split_pieces(mapped)  # the bytes of each piece (each record, in the first layout), in the map
            decoder = msgspec.msgpack.Decoder(list[cls])  # type: ignore[valid-type]
            found: Sequence[Any]
            if split.layout_version == LAYOUT_VERSION and kind in ON_READ_KINDS:
                found = Undecoded.of(split, msgspec.msgpack.Decoder(cls))
            elif split.layout_version in (LAYOUT_VERSION, BYTE_PIECES_LAYOUT, PIECES_AS_ARRAYS_LAYOUT, UNGROUPED_PAGES_LAYOUT):
                found = decoded = []
                for piece in split.records:
                    decoded += decoder.decode(piece)
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
    pieces = len(mapped) > 1 and (mapped[0], mapped[1]) in ((_ARRAY_OF_SIX, LAYOUT_VERSION), (_ARRAY_OF_THREE, BYTE_PIECES_LAYOUT))
    return _pieces.decode(mapped) if pieces else _walked.decode(mapped)


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



class Undecoded(Sequence[T]):
    """A kind's records in served order, each decoded from its MessagePack in the map of the file
    when first read, then kept: a slice decodes those it holds that are not yet, found in C
    (``decoded``)."""

    __slots__ = ("_data", "_decode", "_records", "_starts", "by_id", "decoded")

    def __init__(self, data: memoryview, starts: array, decoder: msgspec.msgpack.Decoder[T], ids: array, places: array) -> None:
        self._data = data
        self._starts = starts
        self._decode = decoder.decode
        self._records: list[T | None] = [None] * (len(starts) - 1)
        #: One byte a record: whether it is decoded.
        self.decoded = bytearray(len(self._records))
        #: The records by id.
        self.by_id: ById[T] = ById(self, ids, places)

    @classmethod
    def of(cls, split: ServedRecords[Any], decoder: msgspec.msgpack.Decoder[T]) -> Undecoded[T]:
        """The records of a file of a kind decoded when read; ValueError when its starts, ids and
        places do not fit its records (one out of bounds would answer 500)."""
        starts, ids, places = array(START), array(ID), positions_of(split.places)
        starts.frombytes(split.starts)
        ids.frombytes(split.ids)
        if len(split.records) != 1 or not starts or starts[0] != 0 or starts[-1] != len(split.records[0]):
            raise ValueError("where its records start is not where they are")
        count = len(starts) - 1
        if not all(map(operator.lt, starts[:-1], starts[1:])):
            raise ValueError("where its records start does not rise")
        if len(ids) != count or len(places) != count or not all(map(operator.lt, ids[:-1], ids[1:])) or not within(split.places, count):
            raise ValueError("its ids are not of its records")
        return cls(split.records[0], starts, decoder, ids, places)

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self._records))
            if step != 1:
                return [self[place] for place in range(start, stop, step)]
            decoded = self.decoded
            place = decoded.find(0, start, stop)
            while place >= 0:
                self._decoded_at(place)
                place = decoded.find(0, place + 1, stop)
            return self._records[start:stop]  # type: ignore[return-value]
        found = self._records[index]
        return self._decoded_at(index % len(self._records)) if found is None else found

    def __iter__(self) -> Iterator[T]:
        for start in range(0, len(self._records), DECODE_PIECE):
            yield from self[start:start + DECODE_PIECE]

    def _decoded_at(self, place: int) -> T:
        starts = self._starts
        record = self._records[place] = self._decode(self._data[starts[place]:starts[place + 1]])
        self.decoded[place] = 1
        return record
