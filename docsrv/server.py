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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web

from .api.app import init_server
from .api.state import ApiState
from .config import Settings
from .http.accept import Acceptor
from .http.offload import GIL_SWITCH_SECONDS
from .runtime import Runtime
from .search import load_served, open_index
from .store import Store

log = logging.getLogger("docsrv")

DEMO_SNAPSHOT = Path(__file__).resolve().parent.parent / "snapshots" / "demo"

#: Limits for hostile clients: the longest request line and header the parser takes, how
#: many headers, and how long an idle keep-alive connection is kept.
SERVER_LIMITS = {
    "max_line_size": 8190,
    "max_field_size": 8190,
    "max_headers": 100,
    "keepalive_timeout": 15.0,
    "access_log": None,
}
#: Connections the kernel may queue before a worker accepts them (capped by net.core.somaxconn):
#: thousands of clients connecting at once must not be refused.
LISTEN_BACKLOG = 4096
#: How long a stopping worker lets requests in flight finish.
DRAIN_SECONDS = 20.0
#: How long a stopping worker waits, once it no longer accepts, for requests on connections it
#: has just accepted.
ACCEPTED_GRACE_SECONDS = 0.5


class Listening:
    """A server answering on a socket: stop() accepts no more, close() drains and ends it."""

    def __init__(self, runner: web.ServerRunner, acceptor: Acceptor) -> None:
        self.runner = runner
        self.acceptor = acceptor

    def stop(self) -> None:
        self.acceptor.stop()

    async def close(self) -> None:
        """Stop accepting, let requests in flight finish, close idle keep-alive connections."""
        self.acceptor.stop()
        await self.runner.cleanup()


async def start(state: ApiState, sock: socket.socket) -> Listening:
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    server = init_server(state, **SERVER_LIMITS)
    runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=DRAIN_SECONDS)
    await runner.setup()
    acceptor = Acceptor(sock, server, LISTEN_BACKLOG)
    acceptor.start()
    return Listening(runner, acceptor)


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
    """A listening TCP socket with SO_REUSEPORT, so a second docsrv can take the port over."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if hasattr(socket, "SO_REUSEPORT"):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


@asynccontextmanager
async def running_server(snapshot: str | Path, settings: Settings | None = None) -> AsyncIterator[str]:
    """A real server on a free loopback port for the duration of the block; yields its base URL."""
    store, index_dir = load_served(snapshot, progress=False)
    state = ApiState(store, open_index(store, index_dir), settings or Settings(), Runtime())
    sock = listening_socket("127.0.0.1", 0)
    listening = await start(state, sock)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await listening.close()
        sock.close()


async def serve_worker(store: Store, index_dir: Path, settings: Settings, sock: socket.socket, runtime: Runtime, ready_fd: int) -> None:
    """Serve ``store`` on ``sock`` until SIGTERM or SIGINT; then drain and return."""
    state = ApiState(store, open_index(store, index_dir), settings, runtime)
    listening = await start(state, sock)
    os.write(ready_fd, b"R")
    os.close(ready_fd)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    flusher = asyncio.create_task(flush_every_second(runtime))
    await stop.wait()
    flusher.cancel()
    # Stop accepting first, then give connections just accepted a moment to send their request:
    # closing drops every connection that is idle, and one that was accepted a moment ago and
    # has not sent its request yet looks idle.
    listening.stop()
    await asyncio.sleep(ACCEPTED_GRACE_SECONDS)
    await listening.close()
    runtime.metrics.flush()
    sys.stdout.flush()


async def flush_every_second(runtime: Runtime) -> None:
    while True:
        await asyncio.sleep(1.0)
        runtime.metrics.flush()
        if runtime.access_log:
            sys.stdout.flush()


def run(main) -> None:
    """Run a coroutine on uvloop where it is installed."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        asyncio.run(main)
    else:
        uvloop.run(main)
