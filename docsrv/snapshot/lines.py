"""Reading record files: blocks of whole lines from plain, gzip or zstd JSON Lines files."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import msgspec
import zstandard

from ..utils.progress import ReadProgress, progress_bar
from .errors import DECODE_ERRORS, ProblemList

#: The longest line (one record) a snapshot file may hold, and the size of a decoded block.
MAX_LINE_BYTES = 4 << 20
#: Errors that mean a record file cannot be read to its end.
READ_ERRORS = (OSError, EOFError, zstandard.ZstdError)


def json_array(lines: bytes) -> bytes:
    """JSON Lines as one JSON array, so that msgspec decodes a whole block in one call.

    A raw newline cannot stand inside a JSON string, so every newline separates two records.
    """
    return b"[" + lines.rstrip(b"\n").replace(b"\n", b",") + b"]"


def report_bad_lines(body: bytes, first_line: int, decoder: msgspec.json.Decoder[Any], name: str, problems: ProblemList) -> None:
    """Decode a block that did not decode whole line by line, naming each bad line."""
    for number, line in enumerate(body.split(b"\n"), start=first_line):
        if not line.strip():
            problems.add(name, number, "blank line: every line holds one record")
            continue
        try:
            decoder.decode(line)
        except DECODE_ERRORS as exc:
            problems.add(name, number, describe(exc))


def line_blocks(stream: IO[bytes] | gzip.GzipFile, name: str, problems: ProblemList) -> Iterator[tuple[bytes, int]]:
    """Blocks of whole lines, each at most MAX_LINE_BYTES long, with how many lines each holds
    (counted once here: a large snapshot's pages are gigabytes of lines); a longer line is a
    problem."""
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
        lines = block.count(b"\n")
        line += lines
        yield block, lines
    if carry.strip():
        yield carry, carry.count(b"\n") + 1


@contextmanager
def open_records(path: Path, progress: bool) -> Iterator[IO[bytes] | gzip.GzipFile]:
    """The decompressed bytes of a record file, with a progress bar over the file when asked."""
    with open(path, "rb") as raw, progress_bar(path.stat().st_size, f"read {path.name}", progress) as bar:
        source: Any = ReadProgress(raw, bar) if bar is not None else raw
        if path.name.endswith(".gz"):
            yield gzip.GzipFile(fileobj=source, mode="rb")
        elif path.name.endswith(".zst"):
            yield zstandard.ZstdDecompressor().stream_reader(source)
        else:
            yield source


def describe(exc: msgspec.DecodeError | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8: {exc.reason} at byte {exc.start} of a string"
    if isinstance(exc, msgspec.ValidationError):
        if str(exc).startswith("Object contains unknown field"):
            return f"{exc} (written by a newer docsrv? upgrade docsrv to read it)"
        return str(exc)
    return f"invalid JSON: {exc}"


def decoded_blocks(path: Path, cls: type, problems: ProblemList, *, progress: bool = False) -> Iterator[tuple[bytes, int, list]]:
    """(block, number of its first line, its records) for each block of a record file.

    A block decodes as one JSON array; when it does not, or when a line held more than one
    record, its lines are decoded one by one so that each problem is named by file and line,
    and the block is not yielded. A file that cannot be read to its end is a problem too.
    """
    many: msgspec.json.Decoder[list[Any]] = msgspec.json.Decoder(list[cls])  # type: ignore[valid-type]
    one: msgspec.json.Decoder[Any] = msgspec.json.Decoder(cls)
    first_line = 1
    try:
        with open_records(path, progress) as stream:
            for block, lines in line_blocks(stream, path.name, problems):
                body = block[:-1] if block.endswith(b"\n") else block
                try:
                    records = many.decode(json_array(body))
                except DECODE_ERRORS:
                    records = None
                if records is not None and len(records) == lines:
                    yield block, first_line, records
                else:
                    report_bad_lines(body, first_line, one, path.name, problems)
                first_line += lines
    except READ_ERRORS as exc:
        problems.add(path.name, None, f"cannot be read to the end: {exc}")
