"""The fast lane, differentially: the same bytes sent to a server with the lane and to one
without it (``--no-fast-path``) get byte-identical responses, ``Date`` aside: every route, hits
and misses, HEAD, conditional and compressed requests, HTTP/1.0, keep-alive and close,
pipelining (a miss between hits), requests split across reads, bodies and odd framing, and the
hostile requests of ``test_hostile.py``'s generators. Each request is sent twice on one
connection, so the second is a hit where the first was a miss."""

import re
import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile import PATHS, header_values, query

from conftest import DEMO, Server
from docsrv.http.fast_lane import APART_BYTES, MISS_PROBE, MISS_STREAK

#: The servers' keep-alive timeout (``--keepalive-timeout``): short, for the tests that wait it out.
KEEPALIVE_SECONDS = 3.0
#: Routes whose bodies name the worker and its timings: they differ between any two servers.
COMPARABLE = [path for path in PATHS if path not in ("/readyz", "/metrics")]

_DATE = re.compile(rb"\r\nDate: [^\r\n]*\r\n")
_HEAD = re.compile(rb"^HTTP/1\.[01] (\d{3})[^\r\n]*\r\n(.*?)\r\n\r\n", re.S)
ROUTES = [
    "/api/v2/project/", "/api/v2/project/?slug=pip", "/api/v2/project/1/", "/api/v2/project/1/active_versions/",
    "/api/v2/version/?project__slug=pip&active=true", "/api/v2/version/1/", "/api/v2/build/?project__slug=pip", "/api/v2/build/1/",
    "/api/v2/docsearch/?project=pip&version=stable&q=install", "/api/v1/", "/api/v1/project/?slug=pip", "/api/v1/project/pip/",
    "/api/v1/project/1/", "/api/v1/project/schema/", "/api/v1/version/pip/", "/api/v1/build/1/", "/api/v1/file/?limit=5",
    "/api/v1/file/search/?q=install", "/api/v1/file/anchor/?q=install", "/api/v1/user/", "/openapi.json", "/healthz",
    "/api/v2/project/999/", "/api/v2/project", "/api/v2/project/?limit=2&unknown=1&offset=1", "/nowhere",
]


@pytest.fixture(scope="module")
def pair():
    """The demo snapshot served with the fast lane and without it."""
    common = ["--snapshot", str(DEMO), "--workers", "1", "--keepalive-timeout", str(KEEPALIVE_SECONDS)]
    servers = [Server(common), Server([*common, "--no-fast-path"])]
    yield servers
    for server in servers:
        server.stop()


def exchange(port: int, chunks: list[bytes], expected: int, heads: int = 0, idle: float = 5.0) -> bytes:
    """Send ``chunks`` (a pause between them: separate reads on the server) and read until
    ``expected`` responses are whole (``heads`` of them to HEAD requests: no body) or the server
    closes; ``Date`` values blanked."""
    with socket.create_connection(("127.0.0.1", port), timeout=idle) as sock:
        for index, chunk in enumerate(chunks):
            if index:
                time.sleep(0.02)
            sock.sendall(chunk)
        data = b""
        while complete(data, heads) < expected:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            data += chunk
    return _DATE.sub(b"\r\nDate: -\r\n", data)


def complete(data: bytes, heads: int) -> int:
    """How many whole responses ``data`` holds (the first ``heads`` of them answer HEADs)."""
    count = 0
    while (match := _HEAD.match(data)) is not None:
        length = re.search(rb"(?im)^content-length: *(\d+)", match.group(2))
        bodiless = count < heads or match.group(1) in (b"304", b"204")
        size = 0 if bodiless or length is None else int(length.group(1))
        if len(data) < match.end() + size:
            break
        data = data[match.end() + size:]
        count += 1
    return count


def same(pair, chunks: list[bytes], expected: int, heads: int = 0, idle: float = 5.0) -> bytes:
    lane, plain = pair
    with_lane = exchange(lane.port, chunks, expected, heads, idle)
    without = exchange(plain.port, chunks, expected, heads, idle)
    assert with_lane == without, (chunks, with_lane[:600], without[:600])
    return with_lane


def lane_replies(server) -> int:
    text = server.get("/metrics").body.decode()
    return sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("docsrv_fast_lane_replies_total{"))


def get(path: str, *headers: str, version: str = "1.1", method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/{version}", "Host: localhost", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


VARIANTS = {
    "plain": lambda p: get(p),
    "gzip": lambda p: get(p, "Accept-Encoding: gzip"),
    "br": lambda p: get(p, "Accept-Encoding: gzip, deflate, br"),
    "q-values": lambda p: get(p, "Accept-Encoding: gzip;q=0.2, br;q=0"),
    "no coding": lambda p: get(p, "Accept-Encoding: *;q=0"),
    "if-none-match *": lambda p: get(p, "If-None-Match: *"),
    "if-none-match wrong": lambda p: get(p, 'If-None-Match: "nope", W/"other"'),
    "if-modified-since later": lambda p: get(p, "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT"),
    "if-modified-since earlier": lambda p: get(p, "If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT"),
    "if-modified-since garbage": lambda p: get(p, "If-Modified-Since: yesterday"),
    "lower-case names, padded values": lambda p: b"GET " + p.encode() + b" HTTP/1.1\r\nhost:   localhost  \r\naccept-encoding:gzip\r\n\r\n",
    "user agent": lambda p: get(p, "User-Agent: curl/8.0", "Accept: */*"),
    "keep-alive spelled out": lambda p: get(p, "Connection: Keep-Alive"),
    "other host": lambda p: b"GET " + p.encode() + b" HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    "host with port": lambda p: b"GET " + p.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n",
    # CORS (DECISIONS.md section 5): a docs origin is echoed with credentials, any other gets "*".
    "docs origin": lambda p: get(p, "Origin: https://docs.example.org"),
    "docs subdomain with a port": lambda p: get(p, "Origin: http://pip.docs.example.org:8080 ", "Accept-Encoding: gzip"),
    "other origin": lambda p: get(p, "Origin: https://evil.example"),
    "null origin": lambda p: get(p, "Origin: null"),
    "docs host, other scheme": lambda p: get(p, "Origin: ftp://docs.example.org"),
    "docs origin, conditional": lambda p: get(p, "Origin: https://docs.example.org", "If-None-Match: *"),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_route_twice_on_one_connection(pair, variant):
    for path in ROUTES:
        request = VARIANTS[variant](path)
        same(pair, [request + request], 2)


#: Routes of each kind of reply (detail, list, search, v1, not found, redirect, a body the lane
#: writes apart from its head) for the tests that send every variant in reads of their own.
KINDS = ["/api/v2/project/1/", "/api/v2/version/?project__slug=pip&active=true", "/api/v2/docsearch/?project=pip&version=stable&q=install",
         "/api/v1/project/pip/", "/api/v2/project/999/", "/api/v2/project", "/api/v2/build/?limit=100"]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_read_answered_before_is_answered_alike(pair, variant):
    """A whole read of one request, sent again on the same connection and on another: the lane
    answers the repeats from what it kept of the read (``FastLane.asked``), aiohttp the rest."""
    for path in KINDS:
        request = VARIANTS[variant](path)
        same(pair, [request, request, request], 3)
        same(pair, [request], 1)


def test_the_long_body_of_kinds_is_written_apart(pair):
    """``KINDS`` holds a reply whose body the lane writes apart from its head: keep it so."""
    lane, _plain = pair
    assert len(lane.get("/api/v2/build/?limit=100").body) > APART_BYTES


def test_a_kept_read_closes_as_it_asked(pair):
    for request in (get("/api/v2/project/1/", "Connection: close"), get("/api/v2/project/1/", version="1.0"),
                    get("/api/v2/project/1/", method="HEAD")):
        for _ in range(3):
            same(pair, [request], 1, heads=1 if request.startswith(b"HEAD") else 0)


@pytest.mark.parametrize("path", ["/api/v2/project/1/", "/api/v2/version/?project__slug=pip&active=true", "/api/v2/project/",
                                  "/api/v2/build/?limit=100"])
def test_head_http10_and_closing(pair, path):
    same(pair, [get(path, method="HEAD") * 2], 2, heads=2)
    same(pair, [get(path, version="1.0")], 1)  # HTTP/1.0: closed after the response
    same(pair, [get(path, "Connection: keep-alive", version="1.0") * 2], 2)
    same(pair, [get(path) + get(path, "Connection: close") + get(path)], 3)  # nothing after the close is answered
    same(pair, [get(path, "Connection: close, keep-alive") * 2], 2)


def test_a_conditional_request_with_the_reply_s_own_tag_is_answered_304(pair):
    lane, _plain = pair
    first = exchange(lane.port, [get("/api/v2/project/1/")], 1)
    etag = re.search(rb"ETag: (\S+)", first).group(1).decode()
    both = same(pair, [get("/api/v2/project/1/", f"If-None-Match: {etag}") * 2], 2)
    assert both.count(b"HTTP/1.1 304 Not Modified\r\n") == 2 and b"Content-Length" not in both
    same(pair, [get("/api/v2/project/1/", "If-None-Match: W/" + etag, "Accept-Encoding: gzip") * 2], 2)


def test_pipelines_keep_their_order_when_a_miss_goes_to_aiohttp(pair):
    hit, miss = get("/api/v2/project/2/"), get("/api/v2/project/3/?nocache=1")
    same(pair, [hit], 1)
    for sequence in ([hit, miss, hit], [miss, hit, hit, miss], [hit, get("/x", method="OPTIONS"), hit],
                     [hit, get("/api/v2/project/2/", method="POST"), hit], [hit, get("/api/v2/docsearch/?project=pip&version=stable&q=pip"), hit]):
        same(pair, [b"".join(sequence)], len(sequence))


@pytest.mark.parametrize("at", [1, 5, 20, 30, 35, 36, 37])
def test_a_request_split_across_reads(pair, at):
    request = get("/api/v2/project/1/", "Accept-Encoding: gzip")
    same(pair, [request + request[:at], request[at:]], 2)
    same(pair, [request[:at], request[at:] + request], 2)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nHost: other\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.0\r\n\r\n",
        b"GET http://localhost/api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\nHost: localhost\n\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost : localhost\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: local\x01host\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\n Folded: value\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nX-Caf\xc3\xa9: 1\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/2.0\r\nHost: localhost\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.2\r\nHost: localhost\r\n\r\n",
        b"get /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET  /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET /api/v2/project/1/\tHTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\n" + b"X-Many: 1\r\n" * 120 + b"\r\n",
        b"\r\n\r\nGET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
        # What changes aiohttp's connection handling, and targets that are not paths (issue 28).
        b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nProxy-Connection: close\r\n\r\n",
        b"GET /api/v2/project/1/ HTTP/1.0\r\nHost: localhost\r\nProxy-Connection: keep-alive\r\n\r\n",
        b"GET * HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET http://evil.example/api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET http://localhost/api/v2/version/?limit=3 HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        b"GET localhost:80 HTTP/1.1\r\nHost: localhost\r\n\r\n",
    ],
)
def test_unusual_framing_is_answered_as_aiohttp_answers_it(pair, request_bytes):
    warm = get("/api/v2/project/1/")
    same(pair, [warm + request_bytes + warm], 3, idle=1.0)


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(path=st.sampled_from(COMPARABLE), query=query)
def test_any_query_on_any_route(pair, path, query):
    request = f"GET {path}?{query} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
    same(pair, [request * 2], 2, idle=1.0)


@SETTINGS
@given(
    path=st.sampled_from(COMPARABLE),
    method=st.sampled_from(["GET", "HEAD", "OPTIONS", "POST", "DELETE"]),
    accept_encoding=header_values,
    if_none_match=st.one_of(header_values, st.lists(st.sampled_from(['"x"', "*", 'W/"y"', '"', ""]), max_size=5).map(", ".join)),
    if_modified_since=header_values,
)
def test_odd_headers_and_methods(pair, path, method, accept_encoding, if_none_match, if_modified_since):
    request = (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: {accept_encoding}\r\n"
               f"If-None-Match: {if_none_match}\r\nIf-Modified-Since: {if_modified_since}\r\n\r\n").encode()
    same(pair, [request * 2], 2, heads=2 if method == "HEAD" else 0, idle=1.0)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=200))
def test_bytes_that_are_not_http(pair, data):
    same(pair, [get("/api/v2/project/1/") + data], 2, idle=0.3)


def test_the_lane_answers_hits_and_metrics_count_them(pair):
    lane, plain = pair
    request = get("/api/v2/project/4/", "Accept-Encoding: gzip")
    same(pair, [request], 1)  # made, and compressed, by aiohttp on both
    before = [lane_replies(lane), lane_replies(plain)]
    counted = [server.get("/metrics").body.decode() for server in pair]
    same(pair, [request * 10], 10)
    assert [lane_replies(lane), lane_replies(plain)] == [before[0] + 10, 0]
    for server, text in zip(pair, counted, strict=True):
        after = server.get("/metrics").body.decode()
        assert requests_of(after, "/api/v2/project/{id}/") - requests_of(text, "/api/v2/project/{id}/") == 10


def requests_of(metrics: str, route: str) -> int:
    line = next(line for line in metrics.splitlines() if line.startswith(f'docsrv_requests_total{{route="{route}",status="200"}}'))
    return int(line.rsplit(" ", 1)[1])


def lockstep(port: int, requests: list[bytes]) -> bytes:
    """Each request sent once the response to the one before it is whole: one request a read."""
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
        for count, request in enumerate(requests, start=1):
            sock.sendall(request)
            while complete(data, 0) < count:
                chunk = sock.recv(65536)
                assert chunk, "the server closed the connection"
                data += chunk
    return _DATE.sub(b"\r\nDate: -\r\n", data)


def test_after_a_run_of_misses_the_lane_reads_one_request_in_so_many_until_a_hit(pair):
    """A connection whose requests keep missing is handed to aiohttp unread, but for one request
    in MISS_PROBE, until one of those is a hit. Every response stays what aiohttp writes."""
    lane, plain = pair
    misses = [get(f"/api/v2/project/2/?run={n}") for n in range(MISS_STREAK + 1)]
    hits = [misses[n % len(misses)] for n in range(MISS_PROBE + 4)]  # cached now, under each request's own key
    for server in pair:
        lockstep(server.port, [get("/api/v2/project/2/")])  # the canonical reply, made
    before = lane_replies(lane)
    assert lockstep(lane.port, misses + hits) == lockstep(plain.port, misses + hits)
    # After MISS_STREAK + 1 misses: MISS_PROBE - 1 hits handed on unread, the probe read, and the
    # hits after it answered by the lane.
    assert lane_replies(lane) - before == len(hits) - (MISS_PROBE - 1)


def test_a_closing_request_the_lane_answers_is_answered_closing_and_the_connection_closed(pair):
    request = get("/api/v2/project/1/", "Connection: close")
    same(pair, [get("/api/v2/project/1/")], 1)  # cached on both
    for server in pair:
        data = b""
        with socket.create_connection(("127.0.0.1", server.port), timeout=5.0) as sock:
            sock.sendall(request)
            while chunk := sock.recv(65536):  # a connection left open times out here
                data += chunk
        assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"\r\nConnection: close\r\n" in data


def test_an_idle_connection_answered_only_by_the_lane_is_closed_after_the_keepalive_timeout(pair):
    """The lane keeps the keep-alive deadline of the connections it answers (issue 24): one it
    alone answered is closed once idle for the timeout, as aiohttp closes its own."""
    lane, _plain = pair
    request = get("/api/v2/project/5/")
    exchange(lane.port, [request], 1)  # cached
    before = lane_replies(lane)
    with socket.create_connection(("127.0.0.1", lane.port), timeout=KEEPALIVE_SECONDS * 3) as sock:
        sock.sendall(request)
        data = b""
        while complete(data, 0) < 1:
            data += sock.recv(65536)
        assert lane_replies(lane) == before + 1 and data.startswith(b"HTTP/1.1 200 OK\r\n")
        assert sock.recv(65536) == b""  # closed by the server, not by the socket's own timeout (which raises)


def test_a_connection_the_lane_keeps_busy_outlives_the_keepalive_timeout(pair):
    """Answers push the deadline: a client asking every few seconds is never cut off. The first
    answer is aiohttp's (a miss), which arms aiohttp's own keep-alive timer after it: the lane's
    answers that follow keep the connection open past it (a client under steady load lost one
    request a connection there, 15 s after a miss)."""
    lane, _plain = pair
    request = get("/api/v2/project/6/")
    before = lane_replies(lane)
    with socket.create_connection(("127.0.0.1", lane.port), timeout=10) as sock:
        data = b""
        for count in range(1, 6):  # over 1.5 timeouts in all
            sock.sendall(request)
            while complete(data, 0) < count:
                chunk = sock.recv(65536)
                assert chunk, f"closed before answer {count}"
                data += chunk
            time.sleep(KEEPALIVE_SECONDS * 0.3)
    assert lane_replies(lane) - before == 4  # the first answer was aiohttp's, the four after it the lane's


def test_the_seam_names_what_an_aiohttp_release_lacks(monkeypatch):
    from docsrv.http import aiohttp_seam

    assert aiohttp_seam.missing_names() == []
    monkeypatch.setattr(aiohttp_seam, "HANDLER_ATTRIBUTES", (*aiohttp_seam.HANDLER_ATTRIBUTES, "_renamed_in_a_release"))
    with pytest.raises(ImportError, match=r"lacks what it uses: RequestHandler\._renamed_in_a_release; install the aiohttp"):
        aiohttp_seam.check()
