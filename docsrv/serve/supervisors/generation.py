"""A generation: one snapshot, loaded in a process of its own, from which its workers are forked.

The master never loads a snapshot. For each one it forks a generation process, which loads it
(``serve.served.load_served``), tells the master what it loaded (a ``Loaded``, or why it could not),
and then waits on its control socket. Asked for a worker, it forks one through a short-lived
middle process, so that the worker is left to the master (a child subreaper: ``PR_SET_CHILD_SUBREAPER``)
and is the master's child like any other: the master waits for it, signals it and reaps it as
before; the worker's ready socket (a socket pair's end: ``serve.worker.told_to_accept``) is passed to
the master with the worker's pid (``SCM_RIGHTS``).

What that buys:
- Memory comes back. A generation that is replaced exits (its socket is closed), and when its
  last worker has drained, every page of its snapshot is returned to the system: nothing of it
  stays behind in a long-lived process, however many reloads there are.
- The master stays small and never blocks: it loads nothing, holds no index open, and so is
  free to answer /healthz while the first snapshot loads (``loading.py``).
- No thread loads while another forks: the generation loads in its main thread, then forks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from ...snapshot.errors import SnapshotError
from ...utils.processes import die_with_parent, name_process
from ..following import caught_up
from ..served import Handover, Signature, load_served

log = logging.getLogger("docsrv")

#: What ``ps -o comm`` (and /proc/PID/comm) shows of each docsrv process.
MASTER_NAME, GENERATION_NAME, WORKER_NAME = "docsrv-master", "docsrv-snapshot", "docsrv-worker"
#: The longest a forked worker waits to be left to the master before it gives up.
ADOPTION_SECONDS = 5.0
#: A pid, or the length of a report, as sent over the control socket.
_PID = struct.Struct("=i")


class Loaded(msgspec.Struct, frozen=True):
    """What the master keeps of a loaded snapshot: enough to report it and to watch its files."""

    name: str
    directory: str
    signature: Signature
    counts: dict[str, int]
    load_seconds: float
    #: Whether the load trusted a record of an earlier check (the snapshot was prepared).
    trusted: bool


class LoadFailed(Exception):
    """A generation could not load its snapshot. ``str()`` is what the log says; ``public`` what
    /readyz may say (no path, no traceback)."""

    def __init__(self, message: str, public: str) -> None:
        super().__init__(message)
        self.public = public


class Report(msgspec.Struct, frozen=True):
    """A generation's one message after its load."""

    loaded: Loaded | None = None
    error: str | None = None
    public: str | None = None


#: How long a generation has to fork a worker and send back its pid and ready socket (it takes
#: milliseconds). The master waits on nothing else while it does.
SPAWN_SECONDS = 5.0


class Generation:
    """The master's handle on a generation process."""

    def __init__(self, directory: Path, pid: int, control: socket.socket) -> None:
        self.directory = directory
        self.pid = pid
        self.control = control
        self.loaded: Loaded | None = None
        self.error: LoadFailed | None = None

    @classmethod
    def start(
        cls, directory: Path, before_load: Callable[[], None], worker: Callable[[Handover, int], None], chain: Path | None = None
    ) -> Generation:
        """Fork a generation loading ``directory``, with the changesets in ``chain`` that follow it
        applied (``serve.following.caught_up``). In it, ``before_load`` runs first (closing what the
        master holds that it must not keep); each worker it forks runs ``worker(handover,
        ready_fd)`` (``serve.served.Handover``), and it exits when its control socket closes."""
        master_end, generation_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid:
            generation_end.close()
            return cls(directory, pid, master_end)
        code = 1
        try:
            master_end.close()
            before_load()
            code = run_generation(directory, generation_end, worker, chain)
        except BaseException:
            log.exception("generation %d failed", os.getpid())
        finally:
            os._exit(code)

    @property
    def loading(self) -> bool:
        return self.loaded is None and self.error is None

    def fileno(self) -> int:
        return self.control.fileno()

    def receive_report(self) -> None:
        """Read the generation's report (its socket is readable): ``loaded`` or ``error`` is set."""
        data = b""
        with contextlib.suppress(OSError):
            self.control.setblocking(True)
            size = _PID.unpack(recv_exactly(self.control, _PID.size))[0]
            data = recv_exactly(self.control, size)
        try:
            report = msgspec.msgpack.decode(data, type=Report)
        except msgspec.DecodeError:
            report = Report(error="the generation exited before it reported its load", public="the load process exited")
        if report.loaded is not None:
            self.loaded = report.loaded
        else:
            self.error = LoadFailed(report.error or "unknown", report.public or "unknown")

    def spawn(self) -> tuple[int, int]:
        """Ask for a worker: its pid (a child of the master's from now on) and its ready socket.
        OSError when the generation is gone, or does not answer within SPAWN_SECONDS (stopped or
        hung): then it is let go of, so that the master never waits on it again (it exits when
        it runs and finds its socket closed, and the master loads the snapshot anew)."""
        self.control.settimeout(SPAWN_SECONDS)
        try:
            self.control.sendall(b"F")
            data, fds, _flags, _address = socket.recv_fds(self.control, _PID.size, 1)
        except TimeoutError:
            self.close()
            raise ConnectionError(f"generation {self.pid} did not fork a worker within {SPAWN_SECONDS:g} s") from None
        if len(data) != _PID.size or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise ConnectionError(f"generation {self.pid} did not fork a worker")
        return _PID.unpack(data)[0], fds[0]

    def close(self) -> None:
        """Let the generation go: it exits once its control socket closes (its workers do not)."""
        with contextlib.suppress(OSError):
            self.control.close()


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def send_report(control: socket.socket, report: Report) -> None:
    data = msgspec.msgpack.encode(report)
    control.sendall(_PID.pack(len(data)) + data)


def run_generation(directory: Path, control: socket.socket, worker: Callable[[Handover, int], None], chain: Path | None = None) -> int:
    """The generation process: load, report, then fork workers on request until told to go."""
    master = os.getppid()
    name_process(GENERATION_NAME)
    die_with_parent(signal.SIGKILL)  # never outlive the master
    if os.getppid() != master:
        return 1
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        handover = Handover(caught_up(load_served(directory), chain))
    except Exception as error:  # a bad snapshot of any kind: the master reports it
        send_report(control, Report(error=str(error), public=public_error(error)))
        return 1
    send_report(control, Report(loaded(handover)))
    while True:
        try:
            asked = control.recv(1)
        except InterruptedError:
            continue
        if asked != b"F" or let_go(control):
            return 0
        pid, ready_fd = fork_worker(handover, master, worker, control)
        try:
            socket.send_fds(control, [_PID.pack(pid)], [ready_fd])
        except OSError:  # the master let go meanwhile: the worker would serve unsupervised
            os.kill(pid, signal.SIGKILL)
            return 0
        finally:
            os.close(ready_fd)


def loaded(handover: Handover) -> Loaded:
    """What the master is told of the state the generation loaded."""
    served = handover.peek()
    store = served.store
    return Loaded(store.name, str(served.directory), served.signature, store.counts, store.load_seconds, store.trusted)


def let_go(control: socket.socket) -> bool:
    """Whether the master has closed its end of ``control``. A request read after that was sent
    before the master gave up waiting (this process was stopped, or slow): a worker forked for it
    would serve beside the master's own, unsupervised, and be killed unknown to it, its
    connections dropped."""
    try:
        return control.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False


def fork_worker(handover: Handover, master: int, worker: Callable[[Handover, int], None], control: socket.socket) -> tuple[int, int]:
    """Fork a worker through a middle process that exits at once: the worker is left to the master."""
    master_end, worker_end = (end.detach() for end in socket.socketpair())
    pid_read, pid_write = os.pipe()
    middle = os.fork()
    if middle == 0:
        code = 1
        try:
            os.close(master_end)
            os.close(pid_read)
            pid = os.fork()
            if pid == 0:
                os.close(pid_write)
                control.close()
                name_process(WORKER_NAME)
                wait_for_adoption(master)
                worker(handover, worker_end)
                code = 0
            else:
                os.write(pid_write, _PID.pack(pid))
                code = 0
        except BaseException:
            log.exception("forking a worker failed")
        finally:
            os._exit(code)
    os.close(worker_end)
    os.close(pid_write)
    with os.fdopen(pid_read, "rb") as said:
        data = said.read(_PID.size)
    os.waitpid(middle, 0)
    if len(data) != _PID.size:
        os.close(master_end)
        raise ChildProcessError("the worker's middle process exited without a worker")
    return _PID.unpack(data)[0], master_end


def wait_for_adoption(master: int) -> None:
    """Wait until the middle process has exited and the master is this worker's parent: its
    death signal (set later) must be the master's, not the middle process's."""
    deadline = time.monotonic() + ADOPTION_SECONDS
    while os.getppid() != master:
        if time.monotonic() > deadline:
            os._exit(1)
        time.sleep(0.001)


def public_error(error: Exception) -> str:
    """What /readyz may say of a failed load: no filesystem path, no traceback."""
    if isinstance(error, LoadFailed):
        return error.public
    if isinstance(error, SnapshotError):
        return error.summary()
    if isinstance(error, OSError):
        return f"{type(error).__name__}: {error.strerror or 'operating system error'}"
    return f"{type(error).__name__}: {error}"
