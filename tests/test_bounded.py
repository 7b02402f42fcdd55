"""Bounded under hostile traffic, against the real server: one cache entry per canonical request,
the cache's figures in /metrics, 505 for other HTTP versions, short error bodies, and a worker
out of file descriptors that pauses instead of spinning."""

import re
import resource
import socket
import time
from pathlib import Path

from docsrv.http.fast_lane import MAX_ASKED, MAX_ASKED_BYTES, FastLane
from docsrv.http.heads import HeadReader
from helpers import raw_request


def metric(server, name: str, labels: str = "") -> float:
    text = server.get("/metrics").body.decode()
    found = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_unknown_parameters_and_their_order_share_one_cache_entry(start_server):
    server = start_server("--workers", "1")
    route = '{route="/api/v2/version/"}'
    first = server.get("/api/v2/version/?project__slug=pip&active=true&limit=2")
    assert first.status == 200 and metric(server, "docsrv_reply_cache_misses_total", route) == 1
    for variant in ("?active=true&limit=2&project__slug=pip", "?utm_source=x&project__slug=pip&active=true&limit=2&_=1",
                    "?project__slug=pip&active=true&limit=2"):
        again = server.get("/api/v2/version/" + variant)
        assert again.body == first.body and again.headers["ETag"] == first.headers["ETag"]
    assert metric(server, "docsrv_reply_cache_misses_total", route) == 1
    assert metric(server, "docsrv_reply_cache_hits_total", route) == 3


def test_the_cache_reports_entries_bytes_and_evictions_and_stays_within_its_bytes(start_server):
    server = start_server("--workers", "1", "--response-cache-mb", "1")
    for n in range(600):  # one-off URLs of 3 KB each: more than 1 MiB of keys alone
        assert server.get(f"/api/v2/project/1/?x={n}{'y' * 3000}").status == 200
    assert metric(server, "docsrv_reply_cache_evictions_total") > 0
    assert 0 < metric(server, "docsrv_reply_cache_bytes") <= 1 << 20
    assert metric(server, "docsrv_reply_cache_entries") > 1
    assert metric(server, "docsrv_reply_cache_hits_total", '{route="/api/v2/project/{id}/"}') == 599


def test_http_versions_other_than_1_0_and_1_1_get_505_in_json(demo):
    for version in ("HTTP/2.0", "HTTP/1.2", "HTTP/3.0"):
        request = f"GET /api/v2/project/1/ {version}\r\nHost: localhost\r\n\r\n".encode()
        with socket.create_connection(("127.0.0.1", demo.port), timeout=30) as sock:
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert re.match(rb"HTTP/1\.[01] 505 ", head), head
        assert b"application/json" in head and b'"detail":"HTTP version not supported' in body
    assert demo.get("/api/v2/project/1/").status == 200


def test_error_bodies_quote_at_most_a_short_escaped_excerpt(demo):
    junk = "<script>" + "A" * 5000
    for path in (f"/api/v1/project/?format={junk}", f"/api/v1/version/?project={junk}", f"/api/v1/project/?slug__{junk}=1"):
        response = demo.get(path)
        assert response.status == 400
        assert len(response.body) < 200 and "A" * 50 not in response.body.decode()
    status, headers, body = raw_request(demo.port, b"GE\x01T /api/v2/project/1/?" + b"B" * 200 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert status == 400 and headers["content-type"] == "application/json"
    assert b"B" * 20 not in body and b"\\u0001" not in body and len(body) < 120


def test_out_of_file_descriptors_a_worker_pauses_logs_little_and_serves_again(start_server):
    soft, hard = 96, 160

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    server = start_server("--workers", "1", preexec_fn=limit)
    worker = server.json("/readyz")["worker"]
    limits = Path(f"/proc/{worker}/limits").read_text()
    assert re.search(rf"Max open files\s+{hard}\s+{hard}", limits), "the soft limit is raised to the hard one"
    held = []
    try:
        for _ in range(hard + 40):  # the kernel queues what the worker cannot accept
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
        first = len(server.log)
        server.wait_for("cannot accept connections", timeout=30, start=first)
        # The next line comes a second later, and counts the failures it did not log (a pause of
        # 0.1 s between tries: about ten). A worker that retried on every turn would log thousands.
        second = server.wait_for("more since the last line", timeout=30, start=first)
        skipped = int(re.search(r"\((\d+) more since", second).group(1))
        assert 1 <= skipped <= 30, second
        lines = [line for line in server.log[first:] if "cannot accept" in line]
        assert len(lines) <= 3, lines
        for sock in held[:40]:
            sock.close()
        held = held[40:]
        deadline = time.monotonic() + 30
        while True:  # a new client is served once descriptors are free again
            try:
                assert server.get("/healthz").status == 200
                break
            except OSError:
                assert time.monotonic() < deadline
    finally:
        for sock in held:
            sock.close()


def test_the_fast_lane_keeps_a_bounded_number_of_short_reads(demo_state):
    """Every whole read the lane answers is kept by its bytes (``FastLane.asked``): a flood of
    distinct reads, each a hit, keeps at most ``MAX_ASKED`` of them, and none longer than
    ``MAX_ASKED_BYTES``."""
    lane = FastLane(demo_state)
    head = HeadReader().read(b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert head is not None
    asked = lane.asked_of(head)
    assert asked is not None
    for n in range(3 * MAX_ASKED):
        lane.remember(b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nUser-Agent: %d\r\n\r\n" % n, asked)
        assert len(lane.asked) <= MAX_ASKED
    long_read = b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: localhost\r\nUser-Agent: " + b"a" * MAX_ASKED_BYTES + b"\r\n\r\n"
    lane.remember(long_read, asked)
    assert long_read not in lane.asked
