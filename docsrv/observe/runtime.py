"""What a serving process keeps across snapshots: its metrics, its access log, and the status
that the master shares with every worker (reloads and their failures)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import msgspec
import orjson

from ..utils.files import replace_file
from .metrics import Metrics

STATUS_FILE = "status.json"


class MasterStatus(msgspec.Struct):
    """What the master tells its workers (for /readyz and /metrics), through the run directory."""

    #: Workers ready and serving the current snapshot, and how many there should be.
    workers: int = 1
    workers_wanted: int = 1
    reloads: int = 0
    reload_failures: int = 0
    last_reload_error: str | None = None
    snapshot: str | None = None
    load_seconds: float | None = None
    #: Why the snapshot being served can no longer be trusted (its files changed on disk), or None.
    problem: str | None = None
    #: Workers of an earlier snapshot still finishing what they had (after a reload): until it is
    #: 0, one of them may answer a request on a kept-alive connection with the old snapshot.
    draining: int = 0


class Runtime:
    def __init__(self, run_dir: Path | None = None, *, access_log: bool = False) -> None:
        self.run_dir = run_dir
        self.metrics = Metrics(run_dir)
        self.access_log = access_log
        self.started = time.time()
        #: Why this worker does not apply the changesets after the state it serves, or None.
        self.follow_problem: str | None = None
        #: The changeset this worker waits for the pull's snapshot of (it does not apply in
        #: memory, or the fold that takes it in is behind), or None.
        self.waiting_for: int | None = None

    def beat(self) -> None:
        """Say that this worker's event loop runs (a worker under a master)."""
        if self.run_dir is not None:
            path = heartbeat_path(self.run_dir, os.getpid())
            try:
                os.utime(path)
            except FileNotFoundError:
                path.touch()

    def status(self) -> MasterStatus:
        """What the master last wrote (a server without a master: one worker, no reloads)."""
        if self.run_dir is not None:
            try:
                return msgspec.json.decode((self.run_dir / STATUS_FILE).read_bytes(), type=MasterStatus)
            except (OSError, msgspec.DecodeError):
                pass
        return MasterStatus()

    def log_access(self, remote: str | None, method: str, path: str, user_agent: str | None, status: int, size: int, seconds: float,
                   route: str, snapshot: str) -> None:
        """One JSON line on standard output per request (``--access-log``)."""
        now = time.time()
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z",
            "worker": os.getpid(),
            "remote": remote,
            "method": method,
            "path": path,
            "route": route,
            "status": status,
            "bytes": size,
            "ms": round(seconds * 1000, 3),
            "snapshot": snapshot,
            "user_agent": user_agent,
        }
        sys.stdout.write(orjson.dumps(record).decode() + "\n")


def heartbeat_path(run_dir: Path, pid: int) -> Path:
    """The file whose modification time says when worker ``pid``'s event loop last ran its
    once-a-second tick (``serve.worker.every_second``): the master kills a worker whose heartbeat is
    older than ``--worker-timeout``, as gunicorn's arbiter does."""
    return run_dir / f"alive-{pid}"


def write_status(run_dir: Path, status: MasterStatus) -> None:
    replace_file(run_dir / STATUS_FILE, msgspec.json.encode(status))
