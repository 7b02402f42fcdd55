"""A set of workers forked from one generation (one snapshot: ``generation.py``): those starting,
each with the socket it says it is ready on and a deadline, and those ready. The workers serving
now are one such set; a reload's new workers another, until they are swapped in."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from ..worker import ACCEPT, READY
from .generation import Generation

#: How long a new worker may take to say it is ready before it is killed.
READY_SECONDS = 120.0


@dataclass
class Starting:
    ready_fd: int
    deadline: float


@dataclass
class Workers:
    generation: Generation
    starting: dict[int, Starting] = field(default_factory=dict)
    ready: set[int] = field(default_factory=set)

    def pids(self) -> set[int]:
        return set(self.starting) | self.ready

    def started(self, pid: int, ready_fd: int, now: float) -> None:
        self.starting[pid] = Starting(ready_fd, now + READY_SECONDS)

    def ready_sockets(self) -> dict[int, int]:
        """The pid of each starting worker, by the socket it will say it is ready on."""
        return {s.ready_fd: pid for pid, s in self.starting.items() if s.ready_fd >= 0}

    def answered(self, pid: int) -> bool:
        """Read what a starting worker said on its socket: True (and it is ready, and told to
        accept) if it is ready; False if the socket closed first (the worker is dying). The caller
        accepts no connection itself from now on (``master.py``)."""
        starting = self.starting[pid]
        try:
            said = os.read(starting.ready_fd, 1)
            if said == READY:
                os.write(starting.ready_fd, ACCEPT)
        except OSError:  # the worker died meanwhile
            said = b""
        os.close(starting.ready_fd)
        starting.ready_fd = -1
        if said == READY:
            del self.starting[pid]
            self.ready.add(pid)
            return True
        return False

    def overdue(self, now: float) -> list[int]:
        return [pid for pid, starting in self.starting.items() if now > starting.deadline]

    def forget(self, pid: int) -> str | None:
        """Let go of a worker that exited: "starting" or "ready" if it was one of these, else None."""
        starting = self.starting.pop(pid, None)
        if starting is not None:
            if starting.ready_fd >= 0:
                os.close(starting.ready_fd)
            return "starting"
        if pid in self.ready:
            self.ready.discard(pid)
            return "ready"
        return None

    def close_sockets(self) -> None:
        """Close the ready sockets of the starting workers (they are let go of, or this is a new worker's copy)."""
        for starting in self.starting.values():
            if starting.ready_fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(starting.ready_fd)
                starting.ready_fd = -1


def send(pid: int, signum: int) -> None:
    """Send a signal to a worker that may have exited already."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
