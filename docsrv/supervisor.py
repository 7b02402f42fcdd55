"""The master process: load the snapshot once, fork the workers, keep them alive, reload, stop.

The master opens the one listening socket (before anything slow, so a port already served
fails at once), loads the snapshot with everything its workers will read (``serving.py``), and
forks the workers, which inherit both: the loaded objects are frozen out of the garbage
collector's reach before the fork, so the workers share their memory pages.

Supervision: a worker dies with its master (a parent-death signal). A worker that exits, or does
not become ready, is replaced, after a pause that doubles with each failure in a row (0.5 s up
to 30 s). When no worker has been able to serve for ``no_workers_timeout`` seconds, the master
closes the socket and exits 1, so that systemd or Kubernetes restarts it rather than leave a
port that accepts connections nobody answers.

Reloads (SIGHUP; ``--watch`` seeing a new snapshot at the path; the files of the snapshot being
served changing on disk): the master loads the snapshot beside the one being served, in a thread
of its own, so that it goes on supervising meanwhile (a worker that dies is replaced, SIGTERM
stops the server). If it loads, a new set of workers is forked on it; once they are all ready,
the old ones are told to stop and finish what they have (``server.Listening.close``). If it does not, the error is logged and
shown in ``/readyz`` and ``/metrics``, and the old workers go on serving. A snapshot is taken
only when settled: its manifest lists each file's size, and every file has it (a snapshot still
being copied is waited for, not loaded); a failed load is tried again when the files change again.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import select
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import msgspec

from .config import Settings
from .metrics import retire
from .runtime import MasterStatus, Runtime, write_status
from .server import DRAIN_SECONDS, listening_socket, raise_fd_limit, run, serve_worker
from .serving import Served, Signature, load_served, resolve, signature
from .snapshot.errors import SnapshotError
from .snapshot.records import Manifest

log = logging.getLogger("docsrv")

READY_SECONDS = 120.0
#: Pause before replacing a worker after the first failure in a row; it doubles up to the last.
BACKOFF_SECONDS = (0.5, 30.0)
#: The longest the master's loop waits: it wakes at once on a signal (a wakeup pipe), a worker
#: becoming ready or a load ending, and at the end of a pause or of the interval between looks.
TICK_SECONDS = 1.0


@dataclass
class Starting:
    ready_fd: int
    deadline: float


class NoWorkers(Exception):
    """No worker could serve for the configured time."""


class Reload:
    """A reload under way: the snapshot loading in a thread, then a new set of workers starting
    on it. The master's loop advances it (``Supervisor.advance_reload``) and never waits for it."""

    def __init__(self, why: str, directory: Path, wake: int) -> None:
        self.why = why
        self.directory = directory
        self.served: Served | None = None
        self.error: Exception | None = None
        #: The new workers: starting (not ready yet), and ready.
        self.starting: dict[int, Starting] = {}
        self.ready: set[int] = set()
        self._wake = wake
        self.thread = threading.Thread(target=self._load, name="docsrv-reload", daemon=True)
        self.thread.start()

    def _load(self) -> None:
        try:
            self.served = load_served(self.directory)
        except Exception as error:  # a bad snapshot of any kind: reported by the loop
            self.error = error
        finally:
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake, b"L")  # wake the loop

    @property
    def loading(self) -> bool:
        return self.thread.is_alive()

    def pids(self) -> set[int]:
        return set(self.starting) | self.ready


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
        look_interval: float = 2.0,
        access_log: bool = False,
        no_workers_timeout: float = 60.0,
    ) -> None:
        self.snapshot = snapshot
        self.settings = settings
        self.host = host
        self.port = port
        self.wanted = max(1, workers)
        self.watch = watch is not None
        self.look_interval = watch if watch is not None else look_interval
        self.access_log = access_log
        self.no_workers_timeout = no_workers_timeout
        self.run_dir = Path(tempfile.mkdtemp(prefix="docsrv-run-"))
        self.master = os.getpid()
        #: Workers ready and serving the current snapshot; workers started and not ready yet.
        self.live: set[int] = set()
        self.starting: dict[int, Starting] = {}
        self.failures = 0
        self.next_start = 0.0
        self.unserved_since = time.monotonic()
        self.announced = False
        self.status = MasterStatus(workers=0, workers_wanted=self.wanted)
        self._flags: set[str] = set()
        #: (directory, signature) of what is served, and of the last snapshot a load was tried on.
        self.loaded: tuple[Path, Signature] | None = None
        self.tried: tuple[Path, Signature] | None = None
        self.waiting_for: tuple[Path, Signature] | None = None
        #: The reload under way, and why another was asked for meanwhile (taken after it).
        self.reloading: Reload | None = None
        self.reload_again: str | None = None
        #: Signals, and the end of a load, write to this pipe: the loop's select wakes on it.
        self.wake_read, self.wake_write = os.pipe()
        for fd in (self.wake_read, self.wake_write):
            os.set_blocking(fd, False)

    # The life of the master.

    def run(self) -> int:
        raise_fd_limit()
        self.sock = listening_socket(self.host, self.port)
        try:
            self.served = load_served(self.snapshot)
            self.loaded = (self.served.directory, self.served.signature)
            self.status.snapshot = self.served.store.name
            self.status.load_seconds = round(self.served.store.load_seconds, 3)
            self.write_status()
            for signum, flag in ((signal.SIGHUP, "reload"), (signal.SIGTERM, "stop"), (signal.SIGINT, "stop"), (signal.SIGCHLD, "reap")):
                signal.signal(signum, self.flagger(flag))
            signal.set_wakeup_fd(self.wake_write)
            self.loop()
            return 0
        except NoWorkers as error:
            log.error("%s; exiting", error)
            return 1
        finally:
            signal.set_wakeup_fd(-1)
            self.sock.close()
            self.stop_all()
            shutil.rmtree(self.run_dir, ignore_errors=True)
            for fd in (self.wake_read, self.wake_write):
                os.close(fd)

    def loop(self) -> None:
        next_look = time.monotonic() + self.look_interval
        while "stop" not in self._flags:
            now = time.monotonic()
            until = min(next_look, self.next_start) if len(self.live) + len(self.starting) < self.wanted else next_look
            self.wait_for_ready(min(TICK_SECONDS, max(0.0, until - now)))
            if "reap" in self._flags:
                self._flags.discard("reap")
                self.reap()
            self.start_missing()
            if self.reloading is not None:
                self.advance_reload()
            if "reload" in self._flags:
                self._flags.discard("reload")
                self.reload("SIGHUP")
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + self.look_interval
                self.look()
        log.info("stopping: workers finish the requests in flight")

    def flagger(self, flag: str) -> Callable[[int, FrameType | None], None]:
        """A signal handler that only notes the signal: the loop acts on it."""
        return lambda _signum, _frame: self._flags.add(flag)

    def write_status(self) -> None:
        self.status.workers = len(self.live)
        write_status(self.run_dir, self.status)

    # Workers.

    def start_missing(self) -> None:
        """Start workers up to the number wanted, when no pause after a failure is running; give
        up when none has served for too long."""
        now = time.monotonic()
        if self.live:
            self.unserved_since = now
        elif now - self.unserved_since > self.no_workers_timeout:
            raise NoWorkers(f"no worker has been able to serve for {self.no_workers_timeout:g} s")
        for pid, starting in list(self.starting.items()):
            if now > starting.deadline:
                log.warning("worker %d did not become ready in %.0f s; stopping it", pid, READY_SECONDS)
                self.signal_worker(pid, signal.SIGKILL)
        while len(self.live) + len(self.starting) < self.wanted and now >= self.next_start:
            pid, ready = self.spawn(self.served)
            self.starting[pid] = Starting(ready, now + READY_SECONDS)

    def wait_for_ready(self, timeout: float) -> None:
        """Wait for a worker to become ready, a signal or a load's end, at most ``timeout``."""
        fds = {s.ready_fd: pid for pid, s in self.starting.items() if s.ready_fd >= 0}
        if self.reloading is not None:
            fds.update({s.ready_fd: pid for pid, s in self.reloading.starting.items() if s.ready_fd >= 0})
        try:
            readable, _, _ = select.select([self.wake_read, *fds], [], [], timeout)
        except InterruptedError:
            return
        for fd in readable:
            if fd == self.wake_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(fd, 4096)
                continue
            pid = fds[fd]
            renewing = self.reloading is not None and pid in self.reloading.starting
            if not renewing and pid not in self.starting:
                continue  # let go of since the select (a swap or a failed reload closed its pipe)
            got = os.read(fd, 1)
            os.close(fd)
            if renewing:
                self.new_worker_answered(pid, got == b"R")
            elif got == b"R":
                del self.starting[pid]
                self.live.add(pid)
                self.failures = 0
                self.write_status()
                self.announce()
            else:  # the worker is dying before it was ready: reap() counts the failure
                self.starting[pid].ready_fd = -1
                self.signal_worker(pid, signal.SIGKILL)

    def announce(self) -> None:
        if self.announced or len(self.live) < self.wanted:
            return
        self.announced = True
        store = self.served.store
        address = self.sock.getsockname()
        counts = ", ".join(f"{n} {kind}" for kind, n in store.counts.items())
        log.info(
            "serving snapshot %s on http://%s:%d with %d worker(s) (%s; loaded in %.2f s)",
            store.name, address[0], address[1], len(self.live), counts, store.load_seconds,
        )

    def spawn(self, served: Served) -> tuple[int, int]:
        read_end, write_end = os.pipe()
        with index_locks_held(served):
            pid = os.fork()
        if pid:
            os.close(write_end)
            return pid, read_end
        # The worker.
        code = 1
        try:
            gc.enable()  # a load in the master's thread may have paused the collector
            signal.set_wakeup_fd(-1)
            os.close(read_end)
            for fd in (self.wake_read, self.wake_write):
                os.close(fd)
            starting = [*self.starting.values(), *(self.reloading.starting.values() if self.reloading is not None else ())]
            for ready in starting:
                if ready.ready_fd >= 0:
                    os.close(ready.ready_fd)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            runtime = Runtime(self.run_dir, access_log=self.access_log)
            run(serve_worker(served, self.settings, self.sock, runtime, write_end, self.master))
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
            if self.reloading is not None and pid in self.reloading.pids():
                self.fail_reload(RuntimeError(f"new worker {pid} exited (status {status}) before the swap"))
                continue
            starting = self.starting.pop(pid, None)
            if starting is not None and starting.ready_fd >= 0:
                os.close(starting.ready_fd)
            if (starting is not None or pid in self.live) and "stop" not in self._flags:
                self.live.discard(pid)
                self.failures += 1
                pause = min(BACKOFF_SECONDS[0] * 2 ** (self.failures - 1), BACKOFF_SECONDS[1])
                self.next_start = time.monotonic() + pause
                what = "before it was ready" if starting is not None else "unexpectedly"
                log.warning("worker %d exited %s (status %d); starting another in %.1f s", pid, what, status, pause)
                self.write_status()

    def signal_worker(self, pid: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    def stop_all(self) -> None:
        """Ask every worker to drain and stop; wait for them; kill what is left."""
        pids = self.live | set(self.starting) | (self.reloading.pids() if self.reloading is not None else set())
        for pid in pids:
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
                pids.discard(pid)
        for pid in pids:
            self.signal_worker(pid, signal.SIGKILL)

    # Reloading.

    def look(self) -> None:
        """Reload when the snapshot at the path is not the one served: its files changed on disk
        (always), or another snapshot was put there (with --watch); once it is settled."""
        directory = resolve(self.snapshot)
        now = (directory, signature(directory))
        if now == self.loaded or now == self.tried or self.reloading is not None:
            return
        assert self.loaded is not None
        if directory == self.loaded[0]:
            changed = sorted({entry[0] for entry in set(now[1]) ^ set(self.loaded[1])})
            problem = f"files of snapshot {self.served.store.name} changed on disk: {', '.join(changed)}"
            if self.status.problem != problem:
                log.warning("%s; reloading once they are complete", problem)
                self.status.problem = problem
                self.write_status()
        elif not self.watch:
            return
        if not settled(directory):
            if self.waiting_for != now:
                self.waiting_for = now
                log.info("waiting for the snapshot at %s to be complete", self.snapshot)
            return
        self.tried = now
        self.reload(f"a new snapshot at {self.snapshot}" if directory != self.loaded[0] else "its files changed", directory)

    def reload(self, why: str, directory: Path | None = None) -> None:
        """Start loading the snapshot in ``directory`` (by default, where the snapshot path points
        now: the directory that was looked at, not wherever a link flipped since points)."""
        if self.reloading is not None:
            log.info("reload asked (%s) while one is under way: it follows", why)
            self.reload_again = why
            return
        log.info("reloading (%s): loading %s beside the snapshot being served", why, self.snapshot)
        self.reloading = Reload(why, resolve(directory or self.snapshot), self.wake_write)

    def advance_reload(self) -> None:
        """Take the reload under way one step further, without waiting: once loaded, start its
        workers; once they are all ready, swap them in; on any failure, keep the old ones."""
        reloading = self.reloading
        assert reloading is not None
        if reloading.loading:
            return
        if reloading.error is not None:
            self.fail_reload(reloading.error)
            return
        assert reloading.served is not None
        now = time.monotonic()
        if not reloading.starting and not reloading.ready:
            for _ in range(self.wanted):
                pid, ready = self.spawn(reloading.served)
                reloading.starting[pid] = Starting(ready, now + READY_SECONDS)
            return
        if any(now > starting.deadline for starting in reloading.starting.values()):
            self.fail_reload(RuntimeError(f"a new worker did not become ready in {READY_SECONDS:.0f} s"))
        elif len(reloading.ready) == self.wanted:
            self.swap(reloading.served, reloading.ready)

    def new_worker_answered(self, pid: int, ready: bool) -> None:
        """A worker of the reload under way became ready, or failed before it was."""
        reloading = self.reloading
        assert reloading is not None
        del reloading.starting[pid]
        if ready:
            reloading.ready.add(pid)
            self.advance_reload()
        else:
            reloading.ready.add(pid)  # killed with the others
            self.fail_reload(RuntimeError(f"new worker {pid} failed before it was ready"))

    def fail_reload(self, error: Exception) -> None:
        """The reload under way failed: its workers are killed, and the old ones go on serving."""
        reloading = self.reloading
        assert reloading is not None
        for starting in reloading.starting.values():
            if starting.ready_fd >= 0:
                os.close(starting.ready_fd)
        for pid in reloading.pids():
            self.signal_worker(pid, signal.SIGKILL)
        self.reloading = None
        self.status.reload_failures += 1
        self.status.last_reload_error = public_error(error)
        self.write_status()
        log.error("reload failed; still serving snapshot %s: %s", self.served.store.name, error)
        self.after_reload()

    def swap(self, served: Served, new: set[int]) -> None:
        """The new workers are all ready: they serve, and the old ones drain and stop."""
        old = self.live | set(self.starting)
        for starting in self.starting.values():
            if starting.ready_fd >= 0:
                os.close(starting.ready_fd)
        self.starting.clear()
        self.live = set(new)
        self.served = served
        self.loaded = (served.directory, served.signature)
        self.reloading = None
        for pid in old:
            self.signal_worker(pid, signal.SIGTERM)
        self.status.reloads += 1
        self.status.last_reload_error = None
        self.status.problem = None
        self.status.snapshot = served.store.name
        self.status.load_seconds = round(served.store.load_seconds, 3)
        self.write_status()
        log.info("reloaded: serving snapshot %s (loaded in %.2f s)", served.store.name, served.store.load_seconds)
        self.after_reload()

    def after_reload(self) -> None:
        if self.reload_again is not None:
            why, self.reload_again = self.reload_again, None
            self.reload(why)


@contextlib.contextmanager
def index_locks_held(served: Served) -> Iterator[None]:
    """The index's meta locks taken by the master while it forks a worker.

    tantivy takes an flock on ``.tantivy-meta.lock`` from threads of its own and lets go of it by
    closing the file: a worker forked while such a thread holds it would share that open file,
    and hold the lock for as long as it lives (and then a process opening the index waits for
    ever). Taking the lock first waits for any such thread to finish; the worker shares the
    master's lock instead, which the master's unlock releases for both."""
    held = []
    try:
        for path in served.search.lock_files:
            with contextlib.suppress(OSError):  # no lock file: nothing to hold
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                held.append(fd)
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def settled(directory: Path) -> bool:
    """Whether a snapshot directory looks complete: its manifest reads, and every file it lists
    is there at its full size (the load then checks every digest)."""
    try:
        manifest = msgspec.json.decode((directory / "manifest.json").read_bytes(), type=Manifest)
        return all((directory / name).stat().st_size == entry.size for name, entry in manifest.files.items())
    except (OSError, msgspec.DecodeError):
        return False


def public_error(error: Exception) -> str:
    """What /readyz may say of a failed load: no filesystem path, no traceback."""
    if isinstance(error, SnapshotError):
        return error.summary()
    if isinstance(error, OSError):
        return f"{type(error).__name__}: {error.strerror or 'operating system error'}"
    return f"{type(error).__name__}: {error}"


def serve(snapshot: Path, settings: Settings, host: str, port: int, **options: object) -> int:
    return Supervisor(snapshot, settings, host, port, **options).run()  # type: ignore[arg-type]
