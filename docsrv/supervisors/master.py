"""The master process: load the snapshot once, fork the workers, keep them alive, reload, stop.

The master opens the one listening socket (before anything slow, so a port already served
fails at once), loads the snapshot with everything its workers will read (``serving.py``), and
forks the workers, which inherit both: the loaded objects are frozen out of the garbage
collector's reach before the fork, so the workers share their memory pages. A worker dies with
its master (a parent-death signal).

Its parts: the worker pool (``pool.py``), when to reload and a reload under way (``reloads.py``),
and what it tells the workers (``status.py``). Its loop never waits on any of them: it sleeps in
``select`` on the workers' ready pipes and on a wakeup pipe that every signal (``set_wakeup_fd``)
and the end of a load write to, and acts on what it finds. A reload forks a new set of workers on
the loaded snapshot; once they are all ready, the old ones are told to stop and finish what they
have (``server.Listening.close``). If the load or a new worker fails, the error is logged and
shown in ``/readyz`` and ``/metrics``, and the old workers go on serving.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import select
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from ..config import Settings
from ..metrics import retire
from ..runtime import Runtime
from ..search import META_LOCK
from ..server import DRAIN_SECONDS, listening_socket, raise_fd_limit, run, serve_worker
from ..serving import Served, load_served, resolve
from .pool import NoWorkers, WorkerPool
from .reloads import Reload, ReloadPolicy
from .status import StatusBoard
from .workers import READY_SECONDS, send

log = logging.getLogger("docsrv")

#: The longest the master's loop waits: it wakes at once on a signal (a wakeup pipe), a worker
#: becoming ready or a load ending, and at the end of a pause or of the interval between looks.
TICK_SECONDS = 1.0


class Master:
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
        self.pid = os.getpid()
        self.board = StatusBoard(self.run_dir, self.wanted)
        self.announced = False
        self._flags: set[str] = set()
        self.reloading: Reload | None = None
        #: Workers of an earlier snapshot, told to stop and not yet exited.
        self.draining: set[int] = set()
        #: Signals, and the end of a load, write to this pipe: the loop's select wakes on it.
        self.wake_read, self.wake_write = os.pipe()
        for fd in (self.wake_read, self.wake_write):
            os.set_blocking(fd, False)

    # The life of the master.

    def run(self) -> int:
        raise_fd_limit()
        self.sock = listening_socket(self.host, self.port)
        try:
            served = load_served(self.snapshot)
            self.pool = WorkerPool(served, self.wanted, self.fork, self.no_workers_timeout)
            self.policy = ReloadPolicy(self.snapshot, served, watch=self.watch)
            self.board.serving(served)
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
        pool = self.pool
        next_look = time.monotonic() + self.look_interval
        while "stop" not in self._flags:
            now = time.monotonic()
            until = min(next_look, pool.next_start) if pool.short() else next_look
            self.wait(min(TICK_SECONDS, max(0.0, until - now)))
            if "reap" in self._flags:
                self._flags.discard("reap")
                self.reap()
            pool.fill()
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

    def wait(self, timeout: float) -> None:
        """Wait for a worker to say it is ready, a signal or a load's end, at most ``timeout``."""
        pipes = {fd: (self.pool.current, pid) for fd, pid in self.pool.current.ready_pipes().items()}
        renewing = self.reloading.workers if self.reloading is not None else None
        if renewing is not None:
            pipes.update({fd: (renewing, pid) for fd, pid in renewing.ready_pipes().items()})
        try:
            readable, _, _ = select.select([self.wake_read, *pipes], [], [], timeout)
        except InterruptedError:
            return
        for fd in readable:
            if fd == self.wake_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(fd, 4096)
                continue
            workers, pid = pipes[fd]
            if workers is renewing and self.reloading is not None and pid in workers.starting:
                self.new_worker_answered(pid)
            elif workers is self.pool.current and pid in workers.starting and self.pool.answered(pid):
                self.board.workers(len(self.pool.live))
                self.announce()
            # else: let go of since the select (a swap or a failed reload closed its pipe)

    def announce(self) -> None:
        if self.announced or len(self.pool.live) < self.wanted:
            return
        self.announced = True
        store = self.pool.served.store
        address = self.sock.getsockname()
        counts = ", ".join(f"{n} {kind}" for kind, n in store.counts.items())
        log.info(
            "serving snapshot %s on http://%s:%d with %d worker(s) (%s; loaded in %.2f s%s)",
            store.name, address[0], address[1], len(self.pool.live), counts, store.load_seconds,
            "" if store.trusted else ", checked whole: not prepared",
        )

    def fork(self, served: Served) -> tuple[int, int]:
        """Fork a worker serving ``served``: its pid, and the pipe it will say it is ready on."""
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid:
            os.close(write_end)
            return pid, read_end
        # The worker.
        code = 1
        try:
            close_inherited_meta_locks()
            gc.enable()  # a load in the master's thread may have paused the collector
            signal.set_wakeup_fd(-1)
            os.close(read_end)
            for fd in (self.wake_read, self.wake_write):
                os.close(fd)
            self.pool.current.close_pipes()
            if self.reloading is not None and self.reloading.workers is not None:
                self.reloading.workers.close_pipes()
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            runtime = Runtime(self.run_dir, access_log=self.access_log)
            run(serve_worker(served, self.settings, self.sock, runtime, write_end, self.pid))
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
            if pid in self.draining:
                self.draining.discard(pid)
                self.board.draining(len(self.draining))
            elif self.reloading is not None and pid in self.reloading.pids():
                self.fail_reload(RuntimeError(f"new worker {pid} exited (status {status}) before the swap"))
            elif "stop" in self._flags:
                self.pool.current.forget(pid)
            elif self.pool.exited(pid, status):
                self.board.workers(len(self.pool.live))

    def stop_all(self) -> None:
        """Ask every worker to drain and stop; wait for them; kill what is left."""
        pids = (self.pool.current.pids() if hasattr(self, "pool") else set()) | (
            self.reloading.pids() if self.reloading is not None else set()
        ) | self.draining
        for pid in pids:
            send(pid, signal.SIGTERM)
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
            send(pid, signal.SIGKILL)

    # Reloading.

    def look(self) -> None:
        """Reload when the policy finds a settled snapshot other than the one served at the path."""
        if self.reloading is not None:
            return
        problem, wanted = self.policy.look()
        if problem is not None and self.board.problem(problem):
            log.warning("%s; reloading once they are complete", problem)
        if wanted is not None:
            self.reload(*wanted)

    def reload(self, why: str, directory: Path | None = None) -> None:
        """Start loading the snapshot in ``directory`` (by default, where the snapshot path points
        now: the directory that was looked at, not wherever a link flipped since points)."""
        if self.reloading is not None:
            log.info("reload asked (%s) while one is under way: it follows", why)
            self.policy.again = why
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
        new = reloading.loaded()
        now = time.monotonic()
        if not new.pids():
            for _ in range(self.wanted):
                pid, ready_fd = self.fork(new.served)
                new.started(pid, ready_fd, now)
            return
        if new.overdue(now):
            self.fail_reload(RuntimeError(f"a new worker did not become ready in {READY_SECONDS:.0f} s"))
        elif len(new.ready) == self.wanted:
            self.swap()

    def new_worker_answered(self, pid: int) -> None:
        """A worker of the reload under way said it is ready, or failed before it was."""
        assert self.reloading is not None and self.reloading.workers is not None
        if self.reloading.workers.answered(pid):
            self.advance_reload()
        else:
            self.fail_reload(RuntimeError(f"new worker {pid} failed before it was ready"))

    def fail_reload(self, error: Exception) -> None:
        """The reload under way failed: its workers are killed, and the old ones go on serving."""
        reloading = self.reloading
        assert reloading is not None
        if reloading.workers is not None:
            reloading.workers.close_pipes()
        for pid in reloading.pids():
            send(pid, signal.SIGKILL)
        self.reloading = None
        self.board.reload_failed(error)
        log.error("reload failed; still serving snapshot %s: %s", self.pool.served.store.name, error)
        self.after_reload()

    def swap(self) -> None:
        """The new workers are all ready: they serve, and the old ones drain and stop."""
        assert self.reloading is not None and self.reloading.workers is not None
        new = self.reloading.workers
        self.reloading = None
        old = self.pool.replace(new)
        for pid in old:
            send(pid, signal.SIGTERM)
        self.draining |= old
        self.policy.swapped(new.served)
        self.board.reloaded(new.served, len(new.ready), len(self.draining))
        store = new.served.store
        log.info("reloaded: serving snapshot %s (loaded in %.2f s)", store.name, store.load_seconds)
        self.after_reload()

    def after_reload(self) -> None:
        why = self.policy.queued()
        if why is not None:
            self.reload(why)


def close_inherited_meta_locks() -> None:
    """In a worker just forked, close every file it inherited open on a search index's
    ``.tantivy-meta.lock``.

    tantivy takes an flock on that file from threads of its own (opening an index takes it) and
    lets go of it by closing the file. A worker forked while such a thread holds it shares that
    open file, and with it the lock, for as long as it lives: the thread's close in the master no
    longer releases it, and the next process or thread to open that index waits for ever (a
    master whose reload had begun loading the next snapshot in its thread, forking a worker
    meanwhile, hung so). The worker has no such thread; its copies are closed at once, so the
    lock goes when the master's thread lets go."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
            if os.readlink(f"/proc/self/fd/{name}").removesuffix(" (deleted)").endswith(f"/{META_LOCK}"):
                os.close(int(name))


def serve(snapshot: Path, settings: Settings, host: str, port: int, **options: object) -> int:
    return Master(snapshot, settings, host, port, **options).run()  # type: ignore[arg-type]
