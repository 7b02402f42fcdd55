"""Accepting connections: every pending connection at once, whatever the event loop.

uvloop (libuv) accepts about one connection per turn of the event loop. A worker busy with a
thousand open connections then takes seconds to accept the next thousand: with thousands of
keep-alive clients on one core, some waited many seconds while the rest were served (asyncio's
own loop, which accepts a batch at a time, showed no such tail). So docsrv
accepts for itself: when the listening socket is readable, it takes every connection the
kernel holds, and hands each to the loop as an accepted socket.

Out of file descriptors, ``accept`` fails at once and the socket stays readable: a loop that
tried again on the next turn would spin and log without end. The acceptor stops listening for
ACCEPT_PAUSE_SECONDS instead, logs at most one line a second (with how many failures it did not
log), and takes new clients again as soon as descriptors free up.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

log = logging.getLogger("docsrv")

#: Errors of ``accept`` that mean "nothing more now" or "this one went away".
_RETRY_LATER = (BlockingIOError, InterruptedError, ConnectionAbortedError)
#: Errors of ``accept`` that mean "no resources for another connection now".
_EXHAUSTED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_PAUSE_SECONDS = 0.1
LOG_EVERY_SECONDS = 1.0


class Acceptor:
    def __init__(self, sock: socket.socket, protocol_factory: Callable[[], asyncio.Protocol], batch: int) -> None:
        self.sock = sock
        self.protocol_factory = protocol_factory
        self.batch = batch
        self.loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task] = set()
        self._stopped = False
        self._resume: asyncio.TimerHandle | None = None
        self._logged_at = -LOG_EVERY_SECONDS
        self._unlogged = 0

    def start(self) -> None:
        self._stopped = False
        self.loop.add_reader(self.sock.fileno(), self._accept_pending)

    def stop(self) -> None:
        """Accept no more; the connections already accepted carry on."""
        self._stopped = True
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        self.loop.remove_reader(self.sock.fileno())

    async def settled(self) -> None:
        """Wait until every connection accepted has its protocol: the loop makes it a turn or more
        after the accept, and a server that drained before then would close it unanswered."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _pause(self, error: OSError) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self._resume = self.loop.call_later(ACCEPT_PAUSE_SECONDS, self._resume_accepting)
        now = self.loop.time()
        if now - self._logged_at >= LOG_EVERY_SECONDS:
            more = f" ({self._unlogged} more since the last line)" if self._unlogged else ""
            log.warning("cannot accept connections: %s; pausing %.1f s%s", error.strerror, ACCEPT_PAUSE_SECONDS, more)
            self._logged_at = now
            self._unlogged = 0
        else:
            self._unlogged += 1

    def _resume_accepting(self) -> None:
        self._resume = None
        if not self._stopped:
            self.loop.add_reader(self.sock.fileno(), self._accept_pending)

    def _accept_pending(self) -> None:
        for _ in range(self.batch):
            try:
                conn, _address = self.sock.accept()
            except _RETRY_LATER:
                return
            except OSError as error:
                if error.errno in _EXHAUSTED:
                    self._pause(error)
                    return
                raise
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self.loop.create_task(self.loop.connect_accepted_socket(self.protocol_factory, conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
