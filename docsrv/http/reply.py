"""A response ready to send, and what it holds in memory.

A Reply is made once (status, encoded body, every header) and sent as it is for as long as it
is cached. Its compressed variants hang off it, made on first demand. ``nbytes`` is what the
reply cache charges for it: every object it keeps alive, counted with ``sys.getsizeof``.

A cacheable reply also holds its head as the fast lane writes it (``wire``, and ``wire_304`` for
a 304): the HTTP/1.1 status line and the reply's own headers, in aiohttp's order; then the
lane writes the CORS headers of the request's ``Origin`` (``cors.py``), ``wire_end`` (what
aiohttp writes after them, up to the value of ``Date``, or ``WIRE_END_304``), and ``Date``,
spliced in per second (see ``fast_lane.py``).
"""

from __future__ import annotations

from http import HTTPStatus
from sys import getsizeof

from .compression import MIN_SIZE


class Reply:
    """A response ready to send: status, encoded body, and every header that goes with it."""

    __slots__ = (
        "body", "compressible", "entry", "etag", "headers", "headers_304", "route", "stamp", "status", "variants", "wire", "wire_304",
        "wire_end",
    )

    def __init__(self, status: int, body: bytes, headers: dict[str, str], *, etag: str | None = None) -> None:
        self.status = status
        self.body = body
        self.headers = headers
        self.etag = etag
        #: The route template that answered, set by the dispatcher (a label for metrics).
        self.route = ""
        #: The sequence of the state it was made from (``ReplyCache.advance``).
        self.stamp = 0
        self.headers_304 = {k: v for k, v in headers.items() if k != "Content-Type"} if etag else headers
        self.compressible = etag is not None and len(body) > MIN_SIZE
        #: Compressed variants by coding, made on demand (see ``compressed``).
        self.variants: dict[str, Reply] = {}
        #: The cache entry (``reply_cache.Entry``) that owns this reply and is charged for it, if it
        #: is cached. Only the cache reads it: a reply knows nothing of the cache's types.
        self.entry: object | None = None
        self.wire = head_block(status, headers) if etag else b""
        self.wire_304 = head_block(304, self.headers_304) if etag else b""
        self.wire_end = f"Content-Length: {len(body)}\r\nDate: ".encode() if etag else b""

    def compressed(self, coding: str, body: bytes) -> Reply:
        """The variant of this reply whose body is ``body``, this reply's body compressed with ``coding``.

        It has its own strong ETag (the identity tag with ``-gzip`` or ``-br``), as RFC 9110
        asks of different representations.
        """
        assert self.etag is not None
        etag = f'{self.etag[:-1]}-{coding}"'
        variant = Reply(self.status, body, {**self.headers, "Content-Encoding": coding, "ETag": etag}, etag=etag)
        variant.route = self.route
        return variant

    def restamp(self, values: dict[str, str], stamp: int) -> None:
        """Give this reply, and its variants, the header ``values`` of a later state of the same
        content (its snapshot's name and date: ``ReplyCache.advance``), in their places."""
        self.headers = {**self.headers, **values}
        self.headers_304 = {k: v for k, v in self.headers.items() if k != "Content-Type"}
        self.wire = head_block(self.status, self.headers)
        self.wire_304 = head_block(304, self.headers_304)
        self.stamp = stamp
        for variant in self.variants.values():
            variant.restamp(values, stamp)

    def nbytes(self) -> int:
        """Bytes this reply keeps alive: itself, its body, its header maps and its variants."""
        size = getsizeof(self) + getsizeof(self.body) + dict_bytes(self.headers) + getsizeof(self.variants)
        size += getsizeof(self.wire) + getsizeof(self.wire_304) + getsizeof(self.wire_end)
        if self.headers_304 is not self.headers:
            size += getsizeof(self.headers_304)  # its values are those of ``headers``
        for variant in self.variants.values():
            size += variant.nbytes()
        return size


def dict_bytes(mapping: dict[str, str]) -> int:
    """A header map and its values (its keys are the same few constant strings in every reply)."""
    return getsizeof(mapping) + sum(map(getsizeof, mapping.values()))


#: What aiohttp writes after a 304's headers, up to the value of ``Date`` (no ``Content-Length``).
WIRE_END_304 = b"Date: "


#: Each status line as aiohttp writes it to an HTTP/1.1 request, up to its line end.
STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}" for status in HTTPStatus}


def head_block(status: int, headers: dict[str, str]) -> bytes:
    """The start of a response's head as aiohttp writes it to an HTTP/1.1 request: the status
    line and the reply's own headers (made for every reply made: ``": ".join`` of each
    name and value makes each line without a Python step per header)."""
    return "\r\n".join((STATUS_LINES[status], *map(": ".join, headers.items()), "")).encode()
