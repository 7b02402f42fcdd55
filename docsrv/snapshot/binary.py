"""The records as a server holds them, in MessagePack: what a load that trusts an earlier check
decodes instead of JSON Lines.

Decoding JSON Lines is the most of a trusted load (6.3 s of 17 at the large scale): text is
scanned, numbers and dates read from digits, and a page's text skipped character by
character when only its head is kept. The same records in msgspec's MessagePack decode
faster (the medium snapshot: builds 1.77 -> 1.28 s, pages without their text 0.88 -> 0.26 s).
What the store then computes from them is kept too: each kind's file holds its public records in
the order they are served (no filter or sort at the next load) and the store's groupings and
sorted orders of them as positions (``utils/positions.py``).

After a load that knows its records are right (it checked them, or trusted a record of a check)
and kept pages without their text (a server whose search index holds it), the store writes them
beside the record files, one ``.docsrv-<kind>.msgpack`` a kind, and the record of the check
(``verified.py``) lists them with the record files: a later load of the same files decodes them.
They are a private cache of one directory, as the commands' ranges are: never published or
pulled (a snapshot's hidden files are not), never read unless the record of the check names
them as they are, and rewritten after any change. JSON Lines stays the snapshot's format.
"""

from __future__ import annotations

import logging
import mmap
import operator
from pathlib import Path
from typing import Generic, TypeVar

import msgspec

from ..utils.files import replace_file
from ..utils.positions import POSITION_BYTES, Grouping, positions_of
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
LAYOUT_VERSION = 2


class Derived(msgspec.Struct, array_like=True):
    """What the store computes from one kind's served records, by name: its groupings and sorted
    orders (positions in the served list)."""

    groupings: dict[str, Grouping] = msgspec.field(default_factory=dict)
    orders: dict[str, bytes] = msgspec.field(default_factory=dict)


class ServedRecords(msgspec.Struct, Generic[T], array_like=True):
    """One kind's file: its public records in served order, and what was derived from them."""

    layout_version: int
    records: list[T]
    derived: Derived


def binary_path(directory: Path, kind: str) -> Path:
    return directory / f".docsrv-{kind}.msgpack"


def binary_paths(directory: Path) -> list[Path]:
    return [binary_path(directory, kind) for kind in BINARY_KINDS]


def write_binary(directory: Path, records: dict[str, list], derived: dict[str, Derived]) -> list[Path]:
    """Write the served records of every kind and what was derived from them; the files written.
    An OSError (a full disk, a read-only directory) is raised: no record of a check lists them."""
    encoder = msgspec.msgpack.Encoder()
    paths = []
    for kind in BINARY_KINDS:
        path = binary_path(directory, kind)
        replace_file(path, encoder.encode(ServedRecords(LAYOUT_VERSION, records[kind], derived.get(kind, Derived()))))
        paths.append(path)
    return paths


def read_binary(directory: Path) -> tuple[dict[str, list], dict[str, Derived]] | None:
    """The served records of every kind and what was derived from them, decoded from maps of the
    files (not copied into memory first); None, with the file named in the log, when one cannot
    be read, does not decode, or does not match its records."""
    records: dict[str, list] = {}
    derived: dict[str, Derived] = {}
    for kind, cls in BINARY_KINDS.items():
        path = binary_path(directory, kind)
        try:
            with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                served = msgspec.msgpack.decode(mapped, type=ServedRecords[cls])  # type: ignore[valid-type]
            mismatch = mismatched(served)
        except (OSError, ValueError, msgspec.DecodeError) as error:
            mismatch = str(error)
        if mismatch:
            log.warning("%s: not the records docsrv wrote (%s); reading the JSON Lines", path.name, mismatch)
            return None
        records[kind], derived[kind] = served.records, served.derived
    return records, derived


def mismatched(served: ServedRecords) -> str | None:
    """Why what was derived cannot be of these records, if it cannot: lengths, and every position
    within the records and every group's end after the one before (scanned in C: a position out
    of bounds would answer 500, or stop a start). The record of the check seals the content."""
    if served.layout_version != LAYOUT_VERSION:
        return f"layout version {served.layout_version}, not {LAYOUT_VERSION}"
    count = len(served.records)
    for name, grouping in served.derived.groupings.items():
        ends = positions_of(grouping.ends)
        if len(grouping.order) != POSITION_BYTES * count or len(ends) != len(grouping.keys) or (ends[-1] if ends else 0) != count:
            return f"its grouping {name!r} is of other records"
        if not within(grouping.order, count) or not all(map(operator.lt, ends[:-1], ends[1:])):
            return f"its grouping {name!r} has positions out of bounds"
    for name, order in served.derived.orders.items():
        if len(order) != POSITION_BYTES * count:
            return f"its order {name!r} is of other records"
        if not within(order, count):
            return f"its order {name!r} has positions out of bounds"
    return None


def within(order: bytes, count: int) -> bool:
    """Whether every position in ``order`` is one of ``count`` records."""
    found = positions_of(order)
    return not found or max(found) < count

