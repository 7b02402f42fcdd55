"""The messages of ``pgoutput``, Postgres's built-in logical decoding output (protocol version 1),
decoded from the bytes a replication stream carries.

The format is Postgres's "Logical Replication Message Formats": one message per ``XLogData``, its
first byte naming it. Only what a follower of committed changes needs is kept; a message of a
later protocol (streamed or two-phase transactions), which version 1 never sends, is refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: Postgres counts time in microseconds from 2000-01-01 UTC.
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")

#: A tuple's value: text as the type's output function writes it; None for SQL NULL; UNCHANGED
#: for a TOASTed value an update left as it was (not sent).
class Unchanged:
    """The value of a TOASTed column an update left as it was (pgoutput's ``u``): not sent."""


UNCHANGED = Unchanged()
Value = str | None | Unchanged


class DecodeError(ValueError):
    """Bytes that are not a pgoutput message of protocol version 1."""


def lsn_text(lsn: int) -> str:
    """An LSN as Postgres writes it: ``16/B374D848``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_of(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def moment(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int
    committed_at: datetime
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    lsn: int
    end_lsn: int
    committed_at: datetime


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_oid: int
    #: Part of the replica identity (the key a delete carries).
    key: bool


@dataclass(frozen=True, slots=True)
class Relation:
    relation_id: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class Insert:
    relation_id: int
    new: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Update:
    relation_id: int
    #: The old key (``K``) or old row (``O``, with REPLICA IDENTITY FULL), when sent.
    old: tuple[Value, ...] | None
    new: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Delete:
    relation_id: int
    #: The old key, or the whole old row with REPLICA IDENTITY FULL.
    old: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Truncate:
    relation_ids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True, slots=True)
class Ignored:
    """A message a follower of committed rows has no use for: an origin, a type, a logical message."""

    kind: str


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | Ignored


class _Reader:
    __slots__ = ("at", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 1

    def unpack(self, shape: struct.Struct) -> int:
        try:
            (value,) = shape.unpack_from(self.data, self.at)
        except struct.error:
            raise DecodeError(f"message {self.data[:1]!r} cut short at byte {self.at}") from None
        self.at += shape.size
        return int(value)

    def byte(self) -> str:
        if self.at >= len(self.data):
            raise DecodeError(f"message {self.data[:1]!r} cut short at byte {self.at}")
        self.at += 1
        return chr(self.data[self.at - 1])

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise DecodeError(f"message {self.data[:1]!r}: a string with no end at byte {self.at}")
        text = self.data[self.at:end].decode()
        self.at = end + 1
        return text

    def tuple_data(self) -> tuple[Value, ...]:
        count = self.unpack(_I16)
        values: list[Value] = []
        for _ in range(count):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED)
            elif kind == "t":
                size = self.unpack(_I32)
                if size < 0 or self.at + size > len(self.data):
                    raise DecodeError(f"message {self.data[:1]!r}: a value of {size} bytes past its end")
                values.append(self.data[self.at:self.at + size].decode())
                self.at += size
            else:
                raise DecodeError(f"message {self.data[:1]!r}: a value of kind {kind!r} (protocol 1 sends text, null or unchanged)")
        return tuple(values)

    def done(self) -> None:
        if self.at != len(self.data):
            raise DecodeError(f"message {self.data[:1]!r}: {len(self.data) - self.at} bytes after its end")


def decode(data: bytes) -> Message:
    """The message in ``data``; DecodeError saying in one line why it is not one."""
    if not data:
        raise DecodeError("an empty message")
    kind = chr(data[0])
    reader = _Reader(data)
    message: Message
    if kind == "B":
        message = Begin(reader.unpack(_U64), moment(reader.unpack(_I64)), reader.unpack(_U32))
    elif kind == "C":
        reader.unpack(_I8)  # flags: none are defined
        message = Commit(reader.unpack(_U64), reader.unpack(_U64), moment(reader.unpack(_I64)))
    elif kind == "R":
        relation_id, namespace, name, identity = reader.unpack(_U32), reader.string(), reader.string(), reader.byte()
        columns = []
        for _ in range(reader.unpack(_I16)):
            flags = reader.unpack(_I8)
            column_name = reader.string()
            type_oid = reader.unpack(_U32)
            reader.unpack(_I32)  # type modifier
            columns.append(Column(column_name, type_oid, bool(flags & 1)))
        message = Relation(relation_id, namespace, name, identity, tuple(columns))
    elif kind == "I":
        relation_id = reader.unpack(_U32)
        if reader.byte() != "N":
            raise DecodeError("an insert without its new row")
        message = Insert(relation_id, reader.tuple_data())
    elif kind == "U":
        relation_id = reader.unpack(_U32)
        marker = reader.byte()
        old = None
        if marker in ("K", "O"):
            old = reader.tuple_data()
            marker = reader.byte()
        if marker != "N":
            raise DecodeError("an update without its new row")
        message = Update(relation_id, old, reader.tuple_data())
    elif kind == "D":
        relation_id = reader.unpack(_U32)
        if reader.byte() not in ("K", "O"):
            raise DecodeError("a delete without its key")
        message = Delete(relation_id, reader.tuple_data())
    elif kind == "T":
        count = reader.unpack(_U32)
        options = reader.unpack(_I8)
        message = Truncate(tuple(reader.unpack(_U32) for _ in range(count)), bool(options & 1), bool(options & 2))
    elif kind in ("O", "Y", "M"):
        return Ignored(kind)
    else:
        raise DecodeError(f"message {kind!r}: not one protocol version 1 sends")
    reader.done()
    return message
