"""The fast lane: cached replies written as prebuilt bytes, before aiohttp sees the request.

Nearly all of a cached request's time in aiohttp is its HTTP layer (the request and response
objects, header serialisation, the writer); the lookup itself is a dictionary get. So each
connection's protocol (``FastLaneRequestHandler``, aiohttp's own request handler underneath)
first parses what arrives with httptools (llhttp, as uvicorn does) and answers a GET or HEAD
whose reply is in the reply cache by writing that reply's header block (made once per reply and
content coding, ``reply.py``), the ``Date`` of this second, and its body. Everything else is
handed to aiohttp on the same connection, in order:

- a request the lane understands but does not answer (a miss, another method, a conditional
  request it cannot decide, an unusual header) is handed to aiohttp alone, as its exact bytes;
  what follows it waits until aiohttp has answered, then the lane carries on;
- anything the lane does not fully understand (a body, an upgrade, bytes outside printable
  ASCII, a bare CR or LF, a header block over the line limit, something httptools refuses) hands
  the connection to aiohttp from that request on, for good.

So aiohttp still parses, limits and answers everything unusual, as it did before the lane;
the lane only writes what aiohttp would have written for the same request (the differential
tests hold it to that, byte for byte but for ``Date``). Metrics count lane replies in a
dictionary folded in once a second (``metrics.py``); the access log, when on, logs each one.
"""

from __future__ import annotations

import re
from datetime import datetime
from http import HTTPStatus
from time import perf_counter, time
from typing import TYPE_CHECKING, Any, Protocol

import httptools
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE

from .caching import not_modified
from .compression import choose
from .protocol import JsonErrorRequestHandler, JsonErrorServer

if TYPE_CHECKING:
    from ..runtime import Runtime
    from .reply_cache import ReplyCache

#: The longest header block the lane reads (aiohttp's limit on one line): a longer one is
#: aiohttp's to judge.
MAX_HEAD = 8190
#: aiohttp's limit on the number of headers.
MAX_HEADERS = 100
#: Bytes that wait for aiohttp to finish a request before the lane hands the connection over.
MAX_HELD = 64 << 10
#: Bytes of replies written in one go before the lane looks whether the client keeps up.
WRITE_BATCH = 256 << 10
#: Bytes outside printable ASCII, tab, CR and LF, and a CR or LF not in a CRLF: parsers may
#: differ on them.
_UNUSUAL = re.compile(rb"[^\t\r\n\x20-\x7e]|\r(?!\n)|(?<!\r)\n")
#: Headers whose presence means a body or a protocol switch: aiohttp's to handle.
_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"upgrade", b"expect"))
_SERVER_LINE = f"\r\nServer: {SERVER_SOFTWARE}\r\n".encode()
#: After ``Date``: the Server header, and the Connection header aiohttp adds, by (HTTP/1.1, keep-alive).
_ENDINGS = {
    (True, True): _SERVER_LINE + b"\r\n",
    (True, False): _SERVER_LINE + b"Connection: close\r\n\r\n",
    (False, True): _SERVER_LINE + b"Connection: keep-alive\r\n\r\n",
    (False, False): _SERVER_LINE + b"\r\n",
}


class LaneState(Protocol):
    """What the lane reads of the serving state (``api/state.py``'s ``ApiState``)."""

    cache: ReplyCache
    fixed_base: str | None
    draining: bool
    last_modified: datetime
    runtime: Runtime
    snapshot_name: str


class Date:
    """The ``Date`` value of this second, as aiohttp formats it, made once a second."""

    second = -1
    value = b""

    @classmethod
    def now(cls) -> bytes:
        second = int(time())
        if second != cls.second:
            cls.second, cls.value = second, rfc822_formatted_time().encode()
        return cls.value


_STATUS_LINES: dict[tuple[bool, int], bytes] = {}


def status_line(http11: bool, status: int) -> bytes:
    line = _STATUS_LINES.get((http11, status))
    if line is None:
        line = _STATUS_LINES[(http11, status)] = f"HTTP/1.{int(http11)} {status} {HTTPStatus(status).phrase}\r\n".encode()
    return line


class RequestHead:
    """What the lane needs of one request's head."""

    __slots__ = ("complete", "headers", "http11", "keep_alive", "method", "repeated", "url")

    def __init__(self) -> None:
        self.url = b""
        self.headers: dict[bytes, bytes] = {}
        self.repeated = False
        self.complete = False
        self.method = b""
        self.http11 = True
        self.keep_alive = True


class HeadReader:
    """A connection's httptools parser and its callbacks, kept from one request to the next
    (made anew after an error or a request that closes the connection)."""

    __slots__ = ("head", "parser")

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.head = RequestHead()

    def on_url(self, url: bytes) -> None:
        self.head.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self.head.headers
        name = name.lower()
        if name in headers:
            self.head.repeated = True
        headers[name] = value

    def on_message_complete(self) -> None:
        self.head.complete = True

    def read(self, block: bytes) -> RequestHead | None:
        """A header block that ends with a blank line, read, or None when the lane does not
        fully understand it: then aiohttp, whose parser may refuse what llhttp here accepts or
        the other way round, must see it and everything around it (anything unusual is
        aiohttp's to judge)."""
        if len(block) > MAX_HEAD or _UNUSUAL.search(block) is not None:
            return None
        head = self.head = RequestHead()
        parser = self.parser
        try:
            parser.feed_data(block)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self.parser = httptools.HttpRequestParser(self)
            return None
        headers = head.headers
        version = parser.get_http_version()
        if (not head.complete or head.repeated or len(headers) > MAX_HEADERS or not _FRAMING.isdisjoint(headers)
                or (version != "1.1" and version != "1.0")):
            self.parser = httptools.HttpRequestParser(self)
            return None
        connection = headers.get(b"connection")
        if connection is not None:
            connection = connection.lower()
            if connection != b"close" and connection != b"keep-alive":
                return None
        head.method = parser.get_method()
        head.http11 = http11 = version == "1.1"
        head.keep_alive = connection != b"close" if http11 else connection == b"keep-alive"
        if not head.keep_alive:
            self.parser = httptools.HttpRequestParser(self)
        if http11 and b"host" not in headers:  # aiohttp's parser refuses it
            return None
        return head


class _Partial:
    """Callbacks that keep nothing: a request not yet whole is only checked."""

    def on_url(self, url: bytes) -> None:
        pass


_NOTHING = _Partial()


def plausible_start(partial: bytes) -> bool:
    """Whether bytes that do not yet hold a whole header block can begin a request the lane
    would read (else aiohttp's parser may refuse them at once, and with them what came before)."""
    if len(partial) > MAX_HEAD or _UNUSUAL.search(partial[:-1] if partial.endswith(b"\r") else partial) is not None:
        return False
    try:
        httptools.HttpRequestParser(_NOTHING).feed_data(partial)
    except (httptools.HttpParserError, httptools.HttpParserUpgrade):
        return False
    return True


class FastLane:
    """Answers requests from the reply cache of one serving state."""

    def __init__(self, state: LaneState) -> None:
        self.state = state

    def respond(self, head: RequestHead, handler: FastLaneRequestHandler) -> tuple[bytes, str, int] | None:
        """The response to a request the lane has read: (bytes, route, status); or None when
        aiohttp is to answer it (a miss, another method, a coding not made yet, ...)."""
        state = self.state
        method = head.method
        headers = head.headers
        host = headers.get(b"host")
        if (method != b"GET" and method != b"HEAD") or head.url[:1] != b"/" or not host or state.draining:
            return None
        target = head.url.decode()
        reply = state.cache.get(target if state.fixed_base else ("http", host.decode(), target))
        if reply is None:
            return None
        if reply.compressible:
            accept = headers.get(b"accept-encoding")
            coding = choose(accept.decode()) if accept is not None else None
            if coding is not None:
                variant = reply.variants.get(coding)
                if variant is None:
                    return None  # compressed when aiohttp answers (off the loop when large)
                reply = variant
        if_none_match = headers.get(b"if-none-match")
        if_modified_since = headers.get(b"if-modified-since")
        if (if_none_match is not None or if_modified_since is not None) and not_modified(
            [if_none_match.decode()] if if_none_match is not None else None,
            if_modified_since.decode() if if_modified_since is not None else None, reply.etag or "", state.last_modified,
        ):
            status, wire, body = 304, reply.wire_304, b""
        else:
            status, wire, body = reply.status, reply.wire, reply.body
        if method == b"HEAD":
            body = b""
        payload = b"".join((status_line(head.http11, status), wire, Date.now(), _ENDINGS[(head.http11, head.keep_alive)], body))
        if state.runtime.access_log:
            user_agent = headers.get(b"user-agent")
            state.runtime.log_access(handler.remote, method.decode(), target, user_agent.decode() if user_agent else None,
                                     status, len(body), perf_counter() - handler.batch_started, reply.route, state.snapshot_name)
        return payload, reply.route, status


class FastLaneRequestHandler(JsonErrorRequestHandler):
    """aiohttp's connection handler, with the fast lane in front of its parser."""

    def __init__(self, manager: Any, *, lane: FastLane, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._lane = lane
        self._lane_on = True
        #: Requests handed to aiohttp that it has not answered yet.
        self._in_aiohttp = 0
        #: Bytes received that wait: a request not yet whole, or what came after a handed-off one.
        self._held = b""
        self._reading_paused_by_lane = False
        #: When the lane began on the bytes it is answering (for the access log's durations).
        self.batch_started = 0.0
        self._reader = HeadReader()

    @property
    def remote(self) -> str | None:
        """The client's address, as aiohttp's ``request.remote`` gives it."""
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return str(peer[0]) if isinstance(peer, (list, tuple)) else None

    def data_received(self, data: bytes) -> None:
        if not self._lane_on:
            super().data_received(data)
            return
        if self._force_close or self._close:
            return
        if self._held:
            data = self._held + data
            self._held = b""
        if self._in_aiohttp or self._paused:
            self._hold(data)
        else:
            self._run(data)

    def _hold(self, data: bytes) -> None:
        if len(data) > MAX_HELD:
            self._demote(data)
        else:
            self._held = data

    def _demote(self, data: bytes) -> None:
        """aiohttp takes the connection, from ``data`` on."""
        self._lane_on = False
        if self._reading_paused_by_lane and self.transport is not None:
            self._reading_paused_by_lane = False
            self.transport.resume_reading()
        if data:
            super().data_received(data)

    def _run(self, data: bytes) -> None:
        """Answer what ``data`` (which begins at the start of a request) holds.

        Every request in it is read first: aiohttp's parser refuses a whole read when any part
        of it is wrong (a valid request before a bad one goes unanswered too), so when the lane
        does not fully understand any of it, aiohttp gets all of it.
        """
        heads: list[tuple[int, RequestHead]] = []
        pos = 0
        while (end := data.find(b"\r\n\r\n", pos)) >= 0:
            end += 4
            head = self._reader.read(data[pos:end])
            if head is None or (not head.keep_alive and end < len(data)):  # bytes after a close: an error to llhttp
                self._demote(data)
                return
            heads.append((end, head))
            pos = end
        if pos < len(data) and not plausible_start(data[pos:]):
            self._demote(data)
            return
        lane = self._lane
        transport = self.transport
        assert transport is not None
        started = self.batch_started = perf_counter()
        tally = lane.state.runtime.metrics.lane
        out: list[bytes] = []
        size = answered = 0
        start = 0
        for end, head in heads:
            answer = lane.respond(head, self)
            if answer is None:
                self._flush(out)
                out = []
                self._in_aiohttp += 1
                super().data_received(data[start:end])
                self._hold(data[end:])
                break
            payload, route, status = answer
            out.append(payload)
            size += len(payload)
            answered += 1
            key = (route, status)
            tally[key] = tally.get(key, 0) + 1
            start = end
            if not head.keep_alive:
                self._flush(out)
                out = []
                self._lane_on = False
                transport.close()
                break
            if size > WRITE_BATCH:
                self._flush(out)
                out, size = [], 0
                if self._paused:  # the client does not keep up: read no more until it does
                    self._held = data[start:]
                    transport.pause_reading()
                    self._reading_paused_by_lane = True
                    break
        else:
            self._held = data[start:]
        self._flush(out)
        if answered:
            self._request_count += answered
            self._next_keepalive_close_time = self._loop.time() + self._keepalive_timeout
            lane.state.runtime.metrics.lane_seconds += perf_counter() - started

    def _flush(self, out: list[bytes]) -> None:
        if out and self.transport is not None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _carry_on(self) -> None:
        """Answer what waited, now that aiohttp has answered and the client reads."""
        if not self._lane_on or self._in_aiohttp or self._paused or self.transport is None or self._force_close or self._close:
            return
        if self._reading_paused_by_lane:
            self._reading_paused_by_lane = False
            self.transport.resume_reading()
        data, self._held = self._held, b""
        if data:
            self._run(data)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._lane_on and (self._held or self._reading_paused_by_lane):
            self._loop.call_soon(self._carry_on)

    async def _handle_request(self, request: Any, start_time: float | None, request_handler: Any) -> tuple[Any, bool]:
        resp, reset = await super()._handle_request(request, start_time, request_handler)
        if self._lane_on:
            self._in_aiohttp -= 1
            if reset or not resp.keep_alive:
                self._lane_on = False  # aiohttp closes the connection: nothing after it is answered
            elif not self._in_aiohttp:
                self._loop.call_soon(self._carry_on)
        return resp, reset


class FastLaneServer(JsonErrorServer):
    """The low-level server whose connections have the fast lane in front."""

    def __init__(self, handler: Any, *, lane: FastLane, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.lane = lane

    def __call__(self) -> FastLaneRequestHandler:
        return FastLaneRequestHandler(self, loop=self._loop, lane=self.lane, **self._kwargs)

