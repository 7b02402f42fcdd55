"""Read a snapshot directory: the manifest and one JSON Lines file per kind of record.

Each file is decoded in blocks of whole lines, a block at a time as one JSON array, which
keeps msgspec in C for nearly all the work. A block that does not decode is decoded again
line by line, so that every problem is reported with its file and line.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..utils.progress import wanted
from .binary import BINARY_KINDS, Derived, read_binary
from .commands import CommandFile, CommandRanges, index_commands
from .errors import DECODE_ERRORS, ProblemList, SnapshotError
from .lines import decoded_blocks, describe
from .published import published_ranges
from .records import FORMAT, FORMAT_VERSION, KINDS, OPTIONAL_KINDS, BuildCommand, Manifest, Page, PageHead, Record
from .verified import BINARY_NAMES, Identity, Verified, identities, trusted

#: Endings a record file may have, by how it is compressed.
SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")

_BYTE_POSITION = re.compile(r"\(byte (\d+)\)")


@dataclass(frozen=True, slots=True)
class RawSnapshot:
    """Everything a snapshot directory holds, decoded and type-checked but not yet cross-checked."""

    path: Path
    manifest: Manifest
    records: dict[str, Sequence[Any]]
    commands: CommandFile
    files: dict[str, str]
    seconds: float
    #: The manifest as read, and whether an earlier check of exactly these files was trusted
    #: (``verified.py``): its digests and cross-checks are then not done again.
    manifest_bytes: bytes = b""
    trusted: bool = False
    #: When the records were decoded from their MessagePack form (``binary.py``): what the store
    #: derived from them. The records are then the served ones (public, in served order).
    derived: dict[str, Derived] | None = None
    #: When those files were of an earlier docsrv's layout (``binary.ONE_ARRAY_LAYOUT``, ``binary.UNGROUPED_PAGES_LAYOUT``).
    earlier_layout: bool = False
    #: The identity of each record file, taken before any was read (``verified.record_check``).
    identities: dict[str, Identity] = field(default_factory=dict)

    @property
    def binary(self) -> bool:
        return self.derived is not None


def record_file(directory: Path, kind: str) -> list[Path]:
    """The files in ``directory`` that hold records of ``kind``, in any compression."""
    return [directory / f"{kind}{suffix}" for suffix in SUFFIXES if (directory / f"{kind}{suffix}").is_file()]


def record_files(directory: Path) -> list[Path]:
    """Every record file of a snapshot directory."""
    return [path for kind in KINDS for path in record_file(directory, kind)]


def check_files(directory: Path, manifest: Manifest, problems: ProblemList) -> None:
    """Every file the manifest lists has the size and digest it records: the snapshot is whole
    (not half copied, not changed since it was made). Sizes first: a short file is named at once."""
    for name, expected in manifest.files.items():
        path = directory / name
        if "/" in name or not path.is_file():
            problems.add(name, None, "listed in manifest.json but missing")
            continue
        size = path.stat().st_size
        if size != expected.size:
            problems.add(name, None, f"holds {size} bytes but manifest.json records {expected.size} (incomplete or changed)")
    if problems:
        return
    for name, expected in manifest.files.items():
        with open(directory / name, "rb") as data:
            if hashlib.file_digest(data, "sha256").hexdigest() != expected.sha256:
                problems.add(name, None, "its SHA-256 differs from the one manifest.json records (changed or corrupt)")


def read_snapshot(
    path: str | Path, *, progress: bool | None = None, page_text: bool = True, trust: bool = True, digests_checked: bool = False
) -> RawSnapshot:
    """Decode a snapshot directory; raise SnapshotError naming every file and line that is bad.

    Without ``page_text``, pages are decoded as PageHead: for a server whose index holds the text.
    With ``trust``, a record of an earlier check of the same files spares the digests and the
    scan of the build commands (``verified.py``), and ranges the publisher sealed spare that scan
    (``published.py``). ``digests_checked``: the caller has just checked every file against the
    manifest (a pull, as the bytes arrived).
    """
    started = time.perf_counter()
    directory = Path(path)
    problems = ProblemList(str(directory))
    if not directory.is_dir():
        problems.add(str(directory), None, "not a snapshot directory")
        problems.raise_if_any()
    checked = identities(record_files(directory))
    sealed = read_sealed(directory, problems, trust=trust, digests_checked=digests_checked)
    if progress is None:
        progress = wanted()
    # A trusted record that lists the records in MessagePack: decoded from there when the page
    # text is not wanted (the MessagePack pages have none).
    binary = read_served(directory, sealed.verified) if not page_text else None
    records: dict[str, Sequence[Any]]
    records, derived, earlier_layout = binary if binary is not None else ({}, None, False)
    counts: dict[str, int] = {}
    files: dict[str, str] = {}
    commands: CommandFile | None = None
    for kind, cls in KINDS.items():
        candidates = record_file(directory, kind)
        if not candidates and kind in OPTIONAL_KINDS:
            records[kind] = []
            continue
        found = only_file(candidates, kind, problems)
        if found is None:
            continue
        files[kind] = found.name
        before = len(problems)
        if cls is BuildCommand:
            commands = read_commands(directory, found, sealed, records, problems, trust=trust, digests_checked=digests_checked,
                                     progress=progress)
            counts[kind] = commands.total if commands is not None else 0
        elif derived is not None and kind in BINARY_KINDS:
            continue  # the public records only: the manifest's counts are of all
        else:
            records[kind] = read_records(found, PageHead if cls is Page and not page_text else cls, problems, progress=progress)
            counts[kind] = len(records[kind])
        if len(problems) > before:
            del counts[kind]  # a file with bad lines has no count worth comparing
    if sealed.manifest is not None:
        check_counts(sealed.manifest, counts, files, problems)
    problems.raise_if_any()
    assert sealed.manifest is not None and commands is not None
    seconds = time.perf_counter() - started
    return RawSnapshot(directory, sealed.manifest, records, commands, files, seconds, sealed.manifest_bytes, sealed.verified is not None,
                       derived=derived, earlier_layout=earlier_layout, identities=checked)


@dataclass(frozen=True, slots=True)
class Sealed:
    """A snapshot's manifest (None when it does not read: the problem is listed), its bytes, and
    the record of an earlier check of exactly these files when one is trusted (``verified.py``)."""

    manifest: Manifest | None
    manifest_bytes: bytes = b""
    verified: tuple[Verified, CommandRanges] | None = None


def read_sealed(directory: Path, problems: ProblemList, *, trust: bool, digests_checked: bool) -> Sealed:
    """The manifest, and what of the files it seals is trusted: a record of an earlier check of
    the same files (with ``trust``), or the digests checked now unless the caller just did."""
    manifest = read_manifest(directory, problems)
    if manifest is None:
        return Sealed(None)
    manifest_bytes = (directory / "manifest.json").read_bytes()
    verified = trusted(directory, manifest_bytes, record_files(directory)) if trust else None
    if verified is None and not digests_checked:
        check_files(directory, manifest, problems)
    return Sealed(manifest, manifest_bytes, verified)


def read_served(
    directory: Path, verified: tuple[Verified, CommandRanges] | None
) -> tuple[dict[str, Sequence[Any]], dict[str, Derived], bool] | None:
    """The served records and what was derived from them, from their MessagePack form
    (``binary.py``), when a trusted check lists those files; None otherwise."""
    if verified is None or not verified[0].files.keys() >= BINARY_NAMES:
        return None
    return read_binary(directory)


def only_file(found: list[Path], kind: str, problems: ProblemList) -> Path | None:
    """The one file of ``kind``'s records among those ``found``; None, with the problem listed,
    when there is none or more than one."""
    if not found:
        problems.add(f"{kind}.jsonl", None, "missing: every snapshot has this file (it may be empty)")
    elif len(found) > 1:
        problems.add(found[0].name, None, f"ambiguous: also {', '.join(p.name for p in found[1:])}")
    return found[0] if len(found) == 1 else None


def read_commands(
    directory: Path, path: Path, sealed: Sealed, records: dict[str, Sequence[Any]], problems: ProblemList, *, trust: bool,
    digests_checked: bool, progress: bool,
) -> CommandFile | None:
    """The build commands in ``path``, by the cheapest way that holds: the byte ranges of a
    trusted earlier check, those the publisher sealed (``published.py``: every file's digest was
    checked just now, or as it arrived), or a scan of every line. Only an uncompressed file is
    read in place."""
    if path.name.endswith(".jsonl") and sealed.verified is not None:
        verified, ranges = sealed.verified
        return CommandFile(os.open(path, os.O_RDONLY), ranges, verified.commands_total)
    if (
        trust
        and sealed.manifest is not None
        and not problems
        and path.name.endswith(".jsonl")
        and (published := published_ranges(directory, sealed.manifest, digest_checked=digests_checked)) is not None
    ):
        return CommandFile(os.open(path, os.O_RDONLY), *published)
    # With bad builds, every command would name a missing one: leave references unchecked.
    builds = {b.id: i for i, b in enumerate(records.get("builds", ()))} if not problems else None
    return index_commands(path, builds, problems, progress=progress)


def manifest_of(directory: Path) -> Manifest:
    """The manifest of the snapshot in ``directory``, decoded (OSError, msgspec.DecodeError);
    a load reads it with ``read_manifest``, which names every problem."""
    return msgspec.json.decode((directory / "manifest.json").read_bytes(), type=Manifest)


def read_manifest(directory: Path, problems: ProblemList) -> Manifest | None:
    path = directory / "manifest.json"
    try:
        data = path.read_bytes()
    except OSError as exc:
        problems.add("manifest.json", None, f"cannot be read: {exc.strerror or exc}")
        return None
    try:
        manifest = msgspec.json.decode(data, type=Manifest)
    except DECODE_ERRORS as exc:
        problems.add("manifest.json", line_of_error(data, exc), describe(exc))
        return None
    if manifest.format != FORMAT:
        problems.add("manifest.json", None, f"format is {manifest.format!r}, not {FORMAT!r}")
    elif manifest.format_version > FORMAT_VERSION:
        problems.add("manifest.json", None, f"format_version {manifest.format_version} is newer than this docsrv reads "
                     f"({FORMAT_VERSION}): upgrade docsrv to read it")
    elif manifest.format_version != FORMAT_VERSION:
        problems.add(
            "manifest.json",
            None,
            f"format_version {manifest.format_version} is not supported (this docsrv reads {FORMAT_VERSION})",
        )
    return manifest


def check_counts(manifest: Manifest, counts: dict[str, int], files: dict[str, str], problems: ProblemList) -> None:
    for kind in manifest.counts.keys() - KINDS.keys():
        problems.add("manifest.json", None, f"counts names an unknown kind of record {kind!r}")
    for kind, found in counts.items():
        expected = manifest.counts.get(kind)
        if expected is None:
            problems.add("manifest.json", None, f"counts has no entry for {kind!r}")
        elif expected != found:
            problems.add(files[kind], None, f"holds {found} records but manifest.json counts {expected} (truncated or edited?)")


def read_records(path: Path, cls: type[Record], problems: ProblemList, *, progress: bool = False) -> list:
    """Decode one JSON Lines file of ``cls`` records; record ``i`` stands on line ``i + 1``."""
    records: list = []
    before = len(problems)
    for _block, _line, decoded in decoded_blocks(path, cls, problems, progress=progress):
        records.extend(decoded)
    return [] if len(problems) > before else records


def line_of_error(data: bytes, exc: msgspec.DecodeError | UnicodeDecodeError) -> int | None:
    match = _BYTE_POSITION.search(str(exc))
    if match is None:
        return None
    return data.count(b"\n", 0, int(match.group(1))) + 1


__all__ = ["RawSnapshot", "SnapshotError", "read_snapshot", "record_file"]
