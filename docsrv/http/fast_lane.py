"""The fast lane: cached replies written as prebuilt bytes, before aiohttp sees the request.

Nearly all of a cached request's time in aiohttp is its HTTP layer (the request and response
objects, the task that runs the handler, header serialisation, the writer); the lookup itself
is a dictionary get. So each connection's protocol (``FastLaneRequestHandler``, aiohttp's own
request handler underneath) first reads what arrives with httptools (llhttp, as uvicorn does:
``heads.py``) and answers a GET or HEAD whose reply is in the reply cache by writing that
reply's head (its status line and headers, made once per reply and content coding,
``reply.py``), the ``Date`` of this second, and its body. A read that holds one whole request,
as nearly every read of a client does, is answered in ``data_received`` itself; what such a
read asked is kept by its bytes, so the same read again (a client asks for the same reply with
the same head) is not parsed again.
The reply itself is found as the dispatcher finds it (``hits.py``). Everything else is handed to
aiohttp on the same connection, in order:

- a request the lane reads but does not answer (a miss, another method, a conditional request
  it cannot decide, a coding not made yet) is handed to aiohttp alone, as its exact bytes; what
  follows it waits until aiohttp has answered, then the lane carries on;
- anything the lane does not fully understand (a body, an upgrade, a repeated header, a
  ``Proxy-Connection`` header, a target that is not a path, bytes outside ASCII, a header block
  over aiohttp's limits, anything llhttp refuses) hands the
  connection to aiohttp from that read on, for good. aiohttp's parser refuses a whole read when
  any part of it is wrong, so every request of a read is read before any is answered.

So aiohttp still parses, limits and answers everything unusual, as it did before the lane; the
lane only writes what aiohttp would have written for the same request (the differential tests
hold it to that, byte for byte but for ``Date``). llhttp reads strictly (no lenient flags, as
in aiohttp's request parser): control bytes, a lone CR or LF and folded lines are refused, so
the lane hands them on without a look of its own. Metrics count lane replies in a dictionary
folded in when they are read (``observe/metrics.py``); the access log, when on, logs each one.
"""

from __future__ import annotations

from datetime import datetime
from time import perf_counter, time
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE

from .aiohttp_seam import handler_kwargs, keepalive_seconds, loop_of, resume_keepalive, server_loop, stop_keepalive
from .caching import validators
from .compression import choose
from .cors import Cors
from .heads import HEAD_END, Head, HeadReader, one_plain_get, plausible_start, value
from .hits import Ask, cache_key, decide
from .protocol import JsonErrorRequestHandler, JsonErrorServer
from .reply import WIRE_END_304

if TYPE_CHECKING:
    from ..observe.runtime import Runtime
    from .reply_cache import ReplyCache

#: Bytes that wait for aiohttp to finish a request before the lane hands the connection over.
MAX_HELD = 64 << 10
#: Bytes of replies written in one go before the lane looks whether the client keeps up.
WRITE_BATCH = 256 << 10
#: A body longer than this is written apart from its head (one ``writev``, no copy): copying
#: it costs more than the second buffer does.
APART_BYTES = 8 << 10
#: After this many misses in a row on a connection, the lane reads only one request in
#: ``MISS_PROBE`` of it, until a hit: a connection whose requests are all made anew (a cold
#: cache, a crawler) does not pay for a read of each head that finds nothing.
MISS_STREAK = 8
MISS_PROBE = 8
#: Whole request reads the lane answered, kept by their bytes with what they ask (``FastLane.asked``):
#: at most this many, each at most ``MAX_ASKED_BYTES`` long (about 2.5 MB at worst, in all).
MAX_ASKED = 1024
MAX_ASKED_BYTES = 2048
_SERVER_LINE = f"\r\nServer: {SERVER_SOFTWARE}\r\n".encode()
#: After ``Date``: the Server header, and the Connection header aiohttp adds, by (HTTP/1.1, keep-alive).
_ENDINGS = {
    (True, True): _SERVER_LINE + b"\r\n",
    (True, False): _SERVER_LINE + b"Connection: close\r\n\r\n",
    (False, True): _SERVER_LINE + b"Connection: keep-alive\r\n\r\n",
    (False, False): _SERVER_LINE + b"\r\n",
}

class Asked(NamedTuple):
    """A request the lane may answer from the cache, as the lane reads it once (see ``FastLane.asked``)."""

    ask: Ask
    http11: bool
    keep_alive: bool
    #: The CORS headers of its Origin, and the end of the head for its version and keep-alive.
    cors: bytes
    ending: bytes
    #: For the access log.
    method: str
    target: str
    user_agent: str | None


class LaneState(Protocol):
    """What the lane reads of the serving state (``api/state.py``'s ``ApiState``)."""

    cache: ReplyCache
    cors: Cors
    fixed_base: str | None
    draining: bool
    last_modified: datetime
    runtime: Runtime
    snapshot_name: str


class Date:
    """The ``Date`` value of this second, as aiohttp formats it, made once a second.

    It is read against the event loop's clock, which the keep-alive clock reads anyway: one
    clock read a request, and when the wall clock's second ends, a new value."""

    __slots__ = ("until", "value")

    def __init__(self) -> None:
        self.until = float("-inf")
        self.value = b""

    def at(self, loop_now: float) -> bytes:
        """The value at ``loop_now``, a reading of the event loop's clock."""
        if loop_now >= self.until:
            wall = time()
            self.until = loop_now + (int(wall) + 1 - wall)
            self.value = rfc822_formatted_time().encode()
        return self.value


class FastLane:
    """Answers requests from the reply cache of one serving state."""

    def __init__(self, state: LaneState) -> None:
        self.state = state
        # What does not change while the state serves, kept at hand.
        self.cache = state.cache
        self.cors = state.cors
        self.fixed_base = state.fixed_base
        self.last_modified = state.last_modified
        self.access_log = state.runtime.access_log
        self.date = Date()
        self.metrics = metrics = state.runtime.metrics
        #: Lane replies by route, of each status (the metrics empty them when they read them).
        self.sent = metrics.lane[200]
        self.revalidated = metrics.lane[304]
        #: What each whole read of one request that the lane answered asked, by its bytes: a
        #: client sends the same head for the same reply again and again (wrk, a CDN, a
        #: browser's polling), and such a read is then answered without being parsed again. Its
        #: bytes decide all of it, and the reply is still looked up each time. Emptied when full.
        self.asked: dict[bytes, Asked] = {}

    def serve(self, state: LaneState) -> None:
        """Answer from ``state`` from now on: a later state of the same snapshot, sharing this
        one's cache (``api/app.py``, ``serve_state``)."""
        self.state = state
        self.last_modified = state.last_modified

    def asked_of(self, head: Head) -> Asked | None:
        """What a request the lane has read asks; None when aiohttp is to answer it (another
        method; HTTP/1.0 without Host, whose host aiohttp takes from the machine)."""
        method, url, http11, keep_alive, headers = head
        if method != b"GET" and method != b"HEAD":
            return None
        target = url.decode()
        if self.fixed_base:
            key = cache_key(self.fixed_base, "", target)
        else:
            host = headers.get(b"host")
            if host is None:
                return None
            key = cache_key(None, value(host), target)
        accept = headers.get(b"accept-encoding")
        if_none_match = headers.get(b"if-none-match")
        if_modified_since = headers.get(b"if-modified-since")
        user_agent = headers.get(b"user-agent")
        ask = Ask(key, method == b"GET", choose(value(accept)) if accept is not None else None,
                  validators([value(if_none_match)] if if_none_match is not None else None,
                             value(if_modified_since) if if_modified_since is not None else None))
        return Asked(ask, http11, keep_alive, self.cors.wire(headers.get(b"origin")), _ENDINGS[(http11, keep_alive)],
                     method.decode(), target, value(user_agent) if user_agent is not None else None)

    def remember(self, data: bytes, asked: Asked) -> None:
        """Keep what the whole read ``data`` asked (it was answered)."""
        if len(data) <= MAX_ASKED_BYTES:
            memo = self.asked
            if len(memo) >= MAX_ASKED:
                memo.clear()
            memo[data] = asked

    def respond(self, asked: Asked, handler: FastLaneRequestHandler, now: float) -> tuple[bytes, bytes] | None:
        """The response to a request the lane has read, as aiohttp would write it, counted; or
        None when aiohttp is to answer it (a miss, a coding not made yet, a stopping worker).

        The response comes in two parts: all of it, and ``b""``; or, for a body over
        ``APART_BYTES``, the head and the body, which the transport writes in one ``writev``
        rather than copying the body behind the head."""
        if self.state.draining:
            return None
        ask = asked.ask
        reply = self.cache.get(ask.key)
        if reply is None:
            return None
        found = decide(reply, ask, self.last_modified)
        if found is None:
            return None  # compressed when aiohttp answers (off the loop when large)
        status, reply = found
        if status == 304:
            wire, end, body, counts = reply.wire_304, WIRE_END_304, b"", self.revalidated
        else:  # only 200s are cached
            wire, end, body, counts = reply.wire, reply.wire_end, reply.body if ask.body else b"", self.sent
        if not asked.http11:
            wire = b"HTTP/1.0" + wire[8:]
        date = self.date
        today = date.value if now < date.until else date.at(now)
        if len(body) > APART_BYTES:
            payload = b"".join((wire, asked.cors, end, today, asked.ending)), body
        else:
            payload = b"".join((wire, asked.cors, end, today, asked.ending, body)), b""
        route = reply.route
        counts[route] = counts.get(route, 0) + 1
        if self.access_log:
            state = self.state
            state.runtime.log_access(handler.remote, asked.method, asked.target, asked.user_agent, status, len(body),
                                     perf_counter() - handler.batch_started, route, state.snapshot_name)
        return payload


class FastLaneRequestHandler(JsonErrorRequestHandler):
    """aiohttp's connection handler, with the fast lane in front of its parser.

    While the lane is on, it keeps the connection's keep-alive deadline itself, as uvicorn's
    httptools protocol does: aiohttp's timer is cancelled (it would close a connection whose
    requests only the lane answered, and whether it runs at all depends on aiohttp's state), and
    the lane's own timer closes the connection once it has been idle for the keep-alive timeout
    since the last answer, the lane's or aiohttp's, with no request in aiohttp's hands. When the
    lane hands the connection over for good, the deadline goes back to aiohttp.
    """

    def __init__(self, manager: Any, *, lane: FastLane, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._lane = lane
        self._lane_on = True
        self._loop_time = loop_of(self).time
        self._keepalive_seconds = keepalive_seconds(self)
        #: When the connection is idle long enough to close (pushed by every answer), and the
        #: lane's timer, which checks it (re-armed lazily, as aiohttp's is).
        self._deadline = 0.0
        self._idle_timer: Any = None
        #: Whether the lane has answered a request (for the first-request deadline).
        self._lane_answered = False
        #: Requests handed to aiohttp that it has not answered yet.
        self._in_aiohttp = 0
        #: Bytes received that wait: a request not yet whole, or what came after a handed-off one.
        self._held = b""
        self._reading_paused_by_lane = False
        #: When the lane began on the bytes it is answering (for the access log's durations).
        self.batch_started = 0.0
        self._reader = HeadReader()
        #: Requests the lane read and left to aiohttp, in a row (see ``MISS_STREAK``).
        self._misses = 0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        stop_keepalive(self)
        self._deadline = self._loop_time() + self._keepalive_seconds
        self._idle_timer = loop_of(self).call_at(self._deadline, self._close_if_idle)

    def _close_if_idle(self) -> None:
        self._idle_timer = None
        if not self._lane_on or self.transport is None:
            return
        if self._loop_time() < self._deadline or self._in_aiohttp:  # answered since, or aiohttp is answering
            self._idle_timer = loop_of(self).call_at(max(self._deadline, self._loop_time() + 0.5), self._close_if_idle)
            return
        self.force_close()

    def _process_keepalive(self) -> None:
        """aiohttp's keep-alive timer. aiohttp arms it again after each answer of its own, when
        ``answered_by_aiohttp`` has run, and it would then close a connection that the lane kept
        busy since: while the lane is on, the lane's deadline decides (``_close_if_idle``)."""
        if self._lane_on:
            stop_keepalive(self)
            return
        super()._process_keepalive()

    def has_answered(self) -> bool:
        return self._lane_answered or super().has_answered()

    @property
    def remote(self) -> str | None:
        """The client's address, as aiohttp's ``request.remote`` gives it."""
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return str(peer[0]) if isinstance(peer, (list, tuple)) else None

    def data_received(self, data: bytes) -> None:
        if not self._lane_on:
            super().data_received(data)
            return
        if self._held:
            data = self._held + data
            self._held = b""
        if self._in_aiohttp or self.writing_paused:
            self._hold(data)
            return
        if data[-4:] != HEAD_END:  # a request not yet whole (and maybe whole ones before it)
            self._run(data)
            return
        # Whole requests, most often one, what nearly every read of a client holds: answered here,
        # at the least cost.
        lane = self._lane
        asked = lane.asked.get(data)
        new = asked is None
        if asked is None:
            misses = self._misses
            if misses >= MISS_STREAK and misses % MISS_PROBE and one_plain_get(data):
                self._to_aiohttp(data)
                return
            reader = self._reader
            head = reader.read(data)
            if head is None:
                if len(reader.targets) > 1:  # several: each is read apart
                    reader.restart()
                    self._run(data)
                else:
                    self._demote(data)
                return
            asked = lane.asked_of(head)
            if asked is None:
                self._to_aiohttp(data)
                return
        self.batch_started = started = perf_counter()
        now = self._loop_time()
        payload = lane.respond(asked, self, now)
        if payload is None:
            self._to_aiohttp(data)
            return
        if new:
            lane.remember(data, asked)
        self._misses = 0
        if payload[1]:
            self.transport.writelines(payload)  # type: ignore[union-attr]
        else:
            self.transport.write(payload[0])  # type: ignore[union-attr]
        # _answered, written out: this is every cached request's path.
        self._lane_answered = True
        self._deadline = now + self._keepalive_seconds
        lane.metrics.lane_seconds += perf_counter() - started
        if not asked.keep_alive:
            self._close_after_lane()

    def _to_aiohttp(self, data: bytes) -> None:
        """aiohttp answers the one request ``data`` holds, which the lane does not (a miss)."""
        self._misses += 1
        self._in_aiohttp += 1
        super().data_received(data)

    def close(self) -> None:
        self._lane_off()  # aiohttp answers nothing more on a closing connection: nor does the lane
        super().close()

    def force_close(self) -> None:
        self._lane_off()
        super().force_close()

    def _lane_off(self) -> None:
        self._lane_on = False
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _hold(self, data: bytes) -> None:
        if len(data) > MAX_HELD:
            self._demote(data)
        else:
            self._held = data

    def _demote(self, data: bytes) -> None:
        """aiohttp takes the connection, from ``data`` on, and its keep-alive deadline."""
        self._lane_off()
        resume_keepalive(self, self._deadline)
        if self._reading_paused_by_lane and self.transport is not None:
            self._reading_paused_by_lane = False
            self.transport.resume_reading()
        if data:
            super().data_received(data)

    def _run(self, data: bytes) -> None:
        """Answer what ``data`` (which begins at the start of a request) holds: several requests,
        or a request not yet whole.

        Every request in it is read first: aiohttp's parser refuses a whole read when any part
        of it is wrong (a valid request before a bad one goes unanswered too), so when the lane
        does not fully understand any of it, aiohttp gets all of it.
        """
        read = self._reader.read
        heads: list[tuple[int, Head]] = []
        pos = 0
        end = data.find(HEAD_END) + 4
        while end >= 4:
            head = read(data[pos:end])
            if head is None or (not head.keep_alive and end < len(data)):  # bytes after a close: an error to llhttp
                self._demote(data)
                return
            heads.append((end, head))
            pos = end
            end = data.find(HEAD_END, pos) + 4
        if pos < len(data) and not plausible_start(data[pos:]):
            self._demote(data)
            return
        respond = self._lane.respond
        transport = self.transport
        assert transport is not None
        started = self.batch_started = perf_counter()
        now = self._loop_time()
        out: list[bytes] = []
        size = answered = 0
        start = 0
        asked_of = self._lane.asked_of
        for end, head in heads:
            asked = asked_of(head)
            payload = respond(asked, self, now) if asked is not None else None
            if payload is None:
                self._flush(out)
                out = []
                self._in_aiohttp += 1
                super().data_received(data[start:end])
                self._hold(data[end:])
                break
            out += payload
            size += len(payload[0]) + len(payload[1])
            answered += 1
            start = end
            if not head.keep_alive:  # aiohttp closes after such a response: nothing follows it (see above)
                self._flush(out)
                out = []
                self._close_after_lane()
                break
            if size > WRITE_BATCH:
                self._flush(out)
                out, size = [], 0
                if self.writing_paused:  # the client does not keep up: read no more until it does
                    self._held = data[start:]
                    transport.pause_reading()
                    self._reading_paused_by_lane = True
                    break
        else:
            self._held = data[start:]
        self._flush(out)
        if answered:
            self._answered(started, now)

    def _close_after_lane(self) -> None:
        """A closing request answered: aiohttp would close the connection now."""
        self._lane_off()
        if self.transport is not None:
            self.transport.close()

    def _flush(self, out: list[bytes]) -> None:
        if out and self.transport is not None:
            self.transport.writelines(out)

    def _answered(self, started: float, now: float) -> None:
        """What aiohttp does after answering: restart the keep-alive clock. (aiohttp's
        server-wide ``requests_count``, which only gunicorn's worker reads, counts aiohttp's
        own requests.)"""
        self._lane_answered = True
        self._deadline = now + self._keepalive_seconds
        self._lane.metrics.lane_seconds += perf_counter() - started

    def _carry_on(self) -> None:
        """Answer what waited, now that aiohttp has answered and the client reads."""
        if not self._lane_on or self._in_aiohttp or self.writing_paused or self.transport is None:  # closing turns the lane off
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
            loop_of(self).call_soon(self._carry_on)

    def answered_by_aiohttp(self, keep_alive: bool) -> None:
        if self._lane_on:
            self._in_aiohttp -= 1
            if not keep_alive:
                self._lane_off()  # aiohttp closes the connection: nothing after it is answered
                return
            self._deadline = self._loop_time() + self._keepalive_seconds
            if not self._in_aiohttp and self._held:
                loop_of(self).call_soon(self._carry_on)


class FastLaneServer(JsonErrorServer):
    """The low-level server whose connections have the fast lane in front."""

    def __init__(self, handler: Any, *, lane: FastLane, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.lane = lane

    def __call__(self) -> FastLaneRequestHandler:
        return FastLaneRequestHandler(self, loop=server_loop(self), lane=self.lane, **handler_kwargs(self))
