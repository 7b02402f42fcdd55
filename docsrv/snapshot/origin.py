"""An origin: a directory that any static HTTP server, CDN or object store serves, from which
replicas pull a snapshot and the changesets after it (``docsrv snapshot publish`` writes it,
``docsrv snapshot pull`` reads it; docs/snapshot-format.md, "Publishing to an origin").

    head.json                   what replicas poll: the base and the changesets after it
    snapshots/<name>/           a snapshot published whole (its manifest names its sequence)
    changesets/<sequence>.jsonl a changeset (``changeset.py``)

``head.json`` is written last, in one rename: a reader sees the old head or the new one, and
every file the new one names is already whole.
"""

from __future__ import annotations

import uuid
from typing import Annotated

import msgspec

from .errors import DECODE_ERRORS
from .records import AwareDatetime, SnapshotName

FORMAT = "docsrv-origin"
FORMAT_VERSION = 1
HEAD = "head.json"
SNAPSHOTS = "snapshots"
CHANGESETS = "changesets"
Sequence = Annotated[int, msgspec.Meta(ge=0)]
#: Which history an origin publishes: an id made at its first publish (empty from an origin an
#: earlier docsrv wrote, until its next publish).
History = Annotated[str, msgspec.Meta(pattern=r"^([0-9a-f]{32})?$")]
#: A Postgres log position as it writes one (``16/B374D848``); empty where there is none.
Lsn = Annotated[str, msgspec.Meta(pattern=r"^([0-9A-F]{1,8}/[0-9A-F]{1,8})?$")]
#: The most changesets after a base: past it, a publisher publishes a snapshot whole (``head.json``,
#: which every replica fetches for each changeset, lists them), and a pull refuses a head that
#: lists more (or more than one more leading to its base, the last of which makes it).
MAX_CHANGESETS = 1000
#: The largest changeset: past it, a publisher publishes the snapshot whole, and a pull refuses
#: one. A worker applies a changeset in memory beside the requests it serves, and what it costs
#: (time with the GIL, memory until the next fold) grows with its size.
MAX_CHANGESET_BYTES = 8 << 20


class PublishedChangeset(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    sequence: Sequence
    #: The snapshot it applies to, and the one it makes, by name.
    follows: SnapshotName
    product: SnapshotName
    #: Its file's size and SHA-256: they seal it.
    size: Annotated[int, msgspec.Meta(ge=0)]
    sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
    #: When it was published: a replica's lag is measured from it.
    published_at: AwareDatetime | None = None


class Head(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    format: str
    format_version: int
    #: The snapshot published whole that the changesets follow, and its sequence.
    base: SnapshotName
    base_sequence: Sequence
    changesets: list[PublishedChangeset]
    published_at: AwareDatetime
    #: At a compaction, the changesets from the base before up to this base (the last one makes
    #: it): a replica that follows the old base reaches the new one by changesets, not whole.
    leading: list[PublishedChangeset] = []
    #: The history the origin publishes (``History``): its sequences are of that history alone.
    history: History = ""
    #: Of an origin that ``docsrv snapshot follow`` writes: the source database's LSN its state is
    #: as of (Postgres's ``16/B374D848``), where a follower started again resumes.
    source_lsn: Lsn = ""

    @property
    def name(self) -> str:
        """The snapshot the origin publishes now: the last changeset's product, or the base."""
        return self.changesets[-1].product if self.changesets else self.base

    @property
    def sequence(self) -> int:
        return self.changesets[-1].sequence if self.changesets else self.base_sequence

    @property
    def chain(self) -> list[PublishedChangeset]:
        """Every changeset the origin lists, in order: those leading to the base, then those after it."""
        return [*self.leading, *self.changesets]

    def problem(self) -> str | None:
        """What makes the chain unusable, in one line: another format, a changeset that does
        not follow the one before (a gap, or another base), more changesets or a larger one than
        a publisher writes."""
        if self.format != FORMAT or self.format_version != FORMAT_VERSION:
            return f"format {self.format!r} version {self.format_version}: this docsrv reads {FORMAT!r} version {FORMAT_VERSION}"
        if len(self.changesets) > MAX_CHANGESETS or len(self.leading) > MAX_CHANGESETS + 1:
            return (f"lists {len(self.changesets)} changesets after its base and {len(self.leading)} leading to it: a publisher "
                    f"lists at most {MAX_CHANGESETS} (and one more leading), and publishes whole past that")
        for changeset in self.chain:
            if changeset.size > MAX_CHANGESET_BYTES:
                return (f"changeset {changeset.sequence} is {changeset.size} bytes, more than the {MAX_CHANGESET_BYTES} a changeset "
                        "may hold: a publisher publishes whole past that")
        if self.leading:
            first = self.leading[0]
            name, sequence = first.follows, first.sequence - 1
            for changeset in self.leading:
                if changeset.sequence != sequence + 1 or changeset.follows != name:
                    return f"leading changeset {changeset.sequence} does not follow {name} at {sequence}"
                name, sequence = changeset.product, changeset.sequence
            if (name, sequence) != (self.base, self.base_sequence):
                return f"the leading changesets make {name} at {sequence}, not the base {self.base} at {self.base_sequence}"
        name, sequence = self.base, self.base_sequence
        for changeset in self.changesets:
            if changeset.sequence != sequence + 1:
                return f"changeset {changeset.sequence} comes after {sequence} (a gap)"
            if changeset.follows != name:
                return f"changeset {changeset.sequence} follows {changeset.follows}, not {name} (another base)"
            name, sequence = changeset.product, changeset.sequence
        return None

    def position(self, name: str, sequence: int) -> int | None:
        """Where a snapshot named ``name`` at ``sequence`` stands on this chain: how many of the
        changesets of ``chain`` it has; None when it is not on the chain."""
        chain = self.chain
        if chain and (chain[0].follows, chain[0].sequence - 1) == (name, sequence):
            return 0
        if name == self.base and sequence == self.base_sequence:
            return len(self.leading)
        for place, changeset in enumerate(chain, start=1):
            if changeset.product == name and changeset.sequence == sequence:
                return place
        return None


def new_history() -> str:
    """An id for a history an origin begins."""
    return uuid.uuid4().hex


def changeset_path(sequence: int) -> str:
    return f"{CHANGESETS}/{sequence}.jsonl"


def decode_head(data: bytes) -> Head:
    """The head in ``data``; ValueError saying in one line why it cannot be followed."""
    try:
        head = msgspec.json.decode(data, type=Head)
    except DECODE_ERRORS as error:
        raise ValueError(f"not an origin's head: {error}") from None
    problem = head.problem()
    if problem is not None:
        raise ValueError(problem)
    return head
