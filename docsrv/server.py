"""Running docsrv: load a snapshot, listen, answer until told to stop."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web

from .api.app import init_server
from .api.state import ApiState, Health, Live
from .config import Settings
from .search import open_index
from .store import Store, load_store

log = logging.getLogger("docsrv")

DEMO_SNAPSHOT = Path(__file__).resolve().parent.parent / "snapshots" / "demo"

#: Limits for hostile clients: the longest request line and header the parser accepts.
SERVER_LIMITS = {
    "max_line_size": 8190,
    "max_field_size": 8190,
    "max_headers": 100,
    "keepalive_timeout": 15.0,
    "access_log": None,
}


def make_live(store: Store, settings: Settings) -> Live:
    return Live(ApiState(store, open_index(store), settings, Health()))


async def start(live: Live, host: str, port: int, *, sock: socket.socket | None = None) -> web.ServerRunner:
    server = init_server(live, **SERVER_LIMITS)
    runner = web.ServerRunner(server, handle_signals=False)
    await runner.setup()
    site = web.SockSite(runner, sock) if sock is not None else web.TCPSite(runner, host, port, reuse_port=True)
    await site.start()
    return runner


@asynccontextmanager
async def running_server(snapshot: str | Path, settings: Settings | None = None) -> AsyncIterator[str]:
    """A real server on a free loopback port for the duration of the block; yields its base URL."""
    live = make_live(load_store(snapshot, progress=False), settings or Settings())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    runner = await start(live, "127.0.0.1", port, sock=sock)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def serve_forever(store: Store, settings: Settings, host: str, port: int) -> None:
    live = make_live(store, settings)
    runner = await start(live, host, port)
    counts = ", ".join(f"{n} {kind}" for kind, n in store.counts.items())
    log.info(
        "serving snapshot %s on http://%s:%d (%s; loaded in %.2f s)", store.name, host, port, counts, store.load_seconds
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("stopping: finishing requests in flight")
    await runner.cleanup()


def serve(snapshot: str | Path, settings: Settings, host: str, port: int) -> None:
    store = load_store(snapshot)
    run(serve_forever(store, settings, host, port))


def run(main) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        asyncio.run(main)
    else:
        uvloop.run(main)
