"""``docsrv snapshot publish``: lay a snapshot out on an origin (``snapshot/origin.py``), whole or
as the changeset from the one the origin publishes now, so that ``docsrv snapshot pull`` follows.

Whole, the snapshot's files (records, and its search index when ``docsrv index`` sealed one)
are copied to ``snapshots/<name>/`` beside the others, its manifest naming its sequence. With
``--since OLD``, when the origin publishes OLD, only the changeset from OLD is written. Either
way ``head.json`` is written last, in one rename: a replica never sees a partial state.

Compaction: when the changesets since the base would hold more than COMPACT_SHARE of the base's
bytes, or there would be more than ``origin.MAX_CHANGESETS``, the snapshot is published whole as
well, and becomes the new base. Its changeset is published too, and ``head.json`` lists the
changesets from the base before up to the new one (``leading``): a replica that follows the old
base reaches the new one by changesets, and only a replica further behind fetches the base
whole. A changeset larger than ``origin.MAX_CHANGESET_BYTES`` is not published at all: the
snapshot is published whole, with nothing leading to it.
The origin keeps the base before it and its changesets, and removes what is older: its history
is bounded by about two bases.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from ..edge.diff import compare
from ..edge.keys import applied_keys, change_keys
from ..errors import CommandError
from ..snapshot.changeset import Changeset, compute, read_changeset, read_header, read_listed, with_purge_keys
from ..snapshot.load import manifest_of
from ..snapshot.origin import (
    CHANGESETS,
    FORMAT,
    FORMAT_VERSION,
    HEAD,
    MAX_CHANGESET_BYTES,
    MAX_CHANGESETS,
    SNAPSHOTS,
    Head,
    PublishedChangeset,
    changeset_path,
    decode_head,
    new_history,
)
from ..snapshot.records import INDEX, Manifest
from ..snapshot.write import built_aside
from ..store.changes import applied, in_memory
from ..store.loaded import Store, prepare
from ..utils.files import replace_file
from .kept import reserved

#: The changesets since a base may hold this share of its bytes; past it, a snapshot is
#: published whole (a replica that follows from the base fetches at most that much more).
COMPACT_SHARE = 0.25


@dataclass(frozen=True)
class Published:
    name: str
    sequence: int
    #: "snapshot" (published whole) or "changeset".
    kind: str
    bytes: int
    seconds: float
    #: Why a snapshot was published whole though --since was given, if it was.
    compacted: str = ""


def publish(snapshot: Path, origin: Path, since: Path | None = None, *, compact_share: float = COMPACT_SHARE) -> Published:
    """Publish ``snapshot`` on ``origin`` (a directory, made if need be): whole, or with ``since``
    as the changeset from that snapshot, which the origin must publish now."""
    started = time.perf_counter()
    manifest = prepare(snapshot, progress=False).manifest  # checked whole (or a record of its check stands)
    if (problem := reserved(manifest.name)) is not None:
        raise CommandError(f"{snapshot}: {problem}")
    head = read_head(origin)
    sequence = head.sequence + 1 if head is not None else 1
    if head is not None and manifest.name == head.name:
        raise CommandError(f"{origin} already publishes snapshot {manifest.name} (sequence {head.sequence})")
    if since is None or head is None:
        if since is not None:
            raise CommandError(f"{origin} publishes nothing yet: publish {snapshot} whole first (without --since)")
        return publish_whole(snapshot, manifest, origin, head, sequence, started)
    old = manifest_of(since)
    if old.name != head.name:
        raise CommandError(f"{origin} publishes snapshot {head.name}, not {old.name} ({since}): publish {snapshot} whole "
                           "(without --since), or --since the snapshot it publishes")
    served = prepare(since, progress=False)
    data = compute(since, old, snapshot, manifest, sequence)
    data = with_purge_keys(data, changed_keys(served, since, snapshot, read_changeset(data, changeset_path(sequence))))
    return publish_changeset(origin, head, data, started, compact_share=compact_share,
                             whole=lambda why, leading: publish_whole(snapshot, manifest, origin, head, sequence, started,
                                                                      compacted=why, leading=leading))


#: Publishes the snapshot a changeset makes whole, instead of it or after it: (why, the
#: changesets that lead to it) -> what was published.
Whole = Callable[[str, list[PublishedChangeset]], "Published"]


def publish_changeset(origin: Path, head: Head, data: bytes, started: float, whole: Whole, *, compact_share: float = COMPACT_SHARE,
                      durable: bool = False, source_lsn: str = "") -> Published:
    """Lay the changeset ``data`` (the bytes of its file, which follows what ``head`` publishes)
    on ``origin``, then list it in ``head.json``; or, past the bounds of a changeset or of those
    since the base, publish the snapshot it makes whole (``whole``). ``durable``: each file is on
    disk before the next is written, ``head.json`` last. ``source_lsn``: the head's."""
    header = read_header(data)
    if len(data) > MAX_CHANGESET_BYTES:
        return whole(f"the changeset would hold {len(data)} bytes, more than the {MAX_CHANGESET_BYTES} a changeset may hold", [])
    (origin / CHANGESETS).mkdir(parents=True, exist_ok=True)
    replace_file(origin / changeset_path(header.sequence), data, durable=durable)
    now = datetime.now(UTC)
    entry = PublishedChangeset(sequence=header.sequence, follows=header.follows, product=header.product.name, size=len(data),
                               sha256=hashlib.sha256(data).hexdigest(), published_at=now)
    base_bytes = snapshot_bytes(origin / SNAPSHOTS / head.base)
    since_base = sum(changeset.size for changeset in head.changesets) + len(data)
    if since_base > compact_share * base_bytes:
        # The changeset is published too, as the last of those leading to the new base.
        return whole(f"the changesets since base {head.base} would hold {since_base} bytes, more than {compact_share:.0%} "
                     f"of its {base_bytes}", [*head.changesets, entry])
    if len(head.changesets) + 1 > MAX_CHANGESETS:
        return whole(f"more than {MAX_CHANGESETS} changesets would follow base {head.base}", [*head.changesets, entry])
    write_head(origin, msgspec.structs.replace(head, changesets=[*head.changesets, entry], published_at=now,
                                               history=head.history or new_history(), source_lsn=source_lsn), durable=durable)
    return Published(header.product.name, header.sequence, "changeset", len(data), time.perf_counter() - started)


def changed_keys(served: Store, old: Path, new: Path, changeset: Changeset) -> list[str]:
    """The purge keys of the replies ``changeset`` (from ``old``, loaded as ``served``, to ``new``)
    changes: for one a server applies in memory, the keys it drops from its own cache
    (``store/changes.py``); for any other, those ``docsrv snapshot diff`` names (``change_keys``:
    those of every reply past a bound)."""
    done = applied(served, changeset) if in_memory(changeset, served.public_url) else None
    return change_keys(compare(old, new).all() if done is None else applied_keys(done))


def published_keys(origin: Path, since: int | None = None) -> list[str]:
    """The purge keys of the changesets ``origin`` lists after sequence ``since`` (None: the last
    one alone), read from their headers."""
    head = read_head(origin)
    if head is None:
        raise CommandError(f"{origin} publishes nothing")
    chain = head.chain
    wanted = chain[-1:] if since is None else [entry for entry in chain if entry.sequence > since]
    if since is not None and (not chain or chain[0].sequence > since + 1):
        raise CommandError(f"{origin} no longer lists the changesets after sequence {since}: purge every key of the API instead")
    keys: set[str] = set()
    for entry in wanted:
        where = origin / changeset_path(entry.sequence)
        try:
            keys.update(read_listed(where.read_bytes(), entry, str(where)).header.purge_keys)
        except OSError as error:
            raise CommandError(f"{where}: {error.strerror}") from None
    return sorted(keys)


def publish_whole(snapshot: Path, manifest: Manifest, origin: Path, head: Head | None, sequence: int, started: float,
                  compacted: str = "", leading: list[PublishedChangeset] | None = None, *, durable: bool = False,
                  source_lsn: str = "") -> Published:
    """Publish ``snapshot`` whole on ``origin`` as the base of sequence ``sequence``, after ``head``
    (None: the origin publishes nothing yet); ``leading``: the changesets that lead to it.
    ``durable``: its files on disk before ``head.json`` is written, and that too."""
    target = lay_snapshot(snapshot, manifest, origin, sequence, durable=durable)
    history = head.history if head is not None and head.history else new_history()
    write_head(origin, Head(format=FORMAT, format_version=FORMAT_VERSION, base=manifest.name, base_sequence=sequence,
                            changesets=[], published_at=datetime.now(UTC), leading=leading or [], history=history,
                            source_lsn=source_lsn), durable=durable)
    if head is not None:
        prune(origin, keep_base=head)
    return Published(manifest.name, sequence, "snapshot", snapshot_bytes(target), time.perf_counter() - started, compacted)


def lay_snapshot(snapshot: Path, manifest: Manifest, origin: Path, sequence: int, *, durable: bool = False) -> Path:
    """Copy ``snapshot`` onto ``origin`` (``snapshots/<name>``, built aside), its manifest stamped
    with ``sequence``; where it is. No head names it yet. ``durable``: on disk when it returns."""
    target = origin / SNAPSHOTS / manifest.name
    if target.exists():
        raise CommandError(f"{target} exists: a snapshot is published whole once, under a name of its own")
    names = [*manifest.files, *(f"{INDEX}/{name}" for name in manifest.index)]
    with built_aside(target) as partial:
        for name in names:
            (partial / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(snapshot / name, partial / name)
        stamped = msgspec.structs.replace(manifest, sequence=sequence)
        replace_file(partial / "manifest.json", msgspec.json.format(msgspec.json.encode(stamped), indent=2) + b"\n")
    if durable:
        os.sync()
    return target


def rebase(origin: Path, head: Head, base: str, sequence: int, *, durable: bool = False) -> Head:
    """Make ``base``, laid on ``origin`` (``lay_snapshot``) as the state of ``sequence`` (one
    ``head`` lists, named as that changeset's product), the origin's base: the changesets ``head``
    lists up to it lead to it, those after it follow it, and what is older is pruned. A base
    built in the background while changesets were published after its state
    (``snapshot follow``). The new head."""
    now = datetime.now(UTC)
    rebased = msgspec.structs.replace(head, base=base, base_sequence=sequence, published_at=now,
                                      leading=[entry for entry in head.changesets if entry.sequence <= sequence],
                                      changesets=[entry for entry in head.changesets if entry.sequence > sequence])
    write_head(origin, rebased, durable=durable)
    prune(origin, keep_base=head)
    return rebased


def prune(origin: Path, keep_base: Head) -> None:
    """Remove what is older than the base ``keep_base`` names (the one before the new base) and its
    changesets: snapshots published whole before it, and changesets that follow those."""
    head = read_head(origin)
    assert head is not None
    keep = {head.base, keep_base.base}
    for published in (origin / SNAPSHOTS).iterdir():
        if published.name not in keep and not published.name.startswith("."):
            shutil.rmtree(published, ignore_errors=True)
    for changeset in (origin / CHANGESETS).glob("*.jsonl") if (origin / CHANGESETS).is_dir() else ():
        if changeset.stem.isdigit() and int(changeset.stem) <= keep_base.base_sequence:
            changeset.unlink(missing_ok=True)


def read_head(origin: Path) -> Head | None:
    try:
        data = (origin / HEAD).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return decode_head(data)
    except ValueError as error:
        raise CommandError(f"{origin / HEAD}: {error}") from None


def write_head(origin: Path, head: Head, *, durable: bool = False) -> None:
    origin.mkdir(parents=True, exist_ok=True)
    replace_file(origin / HEAD, msgspec.json.format(msgspec.json.encode(head), indent=2) + b"\n", durable=durable)


def snapshot_bytes(directory: Path) -> int:
    manifest = manifest_of(directory)
    return sum(entry.size for entry in (*manifest.files.values(), *manifest.index.values()))
