"""The master process: load the snapshot once, fork the workers, reload, stop.

The master loads and checks the snapshot, makes sure its search index exists, opens the
listening socket and forks the workers, which inherit both: the loaded objects are frozen
out of the garbage collector's reach before the fork, so the workers share their memory
pages. All workers accept from the one socket (set with SO_REUSEPORT, so that another docsrv
can bind the port beside it during a deploy).

A reload (SIGHUP, or ``--watch`` noticing a new snapshot at the path) loads the new snapshot
in the master while the workers keep serving the old one. If it loads, a new set of workers
is forked on it; once they are ready, the old workers are told to stop, and they finish the
requests they have before they exit. If it does not load, the error is logged and shown in
``/readyz`` and ``/metrics``, and the old workers go on serving.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import tempfile
import time
from pathlib import Path

from .config import Settings
from .metrics import retire
from .runtime import Runtime, write_status
from .search import load_served
from .server import DRAIN_SECONDS, listening_socket, raise_fd_limit, run, serve_worker
from .snapshot.errors import SnapshotError
from .store import Store

log = logging.getLogger("docsrv")

READY_SECONDS = 120.0


class Supervisor:
    def __init__(
        self,
        snapshot: Path,
        settings: Settings,
        host: str,
        port: int,
        *,
        workers: int,
        watch: float | None = None,
        access_log: bool = False,
    ) -> None:
        self.snapshot = snapshot
        self.settings = settings
        self.host = host
        self.port = port
        self.workers = max(1, workers)
        self.watch = watch
        self.access_log = access_log
        self.run_dir = Path(tempfile.mkdtemp(prefix="docsrv-run-"))
        self.pids: set[int] = set()
        self.status = {"workers": self.workers, "reloads": 0, "reload_failures": 0, "last_reload_error": None}
        self._flags: set[str] = set()

    # The life of the master.

    def run(self) -> int:
        raise_fd_limit()
        try:
            store, index_dir = load_served(self.snapshot)
            self.sock = listening_socket(self.host, self.port)
            self.status.update(snapshot=store.name, load_seconds=round(store.load_seconds, 3))
            write_status(self.run_dir, self.status)
            for signum, flag in ((signal.SIGHUP, "reload"), (signal.SIGTERM, "stop"), (signal.SIGINT, "stop"), (signal.SIGCHLD, "reap")):
                signal.signal(signum, lambda _signum, _frame, flag=flag: self._flags.add(flag))
            self.pids = self.spawn_all(store, index_dir)
            self.store, self.index_dir = store, index_dir
            address = self.sock.getsockname()
            counts = ", ".join(f"{n} {kind}" for kind, n in store.counts.items())
            log.info(
                "serving snapshot %s on http://%s:%d with %d worker(s) (%s; loaded in %.2f s)",
                store.name, address[0], address[1], len(self.pids), counts, store.load_seconds,
            )
            self.loop()
            return 0
        finally:
            self.stop_all()
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def loop(self) -> None:
        seen = self.watch_key()
        next_look = time.monotonic() + (self.watch or 0)
        while "stop" not in self._flags:
            time.sleep(0.1)
            if "reap" in self._flags:
                self._flags.discard("reap")
                self.reap()
            if "reload" in self._flags:
                self._flags.discard("reload")
                self.reload("SIGHUP")
                seen = self.watch_key()
            if self.watch and time.monotonic() >= next_look:
                next_look = time.monotonic() + self.watch
                key = self.watch_key()
                if key != seen:
                    seen = key
                    self.reload(f"a new snapshot at {self.snapshot}")
        log.info("stopping: workers finish the requests in flight")

    # Workers.

    def spawn_all(self, store: Store, index_dir: Path, count: int | None = None) -> set[int]:
        """Fork ``count`` workers (a full set by default) on ``store``: all of them, ready, or none."""
        started: dict[int, int] = {}
        try:
            for _ in range(count or self.workers):
                pid, ready = self.spawn(store, index_dir)
                started[pid] = ready
            deadline = time.monotonic() + READY_SECONDS
            for pid, ready in started.items():
                waiting, _, _ = select.select([ready], [], [], max(0.0, deadline - time.monotonic()))
                if not waiting or os.read(ready, 1) != b"R":
                    raise RuntimeError(f"worker {pid} did not become ready")
        except BaseException:
            for pid in started:
                self.signal_worker(pid, signal.SIGKILL)
            raise
        finally:
            for ready in started.values():
                os.close(ready)
        return set(started)

    def spawn(self, store: Store, index_dir: Path) -> tuple[int, int]:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid:
            os.close(write_end)
            return pid, read_end
        # The worker.
        code = 1
        try:
            os.close(read_end)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            runtime = Runtime(self.run_dir, access_log=self.access_log)
            run(serve_worker(store, index_dir, self.settings, self.sock, runtime, write_end))
            code = 0
        except BaseException:
            log.exception("worker %d failed", os.getpid())
        finally:
            os._exit(code)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            retire(self.run_dir, pid)
            if pid in self.pids and "stop" not in self._flags:
                self.pids.discard(pid)
                log.warning("worker %d exited unexpectedly (status %d); starting another", pid, status)
                try:
                    self.pids |= self.spawn_all(self.store, self.index_dir, 1)
                except Exception:
                    log.exception("could not replace worker %d", pid)

    def signal_worker(self, pid: int, signum: int) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        """Ask every worker to drain and stop; wait for them; kill what is left."""
        for pid in self.pids:
            self.signal_worker(pid, signal.SIGTERM)
        deadline = time.monotonic() + DRAIN_SECONDS + 5
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.05)
            else:
                self.pids.discard(pid)
        for pid in self.pids:
            self.signal_worker(pid, signal.SIGKILL)

    # Reloading.

    def watch_key(self) -> tuple:
        """What changes when a new snapshot is put at the path (a symlink swapped, or files replaced)."""
        try:
            real = os.path.realpath(self.snapshot)
            stat = os.stat(os.path.join(real, "manifest.json"))
            return (real, stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except OSError:
            return (None,)

    def reload(self, why: str) -> None:
        log.info("reloading (%s): loading %s beside the snapshot being served", why, self.snapshot)
        try:
            store, index_dir = load_served(self.snapshot)
            new = self.spawn_all(store, index_dir)
        except Exception as error:  # a bad snapshot of any kind: the old one keeps serving
            self.status["reload_failures"] += 1
            self.status["last_reload_error"] = public_error(error)
            write_status(self.run_dir, self.status)
            log.error("reload failed; still serving snapshot %s: %s", self.store.name, error)
            return
        old, self.pids = self.pids, new
        self.store, self.index_dir = store, index_dir
        for pid in old:
            self.signal_worker(pid, signal.SIGTERM)
        self.status.update(
            reloads=self.status["reloads"] + 1, last_reload_error=None, snapshot=store.name, load_seconds=round(store.load_seconds, 3)
        )
        write_status(self.run_dir, self.status)
        log.info("reloaded: serving snapshot %s (loaded in %.2f s)", store.name, store.load_seconds)


def public_error(error: Exception) -> str:
    """What /readyz may say of a failed load: no filesystem path, no traceback."""
    if isinstance(error, SnapshotError):
        return error.summary()
    if isinstance(error, OSError):
        return f"{type(error).__name__}: {error.strerror or 'operating system error'}"
    return f"{type(error).__name__}: {error}"


def serve(snapshot: Path, settings: Settings, host: str, port: int, *, workers: int, watch: float | None, access_log: bool) -> int:
    return Supervisor(snapshot, settings, host, port, workers=workers, watch=watch, access_log=access_log).run()

