"""Accepting connections: every pending connection at once, whatever the event loop.

uvloop (libuv) accepts about one connection per turn of the event loop. A worker busy with a
thousand open connections then takes seconds to accept the next thousand: measured with
2,000 keep-alive clients on one core, some waited past 10 s while the rest were served
(asyncio's own loop, which accepts a batch at a time, showed no such tail). So docsrv
accepts for itself: when the listening socket is readable, it takes every connection the
kernel holds, and hands each to the loop as an accepted socket.
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


class Acceptor:
    def __init__(self, sock: socket.socket, protocol_factory: Callable[[], asyncio.Protocol], batch: int) -> None:
        self.sock = sock
        self.protocol_factory = protocol_factory
        self.batch = batch
        self.loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task] = set()

    def start(self) -> None:
        self.loop.add_reader(self.sock.fileno(), self._accept_pending)

    def stop(self) -> None:
        """Accept no more; the connections already accepted carry on."""
        self.loop.remove_reader(self.sock.fileno())

    def _accept_pending(self) -> None:
        for _ in range(self.batch):
            try:
                conn, _address = self.sock.accept()
            except _RETRY_LATER:
                return
            except OSError as error:
                # Out of file descriptors, or the like: say so, and try again on the next turn.
                if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("cannot accept a connection: %s", error)
                    return
                raise
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self.loop.create_task(self.loop.connect_accepted_socket(self.protocol_factory, conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
