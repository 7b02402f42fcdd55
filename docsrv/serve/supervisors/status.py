"""What the master tells its workers and whoever asks them (/readyz, /metrics): the snapshot
served, the workers ready and wanted, the reloads and their failures, and any problem with the
files being served. Written whole to the run directory at each change."""

from __future__ import annotations

from pathlib import Path

from ...observe.runtime import MasterStatus, write_status
from .generation import Loaded, public_error


class StatusBoard:
    def __init__(self, run_dir: Path, wanted: int) -> None:
        self.run_dir = run_dir
        self.status = MasterStatus(workers=0, workers_wanted=wanted)

    def write(self) -> None:
        write_status(self.run_dir, self.status)

    def workers(self, ready: int) -> None:
        self.status.workers = ready
        self.write()

    def draining(self, workers: int) -> None:
        if self.status.draining != workers:
            self.status.draining = workers
            self.write()

    def serving(self, loaded: Loaded) -> None:
        self.status.snapshot = loaded.name
        self.status.load_seconds = round(loaded.load_seconds, 3)
        self.write()

    def problem(self, problem: str) -> bool:
        """Note why the snapshot served can no longer be trusted; whether that is news."""
        if self.status.problem == problem:
            return False
        self.status.problem = problem
        self.write()
        return True

    def reloaded(self, loaded: Loaded, ready: int, draining: int) -> None:
        self.status.reloads += 1
        self.status.draining = draining
        self.status.last_reload_error = None
        self.status.problem = None
        self.status.workers = ready
        self.serving(loaded)

    def reload_failed(self, error: Exception) -> None:
        self.status.reload_failures += 1
        self.status.last_reload_error = public_error(error)
        self.write()
