"""Build commands stay on disk: the loader checks them and notes where each build's lines are.

Commands are most of a snapshot (three to six a build, each with its output) and are shown
only inside a build, so holding them as objects would cost more memory than everything else
together. The loader decodes every line once, to check it, and keeps for each build the byte
range of its lines; a build's commands are read and decoded when it is rendered. The format
requires a build's commands to stand on consecutive lines, which is how they are written.

A compressed file is decompressed once into an unnamed temporary file, so reads are plain
``pread`` calls that forked workers can share.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from bisect import bisect_left
from collections.abc import Container
from itertools import compress
from operator import attrgetter
from pathlib import Path

import msgspec

from .errors import ProblemList
from .lines import decoded_blocks, json_array
from .records import BuildCommand


class FileChanged(Exception):
    """The build commands' file is no longer what was loaded: it was written to under the server."""


class CommandRanges:
    """Where each build's commands are: rows of (build id, offset, end, how many commands) in one
    flat array of 64-bit integers, by build id, found by bisection.

    A dict of millions of builds' tuples was made anew on every load, and reference counts kept
    touching its memory (so forked workers did not share it); the array is read
    from the ranges file (``verified.py``) in one copy and its pages are never written again.
    """

    def __init__(self, table: array) -> None:
        self.table = table
        self._ids = table[0::4]

    @classmethod
    def of(cls, ranges: dict[int, tuple[int, int, int]]) -> CommandRanges:
        table = array("q")
        for build in sorted(ranges):
            table.extend((build, *ranges[build]))
        return cls(table)

    @classmethod
    def from_bytes(cls, data: bytes) -> CommandRanges | None:
        """The table ``to_bytes`` wrote; None for bytes that are not one (a length that is no
        whole number of rows, or ids out of order)."""
        table = array("q")
        if len(data) % (4 * table.itemsize):
            return None
        table.frombytes(data)
        return cls(table) if _ascending(table[0::4]) else None

    def to_bytes(self) -> bytes:
        return self.table.tobytes()

    def get(self, build_id: int) -> tuple[int, int, int] | None:
        """(offset, end, how many commands) of a build's commands; None for a build without any."""
        ids = self._ids
        at = bisect_left(ids, build_id)
        if at == len(ids) or ids[at] != build_id:
            return None
        row = 4 * at
        return self.table[row + 1], self.table[row + 2], self.table[row + 3]

    def commands_of_builds(self, builds: Container[int]) -> int:
        """How many commands the builds in ``builds`` have (iterated in C, not a call a build)."""
        return sum(compress(self.table[3::4], map(builds.__contains__, self._ids)))


def _ascending(ids: array) -> bool:
    """Whether ``ids`` rise strictly (so that bisection finds every one)."""
    return all(map(int.__lt__, ids[:-1], ids[1:]))


class CommandFile:
    """The build commands of a snapshot, by build, read from disk on demand.

    The file is the snapshot's own (a plain ``.jsonl``) or a private decompressed copy. Its own
    could be written to under a running server (``cp other/build_commands.jsonl snapshot/``);
    every read checks first that the file is still the one loaded (inode, size, modification
    and change times: a write changes the change time whatever else it keeps), so no build is
    ever answered with another build's bytes.
    """

    def __init__(self, fd: int, ranges: CommandRanges, total: int, *, watched: bool = True) -> None:
        self._fd = fd
        self._loaded = identity(fd) if watched else None
        #: Where each build's commands are in the decompressed file.
        self.ranges = ranges
        self.total = total
        self._decoder = msgspec.json.Decoder(list[BuildCommand])

    def of_build(self, build_id: int) -> list[BuildCommand]:
        """The commands of a build, by start time."""
        return by_start_time(self.in_file_order(build_id))

    def in_file_order(self, build_id: int) -> list[BuildCommand]:
        """The commands of a build, in the order of their lines."""
        found = self.ranges.get(build_id)
        if found is None:
            return []
        offset, end, _count = found
        if self._loaded is not None and identity(self._fd) != self._loaded:
            raise FileChanged("build_commands.jsonl changed on disk after it was loaded")
        data = os.pread(self._fd, end - offset, offset)
        # Only the build's own: ranges a publisher sent could point at another build's lines.
        return [command for command in self._decoder.decode(json_array(data)) if command.build == build_id]

    def count_of(self, build_id: int) -> int:
        """How many commands a build has."""
        found = self.ranges.get(build_id)
        return found[2] if found is not None else 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


class ChangedCommands:
    """The build commands of a snapshot with those of some builds replaced in memory (a changeset
    applied by a server: ``store/changes.py``). Each changed build's commands are kept in the order
    their lines would have in the snapshot the changeset makes (``changeset.apply``), so they are
    shown in the same order."""

    def __init__(self, base: CommandFile, changed: dict[int, list[BuildCommand]]) -> None:
        self.base = base
        self.changed = changed

    def of_build(self, build_id: int) -> list[BuildCommand]:
        return by_start_time(self.in_file_order(build_id))

    def in_file_order(self, build_id: int) -> list[BuildCommand]:
        found = self.changed.get(build_id)
        return list(found) if found is not None else self.base.in_file_order(build_id)

    def count_of(self, build_id: int) -> int:
        found = self.changed.get(build_id)
        return len(found) if found is not None else self.base.count_of(build_id)


def by_start_time(commands: list[BuildCommand]) -> list[BuildCommand]:
    """A build's commands as they are shown: by start time, in the order of their lines among equals."""
    commands.sort(key=attrgetter("start_time"))
    return commands


def identity(fd: int) -> tuple[int, int, int, int]:
    stat = os.fstat(fd)
    return stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


def index_commands(
    path: Path, builds: dict[int, int] | None, problems: ProblemList, *, progress: bool = False
) -> CommandFile | None:
    """Check every command in ``path`` and note the byte range of each build's lines.

    ``builds`` (id -> line) are the builds commands may name; None leaves that unchecked.
    """
    name = path.name
    copy = None if name.endswith(".jsonl") else tempfile.TemporaryFile(prefix="docsrv-commands-")  # noqa: SIM115 - closed below
    ranges: dict[int, tuple[int, int, int]] = {}
    before = len(problems)
    offset = 0  # where the next block starts in the decompressed file
    current: int | None = None
    current_start = current_count = total = 0
    for block, first_line, commands in decoded_blocks(path, BuildCommand, problems, progress=progress):
        if copy is not None:
            copy.write(block)
        position = offset
        for line, command in enumerate(commands, start=first_line):
            if command.build != current:
                if current is not None:
                    ranges[current] = (current_start, position, current_count)
                if command.build in ranges:
                    problems.add(
                        name, line, f"command {command.id} of build {command.build} is not next to the other commands of that build"
                    )
                elif builds is not None and command.build not in builds:
                    problems.add(name, line, f"command {command.id} names build {command.build}, which does not exist")
                current, current_start, current_count = command.build, position, 0
            if command.end_time < command.start_time:
                problems.add(name, line, f"command {command.id} ends before it starts")
            current_count += 1
            newline = block.find(b"\n", position - offset)
            position = offset + newline + 1 if newline >= 0 else offset + len(block)
        total = first_line + len(commands) - 1
        offset += len(block)
    if current is not None:
        ranges[current] = (current_start, offset, current_count)
    if len(problems) > before:
        if copy is not None:
            copy.close()
        return None
    table = CommandRanges.of(ranges)
    if copy is None:
        return CommandFile(os.open(path, os.O_RDONLY), table, total)
    copy.flush()
    fd = os.dup(copy.fileno())
    copy.close()
    return CommandFile(fd, table, total, watched=False)  # a private copy: nobody else writes to it
