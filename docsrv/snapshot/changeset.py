"""Changesets: the records that changed from one snapshot to the next, in sequence.

A changeset is one JSON Lines file (docs/snapshot-format.md, "Changesets"). Its first line is a
header: the format, its sequence number, the snapshot it follows (by name) and the manifest of
the snapshot it produces, without its ``files``. Each other line is one change of one record:

    {"op": "upsert", "kind": "builds", "record": {...the whole record, as its file holds it...}}
    {"op": "delete", "kind": "builds", "id": 17}

Its size is that of the change: the records that differ, whole, and the ids of those removed.
It is sealed by its size and SHA-256, which the origin's ``head.json`` lists (``origin.py``),
as a manifest lists a snapshot's files.

``compute`` makes one from two snapshot directories; ``apply`` writes the snapshot it produces
from the one it follows: the kinds it changes are written anew (a record changed in its place,
a new one at the end, a build's new commands after the build's others), the others are cloned
or copied as they are, and the manifest is written last. The product holds the same records
as the snapshot the changeset was made from: served, they give the same replies, since every
order a reply shows is sorted from the records, never taken from a file's order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from ..utils.files import clone_or_copy
from .errors import DECODE_ERRORS, Problem, ProblemList, SnapshotError
from .lines import decoded_blocks, describe, line_blocks, open_records
from .load import manifest_of, record_file
from .origin import HEAD, Lsn, PublishedChangeset
from .records import FORMAT as SNAPSHOT_FORMAT
from .records import FORMAT_VERSION as SNAPSHOT_FORMAT_VERSION
from .records import KINDS, MAX_ID, OPTIONAL_KINDS, AwareDatetime, Id, Manifest, PublicUrl, SnapshotName
from .write import write_manifest

FORMAT = "docsrv-changeset"
FORMAT_VERSION = 1
Kind = Literal["users", "projects", "relationships", "versions", "builds", "build_commands", "pages"]


class Product(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The manifest of the snapshot a changeset produces, but its files (written when it is applied)."""

    name: SnapshotName
    created_at: AwareDatetime
    public_url: PublicUrl
    counts: dict[str, Annotated[int, msgspec.Meta(ge=0)]]
    description: str = ""


class Header(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    format: str
    format_version: int
    sequence: Annotated[int, msgspec.Meta(ge=1)]
    #: The name of the snapshot this changeset applies to (a base, or the product of the one before).
    follows: SnapshotName
    product: Product
    #: How many change lines follow: a file cut short between lines is found out.
    changes: Annotated[int, msgspec.Meta(ge=0)]
    #: The purge keys of every reply the changeset changes (``edge/keys.py``), which the publisher
    #: computes: an edge cache is purged from them in time proportional to the change.
    purge_keys: list[str] = []
    #: Whether no project or version of the snapshot it follows moves to another address (slug,
    #: project) or is made public, and every one it makes private or deletes holds no page:
    #: nothing the search index holds moves or goes (a replica may apply such a change in memory).
    in_place: bool = False
    #: Whether no project or version of the snapshot it follows moves to another address or is
    #: made public, whether or not one it makes private or deletes holds pages: a replica that
    #: builds the search index of the state it makes may apply it in memory (``in_place`` says
    #: this too; a changeset of an older docsrv has only ``in_place``).
    unmoved: bool = False
    #: Of a changeset ``docsrv snapshot follow`` made: the source database's LSN its product is as
    #: of, and when the last transaction in it committed there.
    source_lsn: Lsn = ""
    committed_at: AwareDatetime | None = None


class Upsert(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="op", tag="upsert"):
    kind: Kind
    record: msgspec.Raw


class Delete(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag_field="op", tag="delete"):
    kind: Kind
    id: Id
    #: The build of a deleted build command (0 elsewhere): a server applying the changeset in
    #: memory knows whose commands changed without reading the file (``live.py``).
    build: Annotated[int, msgspec.Meta(ge=0, le=MAX_ID)] = 0


Change = Upsert | Delete


class Placed(msgspec.Struct, frozen=True):
    """Where a project or version is: what decides its address and whether it is public."""

    slug: str
    project: int = 0
    privacy_level: str = "public"

    @property
    def address(self) -> tuple[str, int]:
        return self.slug, self.project


#: The kinds whose records have a place (``Placed``): a changeset that moves none is ``in_place``.
PLACED_KINDS = ("projects", "versions")
_placed = msgspec.json.Decoder(Placed)


class PageOwner(msgspec.Struct, frozen=True, gc=False):
    """A page, read for what it belongs to alone."""

    project: int
    version: int


class Identified(msgspec.Struct):
    """Any record, read for its id (and, for a build command, its build) alone."""

    id: int
    build: int = 0


class Changeset(msgspec.Struct, frozen=True):
    """A changeset read and checked: by kind, the records to write (by id, the bytes of a line)
    and the ids to remove."""

    header: Header
    upserts: dict[str, dict[int, bytes]]
    deletes: dict[str, set[int]]
    #: The build of each deleted build command, by the command's id, where the line names it.
    deleted_commands: dict[int, int]

    @property
    def kinds(self) -> set[str]:
        return {kind for kind, found in self.upserts.items() if found} | {kind for kind, found in self.deletes.items() if found}


def product_manifest(changeset: Changeset) -> Manifest:
    product = changeset.header.product
    return Manifest(format=SNAPSHOT_FORMAT, format_version=SNAPSHOT_FORMAT_VERSION, name=product.name, created_at=product.created_at,
                    public_url=product.public_url, counts=product.counts, description=product.description,
                    sequence=changeset.header.sequence)


def invalid(name: str, line: int | None, message: str) -> SnapshotError:
    """A changeset that cannot be applied: one problem, named by its file (and line)."""
    return SnapshotError(name, [Problem(name, line, message)], what="changeset")


# Reading.

_header = msgspec.json.Decoder(Header)
_change = msgspec.json.Decoder(Change)
_identified = msgspec.json.Decoder(Identified)
_DECODERS = {kind: msgspec.json.Decoder(cls) for kind, cls in KINDS.items()}


#: How many bytes ``split_lines`` splits at once.
SPLIT_PIECE = 1 << 18


def split_lines(data: bytes) -> list[bytes]:
    """``data.split(b"\\n")``, made a piece of about SPLIT_PIECE bytes at a time: one call over a
    changeset of the largest size holds the GIL for tens of milliseconds, and a worker reads its
    changesets beside the event loop that answers its requests."""
    lines: list[bytes] = []
    start = 0
    while (end := data.find(b"\n", start + SPLIT_PIECE)) >= 0:
        lines += data[start:end].split(b"\n")
        start = end + 1
    lines += data[start:].split(b"\n")
    return lines


def read_changeset(data: bytes, name: str) -> Changeset:
    """The changeset in ``data`` (the bytes of file ``name``), every line checked: a record of its
    kind's schema, an id given once. SnapshotError naming the line of the first problem."""
    lines = split_lines(data)
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise invalid(name, None, "empty: a changeset begins with its header line")
    try:
        header = _header.decode(lines[0])
    except DECODE_ERRORS as error:
        raise invalid(name, 1, f"not a changeset header: {describe(error)}") from None
    if header.format != FORMAT or header.format_version != FORMAT_VERSION:
        raise invalid(name, 1, f"format {header.format!r} version {header.format_version}: this docsrv reads {FORMAT!r} "
                               f"version {FORMAT_VERSION}")
    if len(lines) - 1 != header.changes:
        raise invalid(name, None, f"holds {len(lines) - 1} change lines but its header says {header.changes} (cut short?)")
    upserts: dict[str, dict[int, bytes]] = {kind: {} for kind in KINDS}
    deletes: dict[str, set[int]] = {kind: set() for kind in KINDS}
    deleted_commands: dict[int, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        try:
            change = _change.decode(line)
            if isinstance(change, Upsert):
                record = _DECODERS[change.kind].decode(change.record)
                identity = record.id
            else:
                identity = change.id
        except DECODE_ERRORS as error:
            raise invalid(name, number, describe(error)) from None
        if identity in upserts[change.kind] or identity in deletes[change.kind]:
            raise invalid(name, number, f"{change.kind} {identity} is changed twice")
        if isinstance(change, Upsert):
            upserts[change.kind][identity] = bytes(change.record)
        else:
            deletes[change.kind].add(identity)
            if change.build:
                deleted_commands[identity] = change.build
    return Changeset(header, upserts, deletes, deleted_commands)


def read_listed(data: bytes, entry: PublishedChangeset, name: str) -> Changeset:
    """The changeset in ``data`` (file ``name``), which a ``head.json`` lists as ``entry``: its size
    and SHA-256 those ``entry`` records, every line checked (``read_changeset``), and its header
    the sequence, the snapshot followed and the product ``entry`` names. SnapshotError otherwise."""
    if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
        raise invalid(name, None, f"its size or SHA-256 differs from the one {HEAD} records")
    changeset = read_changeset(data, name)
    header = changeset.header
    if (header.sequence, header.follows, header.product.name) != (entry.sequence, entry.follows, entry.product):
        raise invalid(name, 1, f"changeset {header.sequence} from {header.follows} to {header.product.name}, where {HEAD} "
                               f"lists {entry.sequence} from {entry.follows} to {entry.product}")
    return changeset


# Making one.

def _lines(directory: Path, kind: str) -> Iterator[tuple[int, int, bytes]]:
    """(id, build or 0, line without its newline) of every record of ``kind`` in ``directory``."""
    paths = record_file(directory, kind)
    if not paths:
        return
    problems = ProblemList(str(directory))
    with open_records(paths[0], False) as stream:
        for block, _count in line_blocks(stream, paths[0].name, problems):
            for line in block.split(b"\n"):
                if line:
                    found = _identified.decode(line)
                    yield found.id, found.build, line
    problems.raise_if_any()


def compute(old: Path, old_manifest: Manifest, new: Path, new_manifest: Manifest, sequence: int) -> bytes:
    """The changeset ``sequence`` that turns snapshot ``old`` into ``new`` (both checked whole
    before), as the bytes of its file. A record that changed is sent whole, as ``new``'s file
    holds it. A kind whose file both manifests seal with the same digest is not read: it did
    not change."""
    sealed = [old_manifest.files, new_manifest.files]
    body: list[bytes] = []
    #: Whether no project or version that was there moves to another address or is made public.
    unmoved = True
    #: The projects and versions that were there and are made private, or go.
    hidden: dict[str, set[int]] = {kind: set() for kind in PLACED_KINDS}
    for kind in KINDS:
        names = [[path.name for path in record_file(directory, kind)] for directory in (old, new)]
        if names[0] == names[1] and all(name in sealed[0] and sealed[0][name] == sealed[1].get(name) for name in names[0]):
            continue
        before = {identity: (build, hashlib.blake2b(line, digest_size=16).digest()) for identity, build, line in _lines(old, kind)}
        places = {identity: _placed.decode(line) for identity, _build, line in _lines(old, kind)} if kind in PLACED_KINDS else {}
        for identity, _build, line in _lines(new, kind):
            if before.pop(identity, (0, None))[1] != hashlib.blake2b(line, digest_size=16).digest():
                body.append(b'{"op":"upsert","kind":"%s","record":%s}' % (kind.encode(), line))
                if kind in PLACED_KINDS and identity in places and places[identity] != (placed := _placed.decode(line)):
                    if places[identity].address != placed.address or placed.privacy_level == "public":
                        unmoved = False
                    hidden[kind].add(identity)
        if kind in PLACED_KINDS:
            hidden[kind].update(before)
        for identity in sorted(before):
            build = before[identity][0]
            named = b',"build":%d' % build if kind == "build_commands" else b""
            body.append(b'{"op":"delete","kind":"%s","id":%d%s}' % (kind.encode(), identity, named))
    product = Product(name=new_manifest.name, created_at=new_manifest.created_at, public_url=new_manifest.public_url,
                      counts=new_manifest.counts, description=new_manifest.description)
    header = Header(format=FORMAT, format_version=FORMAT_VERSION, sequence=sequence, follows=old_manifest.name, product=product,
                    changes=len(body), in_place=unmoved and (not any(hidden.values()) or hold_no_pages(old, hidden)), unmoved=unmoved)
    return changeset_bytes(header, body)


def hold_no_pages(snapshot: Path, placed: dict[str, set[int]]) -> bool:
    """Whether no page of ``snapshot`` belongs to the projects or versions ``placed`` (by kind):
    those a replica may take out of what it serves without its search index."""
    owners = page_owners(snapshot)
    return not (owners["projects"] & placed["projects"] or owners["versions"] & placed["versions"])


def page_owners(snapshot: Path) -> dict[str, set[int]]:
    """The projects and versions that hold a page of ``snapshot`` (whether public or not)."""
    owners: dict[str, set[int]] = {"projects": set(), "versions": set()}
    problems = ProblemList(str(snapshot))
    for path in record_file(snapshot, "pages"):
        for _block, _line, pages in decoded_blocks(path, PageOwner, problems):
            owners["projects"].update(page.project for page in pages)
            owners["versions"].update(page.version for page in pages)
    problems.raise_if_any()
    return owners


def places(snapshot: Path, kind: str, wanted: set[int]) -> dict[int, Placed]:
    """Where the projects or versions (``kind``) of ``snapshot`` with the ids ``wanted`` are."""
    return {identity: _placed.decode(line) for identity, _build, line in _lines(snapshot, kind) if identity in wanted}


def composed(changesets: list[Changeset]) -> Changeset:
    """The one changeset that does what ``changesets`` (each following the one before) do in turn:
    a record takes its last change; the header is the last one's, from what the first follows.
    Applying it writes each record file once, however many changesets there were."""
    upserts: dict[str, dict[int, bytes]] = {kind: {} for kind in KINDS}
    deletes: dict[str, set[int]] = {kind: set() for kind in KINDS}
    deleted_commands: dict[int, int] = {}
    for changeset in changesets:
        for kind in KINDS:
            for identity in changeset.deletes[kind]:
                upserts[kind].pop(identity, None)
                deletes[kind].add(identity)
            for identity, line in changeset.upserts[kind].items():
                deletes[kind].discard(identity)
                upserts[kind][identity] = line
        deleted_commands.update(changeset.deleted_commands)
    last = changesets[-1].header
    placing = [c.header for c in changesets if c.kinds & set(PLACED_KINDS)]
    header = msgspec.structs.replace(last, follows=changesets[0].header.follows,
                                     changes=sum(map(len, upserts.values())) + sum(map(len, deletes.values())),
                                     in_place=all(h.in_place for h in placing), unmoved=all(h.in_place or h.unmoved for h in placing))
    return Changeset(header, upserts, deletes, deleted_commands)


def with_purge_keys(data: bytes, keys: list[str]) -> bytes:
    """The changeset in ``data`` (``compute``'s) with ``keys`` in its header."""
    first, rest = data.split(b"\n", 1)
    header = msgspec.structs.replace(_header.decode(first), purge_keys=keys)
    return msgspec.json.encode(header) + b"\n" + rest


def read_header(data: bytes) -> Header:
    """The header of the changeset in ``data``, which docsrv made (not checked again)."""
    return _header.decode(data[:data.index(b"\n")])


def changeset_bytes(header: Header, body: list[bytes]) -> bytes:
    """A changeset's file: its header, then its change lines."""
    return b"\n".join([msgspec.json.encode(header), *body]) + b"\n"


# Applying one.

def apply(changeset: Changeset, follows: Path, product: Path) -> None:
    """Write into the empty directory ``product`` the snapshot ``changeset`` makes of the one in
    ``follows`` (whose name it must follow). Checks nothing of the records' relations: the
    product is loaded and checked whole as any snapshot before it serves."""
    manifest = manifest_of(follows)
    if manifest.name != changeset.header.follows:
        raise invalid(f"changeset {changeset.header.sequence}", None,
                      f"follows snapshot {changeset.header.follows}, and {follows.name} is {manifest.name}")
    changed = changeset.kinds
    for kind in KINDS:
        paths = record_file(follows, kind)
        if kind not in changed:
            if paths:
                clone_or_copy(paths[0], product / paths[0].name)
            continue
        if not paths and kind not in OPTIONAL_KINDS:
            raise invalid(str(follows), None, f"{kind}: no record file to change")
        with open(product / f"{kind}.jsonl", "wb") as out:
            out.writelines(line + b"\n" for line in changed_lines(follows, kind, changeset))
    write_manifest(product, product_manifest(changeset))


def changed_lines(follows: Path, kind: str, changeset: Changeset) -> Iterator[bytes]:
    """The lines of ``kind``'s file in the product: each record of ``follows`` as it was, changed,
    or left out; then the new records. A build's new commands come right after its others (a
    build's commands are next to each other in their file)."""
    upserts, deletes = changeset.upserts[kind], changeset.deletes[kind]
    written: set[int] = set()
    if kind != "build_commands":
        for identity, _build, line in _lines(follows, kind):
            if identity not in deletes:
                written.add(identity)
                yield upserts.get(identity, line)
        yield from (line for identity, line in upserts.items() if identity not in written)
        return
    pending: dict[int, list[tuple[int, bytes]]] = {}  # by build: its commands the changeset holds
    for identity, line in upserts.items():
        pending.setdefault(_identified.decode(line).build, []).append((identity, line))
    current = 0
    for identity, build, line in _lines(follows, kind):
        if build != current:
            yield from _unwritten(pending.pop(current, []), written)
            current = build
        if identity in deletes or identity in written:
            continue
        written.add(identity)
        yield upserts.get(identity, line)
    yield from _unwritten(pending.pop(current, []), written)
    for commands in pending.values():
        yield from _unwritten(commands, written)


def _unwritten(commands: list[tuple[int, bytes]], written: set[int]) -> Iterator[bytes]:
    for identity, line in commands:
        if identity not in written:
            written.add(identity)
            yield line
