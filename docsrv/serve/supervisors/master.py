"""The master process: hold the port, start a generation for each snapshot, keep its workers
alive, reload, stop.

The master opens the one listening socket (before anything slow, so a port already served
fails at once) and never loads a snapshot itself: each snapshot is loaded by a generation
process of its own (``generation.py``), which forks the workers on request; the workers are
left to the master, which supervises them as its children. While no worker serves (the first
load, or every worker gone), the master answers on the port itself: ``/healthz`` 200 and
everything else 503 (``loading.py``). Workers die with their master (a parent-death signal).

Its parts: the worker pool (``pool.py``), when to reload and a reload under way (``reloads.py``),
and what it tells the workers (``status.py``). Its loop never waits on any of them: it sleeps in
``select`` on the workers' ready sockets, the generations' control sockets and a wakeup pipe that
every signal (``set_wakeup_fd``) writes to, and acts on what it finds. A reload starts a new
generation; once its workers are all ready, the old ones are told to stop and finish what they
have (``serve.worker.Listening.close``), and the old generation is let go: when its last worker exits,
all the memory of its snapshot is given back. If the load or a new worker fails, the error is
logged and shown in ``/readyz`` and ``/metrics``, and the old workers go on serving.
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

from ...config import Settings
from ...errors import StartError
from ...observe.metrics import retire
from ...observe.runtime import Runtime, heartbeat_path
from ...search.index_files import META_LOCK, sweep_links
from ...utils.processes import become_subreaper, name_process
from ..following import chain_directory
from ..served import Handover, resolve
from ..worker import DRAIN_SECONDS, listening_socket, raise_fd_limit, run, serve_worker
from .generation import MASTER_NAME, Generation
from .loading import LoadingResponder
from .pool import NoWorkers, WorkerPool
from .reloads import Reload, ReloadPolicy
from .status import StatusBoard
from .workers import READY_SECONDS, send

log = logging.getLogger("docsrv")

#: The longest the master's loop waits: it wakes at once on a signal (a wakeup pipe), a worker
#: becoming ready or a load ending, and at the end of a pause or of the interval between looks.
TICK_SECONDS = 1.0
#: How often the master removes the directories of links left by workers killed while they
#: opened a search index (``search.index_files.sweep_links``).
SWEEP_SECONDS = 60.0


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
        worker_timeout: float = 30.0,
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
        self.worker_timeout = worker_timeout
        #: Where the changesets that follow the snapshot are, when the server follows them.
        self.chain = chain_directory(snapshot) if self.watch else None
        self.run_dir = Path(tempfile.mkdtemp(prefix="docsrv-run-"))
        self.pid = os.getpid()
        self.board = StatusBoard(self.run_dir, self.wanted)
        self.announced = False
        self._flags: set[str] = set()
        self.reloading: Reload | None = None
        #: Every generation process not yet exited: the one serving, a reload's, and ones let go of.
        self.generations: list[Generation] = []
        #: The first generation, until it has loaded; then the pool of workers serving.
        self.first: Generation | None = None
        self.pool: WorkerPool | None = None
        #: Workers of an earlier snapshot, told to stop and not yet exited.
        self.draining: set[int] = set()
        #: Signals write to this pipe: the loop's select wakes on it.
        self.wake_read, self.wake_write = os.pipe()
        for fd in (self.wake_read, self.wake_write):
            os.set_blocking(fd, False)

    # The life of the master.

    def run(self) -> int:
        raise_fd_limit()
        try:
            self.sock = listening_socket(self.host, self.port)
        except BaseException:
            shutil.rmtree(self.run_dir, ignore_errors=True)  # a failed start leaves nothing behind
            raise
        name_process(MASTER_NAME)
        become_subreaper()
        self.responder = LoadingResponder(self.sock)
        try:
            self.first = self.generation(resolve(self.snapshot))
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
            self.responder.close()
            self.sock.close()
            self.stop_all()
            shutil.rmtree(self.run_dir, ignore_errors=True)
            for fd in (self.wake_read, self.wake_write):
                os.close(fd)

    def generation(self, directory: Path) -> Generation:
        """Start a generation loading the snapshot in ``directory``."""
        self.generations.append(Generation.start(directory, self.in_generation, self.serve_in_worker, self.chain))
        return self.generations[-1]

    def first_loaded(self) -> None:
        """The first generation reported: serve it, or stop with its error (exit 1, as a bad
        snapshot at start always has)."""
        first = self.first
        assert first is not None
        if first.error is not None:
            raise StartError(str(first.error))
        assert first.loaded is not None
        self.first = None
        self.pool = WorkerPool(first, self.wanted, Generation.spawn, self.no_workers_timeout)
        self.policy = ReloadPolicy(self.snapshot, first.loaded, watch=self.watch)
        self.board.serving(first.loaded)
        self.responder.waiting_for = "workers are starting"

    def loop(self) -> None:
        next_look = time.monotonic() + self.look_interval
        next_sweep = time.monotonic()
        while "stop" not in self._flags:
            now = time.monotonic()
            pool = self.pool
            until = min(next_look, pool.next_start) if pool is not None and pool.short() else next_look
            self.wait(min(TICK_SECONDS, max(0.0, until - now)))
            if "reap" in self._flags:
                self._flags.discard("reap")
                self.reap()
            if self.first is not None:
                if not self.first.loading:
                    self.first_loaded()
                continue
            assert self.pool is not None
            self.kill_silent_workers()
            self.pool.fill()
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + SWEEP_SECONDS
                sweep_links()
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
        """Wait for a worker to say it is ready, a generation to report its load, a signal or a
        request while no worker serves, at most ``timeout``."""
        pipes = {}
        if self.pool is not None:
            pipes = {fd: (self.pool.current, pid) for fd, pid in self.pool.current.ready_sockets().items()}
        renewing = self.reloading.workers if self.reloading is not None else None
        if renewing is not None:
            pipes.update({fd: (renewing, pid) for fd, pid in renewing.ready_sockets().items()})
        loading = {g.fileno(): g for g in (self.first, self.reloading.generation if self.reloading else None) if g and g.loading}
        # Once a worker serves, the master accepts no more, but still answers what it accepted:
        # dropping a connection whose head had not yet arrived would reset a client for nothing.
        self.responder.expire()
        answering = self.responder.readable(accepting=self.accepting())
        try:
            readable, _, _ = select.select([self.wake_read, *pipes, *loading, *answering], [], [], timeout)
        except InterruptedError:
            return
        for fd in readable:
            if fd == self.wake_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(fd, 4096)
            elif fd in loading:
                loading[fd].receive_report()
            elif fd in pipes:
                workers, pid = pipes[fd]
                if workers is renewing and self.reloading is not None and pid in workers.starting:
                    self.new_worker_answered(pid)
                elif self.pool is not None and workers is self.pool.current and pid in workers.starting and self.pool.answered(pid):
                    self.board.workers(len(self.pool.live))
                    self.announce()
                # else: let go of since the select (a swap or a failed reload closed its socket)
            elif fd in answering:
                self.responder.handle(fd, accepting=self.accepting())  # not once a worker read above was told to accept

    def accepting(self) -> bool:
        """Whether the master accepts connections itself: while no worker serves."""
        return self.pool is None or not self.pool.live

    def announce(self) -> None:
        assert self.pool is not None
        if self.announced or len(self.pool.live) < self.wanted:
            return
        self.announced = True
        loaded = self.pool.generation.loaded
        assert loaded is not None
        address = self.sock.getsockname()
        counts = ", ".join(f"{n} {kind}" for kind, n in loaded.counts.items())
        log.info(
            "serving snapshot %s on http://%s:%d with %d worker(s) (%s; loaded in %.2f s%s)",
            loaded.name, address[0], address[1], len(self.pool.live), counts, loaded.load_seconds,
            "" if loaded.trusted else ", checked whole: not prepared",
        )

    def in_generation(self) -> None:
        """In a generation process just forked: let go of what only the master may hold."""
        signal.set_wakeup_fd(-1)
        for fd in (self.wake_read, self.wake_write):
            os.close(fd)
        self.responder.close()
        for generation in self.generations:  # every other one's socket: each must see EOF when the master lets go
            generation.close()
        for workers in (self.pool.current if self.pool else None, self.reloading.workers if self.reloading else None):
            if workers is not None:
                workers.close_sockets()

    def serve_in_worker(self, handover: Handover, ready_fd: int) -> None:
        """A worker, forked by a generation and left to the master: serve until told to stop."""
        code = 1
        try:
            close_inherited_meta_locks()
            gc.enable()
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            runtime = Runtime(self.run_dir, access_log=self.access_log)
            run(serve_worker(handover, self.settings, self.sock, runtime, ready_fd, self.pid, self.chain))
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
            generation = next((g for g in self.generations if g.pid == pid), None)
            if generation is not None:
                self.generation_exited(generation, status)
                continue
            retire(self.run_dir, pid)
            heartbeat_path(self.run_dir, pid).unlink(missing_ok=True)
            if pid in self.draining:
                self.draining.discard(pid)
                self.board.draining(len(self.draining))
            elif self.reloading is not None and pid in self.reloading.pids():
                self.fail_reload(RuntimeError(f"new worker {pid} exited (status {status}) before the swap"))
            elif self.pool is None:
                continue
            elif "stop" in self._flags:
                self.pool.current.forget(pid)
            elif self.pool.exited(pid, status):
                self.board.workers(len(self.pool.live))

    def kill_silent_workers(self) -> None:
        """Kill every ready or draining worker whose event loop has not beaten for
        ``worker_timeout`` seconds (gunicorn's arbiter does the same): its requests, and those
        queued behind them, would wait for ever. The pool replaces it as any worker that exits."""
        assert self.pool is not None
        now = time.time()
        for pid in self.pool.live | self.draining:
            try:
                silent = now - os.stat(heartbeat_path(self.run_dir, pid)).st_mtime
            except OSError:
                continue
            if silent > self.worker_timeout:
                log.error("worker %d has not run its event loop for %.0f s (--worker-timeout %g); killing it", pid, silent,
                          self.worker_timeout)
                heartbeat_path(self.run_dir, pid).unlink(missing_ok=True)
                send(pid, signal.SIGKILL)

    def generation_exited(self, generation: Generation, status: int) -> None:
        """A generation process exited: let go of it. The one serving exits only if something
        killed it: its snapshot is loaded anew, as on SIGHUP, so that workers can be replaced."""
        self.generations.remove(generation)
        generation.close()
        if self.pool is not None and generation is self.pool.generation and "stop" not in self._flags:
            log.error("the process holding snapshot %s exited (status %d); loading it anew", generation.directory, status)
            self.reload("its generation process exited", generation.directory)

    def stop_all(self) -> None:
        """Ask every worker to drain and stop; let every generation go; wait for them; kill what is left."""
        pids = (self.pool.current.pids() if self.pool is not None else set()) | (
            self.reloading.pids() if self.reloading is not None else set()
        ) | self.draining
        for pid in pids:
            send(pid, signal.SIGTERM)
        for generation in self.generations:  # a generation serves no request: it stops at once, loading or not
            generation.close()
            send(generation.pid, signal.SIGKILL)  # it holds nothing to finish
            pids.add(generation.pid)
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
        self.reloading = Reload(why, self.generation(resolve(directory or self.snapshot)))

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
            try:
                for _ in range(self.wanted):
                    pid, ready_fd = new.generation.spawn()
                    new.started(pid, ready_fd, now)
            except OSError as error:
                self.fail_reload(RuntimeError(f"the new snapshot's process could not fork a worker: {error}"))
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
            reloading.workers.close_sockets()
        for pid in reloading.pids():
            send(pid, signal.SIGKILL)
        reloading.generation.close()
        self.reloading = None
        self.board.reload_failed(error)
        assert self.pool is not None and self.pool.generation.loaded is not None
        log.error("reload failed; still serving snapshot %s: %s", self.pool.generation.loaded.name, error)
        self.after_reload()

    def swap(self) -> None:
        """The new workers are all ready: they serve, and the old ones drain and stop."""
        assert self.reloading is not None and self.reloading.workers is not None
        new = self.reloading.workers
        self.reloading = None
        assert self.pool is not None and new.generation.loaded is not None
        old_generation = self.pool.generation
        old = self.pool.replace(new)
        old_generation.close()  # it exits; its memory goes with its last draining worker
        for pid in old:
            send(pid, signal.SIGTERM)
        self.draining |= old
        loaded = new.generation.loaded
        self.policy.swapped(loaded)
        self.board.reloaded(loaded, len(new.ready), len(self.draining))
        log.info("reloaded: serving snapshot %s (loaded in %.2f s)", loaded.name, loaded.load_seconds)
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
    open file, and with it the lock, for as long as it lives: the thread's close in its parent no
    longer releases it, and the next process or thread to open that index waits for ever (a
    master that loaded the next snapshot in a thread while it forked workers hung so). A
    generation loads before it forks, and opens the index through links of its own, but a worker
    still closes any such copy at once: it never needs one."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
            if os.readlink(f"/proc/self/fd/{name}").removesuffix(" (deleted)").endswith(f"/{META_LOCK}"):
                os.close(int(name))


def serve(snapshot: Path, settings: Settings, host: str, port: int, **options: object) -> int:
    return Master(snapshot, settings, host, port, **options).run()  # type: ignore[arg-type]
