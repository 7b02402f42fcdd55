"""The master's answer while no worker serves: ``/healthz`` 200, everything else 503.

Until the first snapshot has loaded (tens of seconds for a large one) no worker accepts on the port,
and a liveness probe that got no answer would have the process restarted in a loop. So while no
worker is ready, the master accepts on the listening socket itself, from its select loop, and
answers each request in one reply with ``Connection: close``: ``/healthz`` 200 (the process
lives), ``/readyz`` 503 naming what it waits for, any other path 503 with a Retry-After. Sockets
are non-blocking, a request head is read up to 8 KiB and 2 s at most, and at most 64
connections are held: no client can stall the master's loop. Once a worker serves, the master
accepts no more, but still answers the connections it holds: none is dropped at the handover.
"""

from __future__ import annotations

import contextlib
import socket
import time

import orjson

#: The most connections held at once, the longest a request head may take, and its size.
MAX_CONNECTIONS = 64
HEAD_SECONDS = 2.0
MAX_HEAD_BYTES = 8192
RETRY_AFTER_SECONDS = 5


class LoadingResponder:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        #: Accepted connections by file descriptor: the socket, what it sent, its deadline.
        self.connections: dict[int, tuple[socket.socket, bytearray, float]] = {}
        #: What /readyz says the process waits for.
        self.waiting_for = "the snapshot is loading"

    def readable(self, accepting: bool) -> list[int]:
        """What the loop's select waits on for it: each connection held, and the listening socket
        while it is ``accepting`` (no worker serves)."""
        return [self.sock.fileno(), *self.connections] if accepting else [*self.connections]

    def handle(self, fd: int, accepting: bool) -> None:
        """Act on ``fd`` (the listening socket or a held connection) found readable; the
        listening socket only while ``accepting``."""
        if fd == self.sock.fileno():
            if accepting:
                self.accept()
            return
        held = self.connections.get(fd)
        if held is None:
            return
        connection, head, _deadline = held
        try:
            data = connection.recv(MAX_HEAD_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.drop(fd)
            return
        head += data
        if b"\r\n\r\n" in head or b"\n\n" in head or len(head) >= MAX_HEAD_BYTES:
            self.answer(fd, bytes(head))

    def accept(self) -> None:
        self.sock.setblocking(False)
        for _ in range(MAX_CONNECTIONS):
            try:
                connection, _address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(self.connections) >= MAX_CONNECTIONS:
                connection.close()
                continue
            connection.setblocking(False)
            self.connections[connection.fileno()] = (connection, bytearray(), time.monotonic() + HEAD_SECONDS)

    def expire(self) -> None:
        """Close connections whose head did not arrive in time."""
        now = time.monotonic()
        for fd, (_connection, _head, deadline) in list(self.connections.items()):
            if now > deadline:
                self.drop(fd)

    def answer(self, fd: int, head: bytes) -> None:
        connection = self.connections[fd][0]
        line = head.split(b"\n", 1)[0].split()
        target = line[1].split(b"?", 1)[0] if len(line) >= 2 else b""
        if target == b"/healthz":
            status, body = b"200 OK", {"status": "ok"}
        elif target == b"/readyz":
            status, body = b"503 Service Unavailable", {"status": "starting", "problem": self.waiting_for}
        else:
            status, body = b"503 Service Unavailable", {"detail": f"Not ready: {self.waiting_for}."}
        data = orjson.dumps(body)
        reply = (b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
                 b"Retry-After: " + str(RETRY_AFTER_SECONDS).encode() + b"\r\nContent-Length: " + str(len(data)).encode()
                 + b"\r\nConnection: close\r\n\r\n" + data)
        with contextlib.suppress(OSError):
            connection.send(reply)  # a few hundred bytes: the socket buffer takes them whole
        self.drop(fd)

    def drop(self, fd: int) -> None:
        connection = self.connections.pop(fd)[0]
        with contextlib.suppress(OSError):
            connection.close()

    def close(self) -> None:
        """Let go of every connection held (the listening socket stays open): the master stops,
        or this is a process forked from it."""
        for fd in list(self.connections):
            self.drop(fd)
