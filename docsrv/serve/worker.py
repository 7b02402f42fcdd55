"""One serving process: the aiohttp server over a loaded snapshot, until told to stop.

``serve_worker`` is what each worker forked by the supervisor runs; ``running_server`` starts
the same server inside the calling process, for tools and tests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import socket
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from ..api.app import init_server, serve_state
from ..api.state import ApiState
from ..config import Settings
from ..errors import StartError
from ..http.accept import Acceptor
from ..http.limits import SERVER_LIMITS
from ..observe.runtime import Runtime
from ..utils import held_calls, processes
from .following import Follower, caught_up
from .served import Handover

log = logging.getLogger("docsrv")

#: The bundled demo snapshot: ``snapshots/demo``, installed with the package (``docsrv/demo`` links to it).
DEMO_SNAPSHOT = Path(__file__).resolve().parent.parent / "demo"

#: Connections the kernel may queue before a worker accepts them (capped by net.core.somaxconn):
#: thousands of clients connecting at once must not be refused.
LISTEN_BACKLOG = 4096
#: What a starting worker says when it is ready, and what the master answers when it may accept.
READY, ACCEPT = b"R", b"A"
#: How long a stopping worker lets requests in flight finish.
DRAIN_SECONDS = 20.0
#: How long a stopping worker keeps its keep-alive connections open, once it no longer accepts:
#: a client's next request on one is answered (with ``Connection: close``), so reloads drop no
#: request of a busy client; a connection idle that long is closed.
IDLE_GRACE_SECONDS = 2.0


class Listening:
    """A server answering on a socket, until ``close`` drains it."""

    def __init__(self, state: ApiState, server: web.Server, runner: web.ServerRunner, acceptor: Acceptor) -> None:
        self.state = state
        self.server = server
        self.runner = runner
        self.acceptor = acceptor

    def serve(self, state: ApiState) -> None:
        """Answer every request that begins from now on from ``state`` (a changeset applied:
        ``serve/following.py``); those under way finish with the state they began with."""
        state.draining, state.problem = self.state.draining, self.state.problem
        self.state = state
        serve_state(self.server, state)

    async def close(self, grace: float = IDLE_GRACE_SECONDS) -> None:
        """Accept no more; answer what comes on open connections with ``Connection: close`` for
        ``grace`` seconds (or until every client has gone); then close idle connections and let
        requests in flight finish."""
        self.acceptor.stop()
        await self.acceptor.settled()
        self.state.draining = True
        deadline = asyncio.get_running_loop().time() + grace
        while self.server.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        await self.runner.cleanup()


async def start(state: ApiState, sock: socket.socket, accepting: bool = True) -> Listening:
    """A server of ``state`` on ``sock``, accepting connections unless told not to yet (then
    ``Listening.acceptor.start`` begins)."""
    sys.setswitchinterval(held_calls.GIL_SWITCH_SECONDS)
    server = init_server(state, **SERVER_LIMITS, keepalive_timeout=state.settings.keepalive_timeout)
    runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=DRAIN_SECONDS)
    await runner.setup()
    acceptor = Acceptor(sock, server, LISTEN_BACKLOG)
    if accepting:
        acceptor.start()
    return Listening(state, server, runner, acceptor)


def raise_fd_limit() -> int:
    """Raise the soft limit on open files to the hard one (every client is a descriptor); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def listening_socket(host: str, port: int) -> socket.socket:
    """The one listening socket of a server; its workers inherit it. No SO_REUSEPORT: a second
    server on a port that one serves must fail, not split the traffic between two snapshots."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT only, never beside a listener
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise StartError(f"cannot listen on {host}:{port}: {error.strerror} (is another server running there?)") from None
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def die_with_parent(parent: int) -> None:
    """Ask the kernel to send SIGTERM when the parent (the master) dies: a worker never outlives it.
    If the master is already gone, stop now."""
    processes.die_with_parent(signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


async def serve_worker(
    handover: Handover, settings: Settings, sock: socket.socket, runtime: Runtime, ready_fd: int, master: int, chain: Path | None = None
) -> None:
    """Serve the state ``handover`` holds (taken from it: ``Handover``) on ``sock`` until SIGTERM
    or SIGINT, or until the master is gone; then drain and return. With ``chain``, follow the
    changesets there (``serve/following.py``): those that came since the generation forked it
    are applied before it accepts a connection (a worker that replaces one that died serves the
    state its peers serve)."""
    served = caught_up(handover.take(), chain)
    state = ApiState(served.store, served.search, settings, runtime)
    del served  # what serves is the listening's state: one the follower replaces is let go of
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    die_with_parent(master)
    listening = await start(state, sock, accepting=False)
    del state
    runtime.beat()
    if not await told_to_accept(ready_fd):
        return
    listening.acceptor.start()
    ticker = asyncio.create_task(every_second(runtime, master, stop))
    follower = asyncio.create_task(Follower(chain, listening).run()) if chain is not None else None
    await stop.wait()
    if follower is not None:
        follower.cancel()
    await listening.close()  # beating on while it drains: the master kills a worker that stops
    ticker.cancel()
    runtime.metrics.flush()
    sys.stdout.flush()


async def told_to_accept(ready_fd: int) -> bool:
    """Say on ``ready_fd`` (a socket the master holds the other end of) that this worker is ready,
    then wait until the master says to accept: it stops accepting itself first, while no worker
    serves (``supervisors/loading.py``), so that no connection made after a worker answered is
    answered by the master's 503. False when the master has gone."""
    with socket.socket(fileno=ready_fd) as master:
        master.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(master, READY)
        try:
            return await loop.sock_recv(master, 1) == ACCEPT
        except OSError:
            return False


async def every_second(runtime: Runtime, master: int, stop: asyncio.Event) -> None:
    """Beat (the master kills a worker whose loop stops: ``--worker-timeout``); share this
    worker's counts; stop if the master has gone (where no death signal is sent)."""
    while True:
        await asyncio.sleep(1.0)
        runtime.beat()
        runtime.metrics.flush()
        if runtime.access_log:
            sys.stdout.flush()
        if os.getppid() != master:
            stop.set()


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine on uvloop where it is installed."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        asyncio.run(main)
    else:
        uvloop.run(main)
