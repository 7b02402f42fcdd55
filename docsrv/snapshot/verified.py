"""A record that a snapshot's files were checked whole, so that a later load of the same files
need not check them again.

The first load of a snapshot hashes every file against its manifest, decodes every build
command to check it and note where each build's lines are, and checks the records against each
other: at the large scale, most of a load. When all of it passes, the load writes
``.docsrv-verified`` beside the files: the identity of each file (device, inode, size,
modification and change times), the manifest's digest, docsrv's version, and, in
``.docsrv-command-ranges``, the byte range of each build's commands. A later load whose files
all have those identities trusts the record and skips that work. A file written to since, even
one given back its old modification time, has another change time: the record does not match,
and the snapshot is checked whole again (and the record written anew). The same goes for a
record or a ranges file that does not match: it is named in the log and not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from pathlib import Path

import msgspec

from .. import __version__
from ..utils.files import replace_file
from .binary import BINARY_KINDS, binary_path
from .commands import CommandRanges
from .errors import DECODE_ERRORS, Problem, SnapshotError
from .records import FORMAT_VERSION

log = logging.getLogger("docsrv")

RECORD = ".docsrv-verified"
RANGES = ".docsrv-command-ranges"
BINARY_NAMES = frozenset(binary_path(Path(), kind).name for kind in BINARY_KINDS)
#: (device, inode, size, modification time, change time), in nanoseconds.
Identity = tuple[int, int, int, int, int]


class Verified(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    docsrv: str
    format_version: int
    manifest_sha256: str
    #: Every record file and the ranges file, by name.
    files: dict[str, Identity]
    commands_total: int


def identity(path: Path) -> Identity:
    stat = path.stat()
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


def manifest_digest(manifest: bytes) -> str:
    return hashlib.sha256(manifest).hexdigest()


def trusted(directory: Path, manifest: bytes, files: list[Path]) -> tuple[Verified, CommandRanges] | None:
    """The record of an earlier check of exactly these files, and the commands' byte ranges it
    kept; None when there is none, or it does not match (then it is named in the log)."""
    try:
        data = (directory / RECORD).read_bytes()
    except OSError:
        return None
    try:
        record = msgspec.json.decode(data, type=Verified)
    except DECODE_ERRORS as error:
        log.warning("%s: not a record docsrv reads (%s); checking the snapshot whole", RECORD, error)
        return None
    if (record.docsrv, record.format_version) != (__version__, FORMAT_VERSION):
        return None  # checked by another docsrv: its checks may not be this one's
    if record.manifest_sha256 != manifest_digest(manifest):
        log.info("%s is of another manifest.json; checking the snapshot whole", RECORD)
        return None
    # The records in MessagePack (``binary.py``), when the record lists them, are held to it too.
    names = {path.name for path in files} | {RANGES} | (record.files.keys() & BINARY_NAMES)
    try:
        now = {name: identity(directory / name) for name in names}
    except OSError:
        now = {}
    changed = sorted(name for name in names if now.get(name) != tuple(record.files.get(name, ())))
    if changed:
        log.info("%s does not match %s (changed since it was checked); checking the snapshot whole", RECORD, ", ".join(changed))
        return None
    try:
        ranges = CommandRanges.from_bytes((directory / RANGES).read_bytes())
    except OSError:
        ranges = None
    if ranges is None:
        log.warning("%s: not a ranges file docsrv reads; checking the snapshot whole", RANGES)
    return (record, ranges) if ranges is not None else None


def identities(files: list[Path]) -> dict[str, Identity]:
    """The identity of each file, by name, now."""
    return {path.name: identity(path) for path in files}


def record_check(
    directory: Path, manifest: bytes, checked: dict[str, Identity], written: list[Path], ranges: CommandRanges, total: int
) -> None:
    """Write the record of a check that passed.

    ``checked``: the identity of each record file taken *before* it was read. A file whose
    identity is another by now was written to while it was being checked: what was checked may
    not be what it holds, so no record is kept (git's "racy clean" rule) and SnapshotError names
    it; the next load checks it whole. ``written``: the files docsrv wrote from what it checked
    (MessagePack). An OSError (a full disk, a read-only directory) leaves no record, and is raised."""
    changed = sorted(name for name, found in checked.items() if _identity_now(directory / name) != found)
    if changed:
        with contextlib.suppress(OSError):
            os.unlink(directory / RECORD)
        problems = [Problem(name, None, "changed while it was being checked: no record of the check is kept") for name in changed]
        raise SnapshotError(str(directory), problems)
    try:
        replace_file(directory / RANGES, ranges.to_bytes())
        identities_now = {**checked, **identities([*written, directory / RANGES])}
        replace_file(directory / RECORD, msgspec.json.encode(Verified(__version__, FORMAT_VERSION, manifest_digest(manifest),
                                                                      identities_now, total)))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(directory / RECORD)
        raise


def _identity_now(path: Path) -> Identity | None:
    try:
        return identity(path)
    except OSError:
        return None


def carry_record(directory: Path, old_manifest: bytes, new_manifest: bytes) -> None:
    """Make the record of a check of the snapshot under ``old_manifest`` the record under
    ``new_manifest``: for a command that rewrote the manifest without changing what it says of
    the record files (``seal_index`` lists the index). A record of anything else is left alone."""
    try:
        record = msgspec.json.decode((directory / RECORD).read_bytes(), type=Verified)
    except (OSError, msgspec.DecodeError):
        return
    if record.manifest_sha256 == manifest_digest(old_manifest):
        carried = msgspec.structs.replace(record, manifest_sha256=manifest_digest(new_manifest))
        replace_file(directory / RECORD, msgspec.json.encode(carried))
