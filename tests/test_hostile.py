"""Whatever a client sends: arbitrary paths, query strings and headers on every route get a
JSON answer (304, HEAD, preflights and /metrics aside), never a 5xx, never a traceback."""

import socket

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from docsrv.api.routes import ROUTES
from helpers import raw_request

PATHS = [r.template.replace("{id}", "1") for r in ROUTES] + [
    "/api/v1/project/pip/", "/api/v1/user/eric/", "/api/v1/version/pip/", "/api/v2/docsearch/",
]
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

garbage = st.binary(max_size=40).map(lambda raw: "".join(f"%{b:02X}" for b in raw))
words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
values = st.one_of(words.map(lambda w: "".join(c if c.isalnum() else f"%{ord(c):02X}" if ord(c) < 128 else c for c in w)),
                   garbage, st.sampled_from(["", "-1", "0", "1e9", "99999999999999999999999", "true", "None", "%00", "a" * 5000]))
names = st.sampled_from(["limit", "offset", "q", "project", "version", "slug", "project__slug", "active", "commit", "users",
                         "username", "format", "name", "language", "x", "", "limit[]", "slug__in"])
query = st.lists(st.tuples(names, values), max_size=6).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))


def check(status: int, headers: dict, body: bytes, method: str = "GET") -> None:
    assert status < 500, (status, body[:300])
    assert b"Traceback" not in body
    if status in (204, 304) or method == "HEAD" or headers.get("content-type", "").startswith("text/plain; version=0.0.4"):
        return
    assert headers["content-type"] == "application/json", headers
    import json

    if headers.get("content-encoding") is None:
        json.loads(body)


@SETTINGS
@given(path=st.sampled_from(PATHS), query=query)
def test_any_query_on_any_route(demo, path, query):
    status, headers, body = raw_request(demo.port, f"GET {path}?{query} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    check(status, headers, body)


@SETTINGS
@given(path=st.lists(st.one_of(words, garbage, st.sampled_from(["api", "v1", "v2", "project", "..", ".", "%2F", "1", "schema"])), max_size=6))
def test_any_path(demo, path):
    target = "/" + "/".join(segment.replace(" ", "%20").replace("#", "%23").replace("?", "%3F") for segment in path)
    target = "".join(c if 32 < ord(c) < 127 else "".join(f"%{b:02X}" for b in c.encode()) for c in target)
    status, headers, body = raw_request(demo.port, f"GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    check(status, headers, body)


header_values = st.one_of(
    st.sampled_from(["gzip", "br;q=0", "*;q=0", "gzip;q=abc", "identity;q=0, *;q=0", ";;;", "br, gzip;q=1.5", ""]),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60),
)


@SETTINGS
@given(
    path=st.sampled_from(PATHS),
    method=st.sampled_from(["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH", "TRACE", "PROPFIND"]),
    accept_encoding=header_values,
    if_none_match=st.one_of(header_values, st.lists(st.sampled_from(['"x"', "*", 'W/"y"', '"', ""]), max_size=5).map(", ".join)),
    if_modified_since=header_values,
    range_header=st.sampled_from(["bytes=0-10", "bytes=-5", "bytes=abc", "items=1-2", ""]),
)
def test_odd_headers_and_methods(demo, path, method, accept_encoding, if_none_match, if_modified_since, range_header):
    request = (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAccept-Encoding: {accept_encoding}\r\n"
               f"If-None-Match: {if_none_match}\r\nIf-Modified-Since: {if_modified_since}\r\nRange: {range_header}\r\n\r\n")
    status, headers, body = raw_request(demo.port, request.encode())
    check(status, headers, body, method)
    if method not in ("GET", "HEAD", "OPTIONS"):
        assert status == 405


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=300))
def test_bytes_that_are_not_http_get_a_json_error(demo, data):
    answer = raw_request(demo.port, data + b"\r\n\r\n")
    if answer is not None:
        check(*answer)


def test_non_utf8_in_query_and_path(demo):
    for target in ("/api/v2/project/?slug=%FF%FE", "/api/v1/project/%FF/", "/api/v2/docsearch/?project=pip&version=latest&q=%C3%28",
                   "/api/v1/user/%ED%A0%80/", "/api/v2/version/?project__slug=%00"):
        status, headers, body = raw_request(demo.port, f"GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        check(status, headers, body)
        assert status in (200, 400, 404), target


def test_oversized_request_line_and_headers_are_refused_in_json(demo):
    status, headers, _body = raw_request(demo.port, b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert status in (400, 414) and headers["content-type"] == "application/json"
    status, headers, _body = raw_request(demo.port, b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"b" * 10000 + b"\r\n\r\n")
    assert status in (400, 431) and headers["content-type"] == "application/json"
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(200))
    status, headers, _body = raw_request(demo.port, b"GET / HTTP/1.1\r\nHost: localhost\r\n" + many + b"\r\n")
    assert status in (400, 431) and headers["content-type"] == "application/json"


def test_a_slowloris_connection_is_closed_and_holds_no_worker(start_server):
    import time

    from docsrv.http.protocol import FIRST_REQUEST_SECONDS

    server = start_server("--workers", "1")
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    slow.sendall(b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\n")
    started = time.monotonic()
    closed_after = None
    while time.monotonic() - started < FIRST_REQUEST_SECONDS + 5:
        # The one worker keeps answering others while the slow client dribbles its headers.
        assert server.get("/api/v2/project/2/").status == 200
        try:
            slow.sendall(b"X")
            slow.settimeout(0.5)
            if slow.recv(1) == b"":
                closed_after = time.monotonic() - started
                break
        except TimeoutError:
            continue
        except OSError:
            closed_after = time.monotonic() - started
            break
    slow.close()
    # Closed by the server (the wait above is bounded: it is a poll, not a measure of time), while
    # every other request in the meantime was answered.
    assert closed_after is not None, "a connection that never sent a whole request was kept open"
