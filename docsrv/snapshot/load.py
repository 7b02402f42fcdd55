"""Read a snapshot directory: the manifest and one JSON Lines file per kind of record.

Each file is decoded in blocks of whole lines, a block at a time as one JSON array, which
keeps msgspec in C for nearly all the work. A block that does not decode is decoded again
line by line, so that every problem is reported with its file and line.
"""

from __future__ import annotations

import gzip
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from contextlib import contextmanager
from typing import BinaryIO

import msgspec
import zstandard

from ..utils.progress import ReadProgress, progress_bar, wanted
from .errors import ProblemList, SnapshotError
from .records import FORMAT, FORMAT_VERSION, KINDS, Manifest, Record

#: The longest line (one record) a snapshot file may hold, and the size of a decoded block.
MAX_LINE_BYTES = 4 << 20
#: Endings a record file may have, by how it is compressed.
SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")

_BYTE_POSITION = re.compile(r"\(byte (\d+)\)")


@dataclass(frozen=True, slots=True)
class RawSnapshot:
    """Everything a snapshot directory holds, decoded and type-checked but not yet cross-checked."""

    path: Path
    manifest: Manifest
    records: dict[str, list]
    files: dict[str, str]
    seconds: float


def record_file(directory: Path, kind: str) -> list[Path]:
    """The files in ``directory`` that hold records of ``kind``, in any compression."""
    return [directory / f"{kind}{suffix}" for suffix in SUFFIXES if (directory / f"{kind}{suffix}").is_file()]


def read_snapshot(path: str | Path, *, progress: bool | None = None) -> RawSnapshot:
    """Decode a snapshot directory; raise SnapshotError naming every file and line that is bad."""
    started = time.perf_counter()
    directory = Path(path)
    problems = ProblemList(str(directory))
    if not directory.is_dir():
        problems.add(str(directory), None, "not a snapshot directory")
        problems.raise_if_any()
    manifest = read_manifest(directory, problems)
    if progress is None:
        progress = wanted()
    records: dict[str, list] = {}
    files: dict[str, str] = {}
    for kind, cls in KINDS.items():
        found = record_file(directory, kind)
        if not found:
            problems.add(f"{kind}.jsonl", None, "missing: every snapshot has this file (it may be empty)")
            continue
        if len(found) > 1:
            problems.add(found[0].name, None, f"ambiguous: also {', '.join(p.name for p in found[1:])}")
            continue
        files[kind] = found[0].name
        records[kind] = read_records(found[0], cls, problems, progress=progress)
    if manifest is not None:
        check_counts(manifest, records, files, problems)
    problems.raise_if_any()
    assert manifest is not None
    return RawSnapshot(directory, manifest, records, files, time.perf_counter() - started)


def read_manifest(directory: Path, problems: ProblemList) -> Manifest | None:
    path = directory / "manifest.json"
    try:
        data = path.read_bytes()
    except OSError as exc:
        problems.add("manifest.json", None, f"cannot be read: {exc.strerror or exc}")
        return None
    try:
        manifest = msgspec.json.decode(data, type=Manifest)
    except msgspec.DecodeError as exc:
        problems.add("manifest.json", line_of_error(data, exc), describe(exc))
        return None
    if manifest.format != FORMAT:
        problems.add("manifest.json", None, f"format is {manifest.format!r}, not {FORMAT!r}")
    elif manifest.format_version != FORMAT_VERSION:
        problems.add(
            "manifest.json",
            None,
            f"format_version {manifest.format_version} is not supported (this docsrv reads {FORMAT_VERSION})",
        )
    return manifest


def check_counts(manifest: Manifest, records: dict[str, list], files: dict[str, str], problems: ProblemList) -> None:
    for kind in manifest.counts.keys() - KINDS.keys():
        problems.add("manifest.json", None, f"counts names an unknown kind of record {kind!r}")
    for kind, items in records.items():
        expected = manifest.counts.get(kind)
        if expected is None:
            problems.add("manifest.json", None, f"counts has no entry for {kind!r}")
        elif expected != len(items):
            problems.add(
                files[kind],
                None,
                f"holds {len(items)} records but manifest.json counts {expected} (truncated or edited?)",
            )


def read_records(path: Path, cls: type[Record], problems: ProblemList, *, progress: bool = False) -> list:
    """Decode one JSON Lines file of ``cls`` records; record ``i`` stands on line ``i + 1``."""
    many = msgspec.json.Decoder(list[cls])
    one = msgspec.json.Decoder(cls)
    records: list = []
    first_line = 1
    before = len(problems)
    try:
        with open_records(path, progress) as stream:
            for block in line_blocks(stream, path.name, problems):
                body = block[:-1] if block.endswith(b"\n") else block
                lines = body.count(b"\n") + 1
                try:
                    decoded = many.decode(b"[" + body.replace(b"\n", b",") + b"]")
                except msgspec.DecodeError:
                    decoded = None
                if decoded is not None and len(decoded) == lines:
                    records.extend(decoded)
                else:
                    decode_lines(body, first_line, one, path.name, problems, records)
                first_line += lines
    except (OSError, EOFError, zstandard.ZstdError) as exc:
        problems.add(path.name, None, f"cannot be read to the end: {exc}")
    if len(problems) > before:
        return []
    return records


def decode_lines(body: bytes, first_line: int, decoder, name: str, problems: ProblemList, into: list) -> None:
    for number, line in enumerate(body.split(b"\n"), start=first_line):
        if not line.strip():
            problems.add(name, number, "blank line: every line holds one record")
            continue
        try:
            into.append(decoder.decode(line))
        except msgspec.DecodeError as exc:
            problems.add(name, number, describe(exc))


def line_blocks(stream: BinaryIO, name: str, problems: ProblemList) -> Iterator[bytes]:
    """Blocks of whole lines, each at most MAX_LINE_BYTES long; a longer line is a problem."""
    carry = b""
    line = 1
    while True:
        data = stream.read(MAX_LINE_BYTES)
        if not data:
            break
        end = data.rfind(b"\n")
        first = data.find(b"\n")
        if (first if first >= 0 else len(data)) + len(carry) > MAX_LINE_BYTES:
            problems.add(name, line, f"line is longer than {MAX_LINE_BYTES >> 20} MiB; a record must be shorter")
            return
        if end < 0:
            carry += data
            continue
        block = carry + data[: end + 1]
        carry = data[end + 1 :]
        line += block.count(b"\n")
        yield block
    if carry.strip():
        yield carry


@contextmanager
def open_records(path: Path, progress: bool) -> Iterator[BinaryIO]:
    """The decompressed bytes of a record file, with a progress bar over the file when asked."""
    with open(path, "rb") as raw, progress_bar(path.stat().st_size, f"read {path.name}", progress) as bar:
        source = ReadProgress(raw, bar) if bar is not None else raw
        if path.name.endswith(".gz"):
            yield gzip.GzipFile(fileobj=source, mode="rb")
        elif path.name.endswith(".zst"):
            yield zstandard.ZstdDecompressor().stream_reader(source)
        else:
            yield source


def describe(exc: msgspec.DecodeError) -> str:
    if isinstance(exc, msgspec.ValidationError):
        return str(exc)
    return f"invalid JSON: {exc}"


def line_of_error(data: bytes, exc: msgspec.DecodeError) -> int | None:
    match = _BYTE_POSITION.search(str(exc))
    if match is None:
        return None
    return data.count(b"\n", 0, int(match.group(1))) + 1


__all__ = ["RawSnapshot", "SnapshotError", "read_snapshot", "record_file"]
