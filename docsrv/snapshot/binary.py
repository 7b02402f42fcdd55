"""The records in MessagePack: what a load that trusts an earlier check decodes instead of JSON Lines.

Decoding JSON Lines is the most of a trusted load (6.3 s of 17 at the large scale): text is
scanned, numbers and dates read from digits, and a page's text skipped character by
character when only its head is kept. The same records in msgspec's MessagePack decode
faster (the medium snapshot: builds 1.77 -> 1.28 s, pages without their text 0.88 -> 0.26 s).

After a load that knows its records are right (it checked them, or trusted a record of a check)
and kept pages without their text (a server whose search index holds it), the records are
written beside their files, one ``.docsrv-<kind>.msgpack`` a kind, and the record of the check
(``verified.py``) lists them with the record files: a later load of the same files decodes them.
They are a private cache of one directory, as the commands' ranges are: never published or
pulled (a snapshot's hidden files are not), never read unless the record of the check names
them as they are, and rewritten after any change. JSON Lines stays the snapshot's format.
"""

from __future__ import annotations

import logging
import mmap
from pathlib import Path

import msgspec

from ..utils.files import replace_file
from .records import Build, PageHead, Project, ProjectRelationship, User, Version

log = logging.getLogger("docsrv")

#: The kinds kept in MessagePack, as a load without page text holds them.
BINARY_KINDS: dict[str, type] = {
    "users": User,
    "projects": Project,
    "relationships": ProjectRelationship,
    "versions": Version,
    "builds": Build,
    "pages": PageHead,
}


def binary_path(directory: Path, kind: str) -> Path:
    return directory / f".docsrv-{kind}.msgpack"


def binary_paths(directory: Path) -> list[Path]:
    return [binary_path(directory, kind) for kind in BINARY_KINDS]


def write_binary(directory: Path, records: dict[str, list]) -> list[Path]:
    """Write the records of every kind in MessagePack; the files written (none when one cannot be)."""
    encoder = msgspec.msgpack.Encoder()
    paths = []
    try:
        for kind in BINARY_KINDS:
            path = binary_path(directory, kind)
            replace_file(path, encoder.encode(records[kind]))
            paths.append(path)
    except OSError as error:
        log.debug("no MessagePack records in %s: %s", directory, error)
        return []
    return paths


def read_binary(path: Path, kind: str) -> list | None:
    """The records of ``kind`` in ``path``, decoded from a map of the file (not copied into memory
    first); None, with the file named in the log, when it cannot be read or does not decode."""
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            records: list = msgspec.msgpack.decode(mapped, type=list[BINARY_KINDS[kind]])  # type: ignore[valid-type]
            return records
    except (OSError, ValueError, msgspec.DecodeError) as error:
        log.warning("%s: not the records docsrv wrote (%s); reading the JSON Lines", path.name, error)
        return None
