"""The workers serving now, kept at the number wanted.

A worker that exits, or does not become ready in time, is replaced after a pause that doubles
with each failure in a row (0.5 s up to 30 s). When no worker has been able to serve for
``no_workers_timeout`` seconds, the pool gives up (``NoWorkers``): the master then closes the
socket and exits 1, so that systemd or Kubernetes restarts it rather than leave a port that
accepts connections nobody answers.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable

from .generation import Generation
from .workers import READY_SECONDS, Workers, send

log = logging.getLogger("docsrv")

#: Pause before replacing a worker after the first failure in a row; it doubles up to the last.
BACKOFF_SECONDS = (0.5, 30.0)


class NoWorkers(Exception):
    """No worker could serve for the configured time."""


class WorkerPool:
    def __init__(
        self, generation: Generation, wanted: int, fork: Callable[[Generation], tuple[int, int]], no_workers_timeout: float
    ) -> None:
        self.current = Workers(generation)
        self.wanted = wanted
        self._fork = fork
        self.no_workers_timeout = no_workers_timeout
        self.failures = 0
        #: No worker is started before this (monotonic) time: the pause after a failure.
        self.next_start = 0.0
        self.unserved_since = time.monotonic()

    @property
    def generation(self) -> Generation:
        return self.current.generation

    @property
    def live(self) -> set[int]:
        """Workers ready and serving."""
        return self.current.ready

    def short(self) -> bool:
        return len(self.current.pids()) < self.wanted

    def fill(self) -> None:
        """Start workers up to the number wanted, unless a pause after a failure runs; kill those
        overdue to become ready; give up when none has served for too long."""
        now = time.monotonic()
        if self.live:
            self.unserved_since = now
        elif now - self.unserved_since > self.no_workers_timeout:
            raise NoWorkers(f"no worker has been able to serve for {self.no_workers_timeout:g} s")
        for pid in self.current.overdue(now):
            log.warning("worker %d did not become ready in %.0f s; stopping it", pid, READY_SECONDS)
            send(pid, signal.SIGKILL)
        while self.short() and now >= self.next_start:
            try:
                pid, ready_fd = self._fork(self.generation)
            except OSError as error:  # its generation is gone: the master loads the snapshot anew
                log.warning("cannot fork a worker now (%s); trying again in %.1f s", error, BACKOFF_SECONDS[0])
                self.next_start = now + BACKOFF_SECONDS[0]
                return
            self.current.started(pid, ready_fd, now)

    def answered(self, pid: int) -> bool:
        """A starting worker said something on its socket: whether it is now ready. One whose socket
        closed first is dying: it is killed, and its exit counts as a failure."""
        if self.current.answered(pid):
            self.failures = 0
            return True
        send(pid, signal.SIGKILL)
        return False

    def exited(self, pid: int, status: int) -> bool:
        """A worker of the pool exited: replace it after the pause. False if it was not one of ours."""
        was = self.current.forget(pid)
        if was is None:
            return False
        self.failures += 1
        pause = min(BACKOFF_SECONDS[0] * 2 ** (self.failures - 1), BACKOFF_SECONDS[1])
        self.next_start = time.monotonic() + pause
        what = "before it was ready" if was == "starting" else "unexpectedly"
        log.warning("worker %d exited %s (status %d); starting another in %.1f s", pid, what, status, pause)
        return True

    def replace(self, new: Workers) -> set[int]:
        """Serve with ``new`` (all ready) from now on; return the old workers, to be stopped."""
        old = self.current
        old.close_sockets()
        self.current = new
        return old.pids()
