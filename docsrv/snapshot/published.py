"""Where each build's commands are, published with the snapshot: the scan of the build commands
done once, by the publisher, instead of by every replica on its first load.

A first load decodes every build command to check it and to note where each build's lines are:
about half of the load, the most of what a pull does after its download.
``docsrv index`` (which loads and checks the whole snapshot first) writes what that scan found
into the index directory, as ``command-ranges``, and the manifest seals it with the index's other
files: a pull fetches it, checks its digest as it arrives, and loads the snapshot without the scan.

It is used only when it is of exactly these records: it names the SHA-256 of the build commands
and of the builds it was made from (as the manifest records them) and the docsrv that made it
(whose checks it stands for). A first load that did not pull checks its digest against the
manifest's. Anything else (another docsrv, other records, a digest that differs, bytes that do
not decode) is named in the log, and the commands are scanned as before.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import operator
from pathlib import Path

import msgspec

from .. import __version__
from ..utils.files import replace_file
from .commands import CommandRanges
from .errors import DECODE_ERRORS
from .records import FORMAT_VERSION, INDEX, Manifest

log = logging.getLogger("docsrv")

#: Its name in the index directory (and in ``Manifest.index``).
PUBLISHED_RANGES = "command-ranges"
COMMANDS = "build_commands.jsonl"
BUILDS = "builds.jsonl"


class PublishedRanges(msgspec.Struct, array_like=True, frozen=True):
    docsrv: str
    format_version: int
    #: The digests of the records it was made from, as the manifest records them.
    commands_sha256: str
    builds_sha256: str
    #: How many commands the file holds, and the ranges (``CommandRanges.to_bytes``).
    total: int
    table: bytes


def publish_ranges(snapshot: Path, manifest: Manifest, ranges: CommandRanges, total: int) -> bool:
    """Write the ranges of a snapshot whose records were just checked into its index directory;
    False (and nothing written) when its manifest does not seal plain JSON Lines commands."""
    commands, builds = manifest.files.get(COMMANDS), manifest.files.get(BUILDS)
    if commands is None or builds is None:
        return False
    published = PublishedRanges(__version__, FORMAT_VERSION, commands.sha256, builds.sha256, total, ranges.to_bytes())
    replace_file(snapshot / INDEX / PUBLISHED_RANGES, msgspec.msgpack.encode(published))
    return True


def ranges_problem(ranges: CommandRanges, path: Path) -> str | None:
    """Why ``ranges`` cannot be where build commands stand in ``path``, if they cannot: each range
    runs forwards, within the file, from a line's start to a line's end. (Which build a line is of
    is checked as it is read: ``CommandFile.of_build``.)"""
    table = ranges.table
    offsets, ends = table[1::4], table[2::4]
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            size = len(data)
            if not all(map(operator.le, offsets, ends)) or min(offsets, default=0) < 0 or max(ends, default=0) > size:
                return f"a range runs backwards or past the end of {COMMANDS} ({size} bytes)"
            newline = ord("\n")
            starts = (data[offset - 1] for offset in offsets if offset)
            stops = (data[end - 1] for end in ends if end)
            if any(byte != newline for byte in starts) or any(byte != newline for byte in stops):
                return f"a range starts or ends inside a line of {COMMANDS}"
    except (OSError, ValueError) as error:
        return f"{COMMANDS} cannot be read ({error})"
    return None


def published_ranges(snapshot: Path, manifest: Manifest, *, digest_checked: bool) -> tuple[CommandRanges, int] | None:
    """The ranges the publisher found, with how many commands there are, when they are of these
    records; None otherwise (named in the log when the file is there but not used).
    ``digest_checked``: the file was checked against the manifest as it arrived (a pull)."""
    listed = manifest.index.get(PUBLISHED_RANGES)
    commands, builds = manifest.files.get(COMMANDS), manifest.files.get(BUILDS)
    if listed is None or commands is None or builds is None:
        return None
    path = snapshot / INDEX / PUBLISHED_RANGES
    try:
        data = path.read_bytes()
    except OSError:
        return None
    why = None
    if not digest_checked and (len(data) != listed.size or hashlib.sha256(data).hexdigest() != listed.sha256):
        why = "its SHA-256 differs from the one manifest.json records"
    else:
        try:
            published = msgspec.msgpack.decode(data, type=PublishedRanges)
        except DECODE_ERRORS as error:
            why = f"not ranges docsrv wrote ({error})"
        else:
            ranges = CommandRanges.from_bytes(published.table)
            if (published.docsrv, published.format_version) != (__version__, FORMAT_VERSION):
                why = f"made by docsrv {published.docsrv}, not this one"
            elif (published.commands_sha256, published.builds_sha256) != (commands.sha256, builds.sha256):
                why = f"made from other {COMMANDS} or {BUILDS}"
            elif ranges is None:
                why = "its ranges are out of order"
            elif (why := ranges_problem(ranges, snapshot / COMMANDS)) is None:
                return ranges, published.total
    log.warning("%s/%s: %s; scanning %s", INDEX, PUBLISHED_RANGES, why, COMMANDS)
    return None
