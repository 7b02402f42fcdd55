"""A base built in the background: the follower's state as of one changeset, written whole by a
child process while the stream goes on. At one changeset a second, the bound of changesets
after a base comes every quarter of an hour, and a base written inline pauses every commit
behind it for as long as the write.

The child is forked: it holds the state exactly as it was when the base was asked for, without
a copy, and its writing takes none of the follower's time (a thread would share the
interpreter's lock with the stream for the whole write, sorts of millions of records among it).
It writes the snapshot into ``ORIGIN/.follower/base-<sequence>``, lays it on the origin as
``snapshots/<name>`` (``replica.publish.lay_snapshot``, on disk when it exits) and exits; the
follower then makes it the origin's base between two changesets (``replica.publish.rebase``):
the changesets published meanwhile follow it, since the base is named as the product of the
changeset whose state it holds.
"""

from __future__ import annotations

import gc
import os
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from ..replica.publish import lay_snapshot
from ..snapshot.import_dump import write_snapshot
from ..snapshot.load import manifest_of
from ..snapshot.origin import SNAPSHOTS
from ..snapshot.write import PARTIAL
from .state import SourceState


@dataclass
class BaseBuild:
    """A child process writing the state of ``sequence`` (named ``name``) as a base."""

    pid: int
    origin: Path
    name: str
    sequence: int
    work: Path
    started: float

    @classmethod
    def start(cls, state: SourceState, origin: Path, private: Path, name: str, sequence: int, public_url: str) -> BaseBuild:
        work = private / f"base-{sequence}"
        shutil.rmtree(work, ignore_errors=True)
        stale = origin / SNAPSHOTS / name  # laid by a follower stopped before it made it the base
        shutil.rmtree(stale, ignore_errors=True)
        (work / "snapshot").mkdir(parents=True)
        pid = os.fork()
        if pid == 0:  # the child: write, lay, and exit without running the parent's cleanup
            code = 1
            # Nothing of the parent's stays open in it: its connections, its metrics' listening socket.
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            gc.disable()  # a collection would write to every container it reads: each page it is on copied
            try:
                write_snapshot(state.records(), work / "snapshot", name, public_url, None)
                lay_snapshot(work / "snapshot", manifest_of(work / "snapshot"), origin, sequence, durable=True)
                code = 0
            except BaseException as error:  # said by the parent, from the file
                (work / "error").write_text(" ".join(traceback.format_exception_only(error)).strip() or type(error).__name__)
            finally:
                os._exit(code)
        return cls(pid, origin, name, sequence, work, time.perf_counter())

    def outcome(self) -> str | None:
        """None while the child writes; then "" when the base is laid, or why it is not. The
        child's files are gone once it is known."""
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return None
        try:
            why = (self.work / "error").read_text() if status != 0 else ""
        except OSError:
            why = f"the process writing it ended with status {os.waitstatus_to_exitcode(status)}"
        shutil.rmtree(self.work, ignore_errors=True)
        return why

    def stop(self) -> None:
        """End the child (the follower took another base meanwhile) and remove what it wrote."""
        try:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        self.discard()

    def discard(self) -> None:
        """Remove what it wrote: its work, and the snapshot it laid or was laying."""
        shutil.rmtree(self.work, ignore_errors=True)
        snapshots = self.origin / SNAPSHOTS
        for laid in [snapshots / self.name, *snapshots.glob(f".{self.name}{PARTIAL}-*")]:
            shutil.rmtree(laid, ignore_errors=True)
