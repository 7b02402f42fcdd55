"""Where a cached reply's time goes in the fast lane, in Python, against the bare protocol.

    python bench/lane_costs.py [--snapshot DIR] [--target /api/v2/project/1/] [--rounds 200000]

In one process, on the demo snapshot (or DIR): a real serving state, its reply cache warmed by a
real request; then a connection handler of the fast lane and one of the bare peer
(``peers/bare.py``), each with a transport that only keeps what it is given, are fed the same
request read over and over. It prints microseconds a request for each, and for the parts of
the lane's path measured apart, so that a change to the lane is measured before it is made
(issue 36). The throughput figures that count are ``run.py``'s; this says where they go.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import timeit
from pathlib import Path
from time import perf_counter
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "peers"))

from bare import Bare  # noqa: E402

from docsrv.api.state import ApiState  # noqa: E402
from docsrv.config import Settings  # noqa: E402
from docsrv.http.fast_lane import FastLaneServer  # noqa: E402
from docsrv.http.hits import decide  # noqa: E402
from docsrv.observe.runtime import Runtime  # noqa: E402
from docsrv.serve.served import load_served  # noqa: E402
from docsrv.serve.worker import listening_socket, start  # noqa: E402


class Sink:
    """A transport that keeps the size of what it is given, and nothing else."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writelines(self, parts: Any) -> None:
        self.written += sum(len(part) for part in parts)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def per_call(function: Any, rounds: int) -> float:
    """Microseconds a call, the best of five runs of ``rounds`` calls."""
    return min(timeit.repeat(function, number=rounds, repeat=5)) / rounds * 1e6


async def measure(snapshot: str, target: str, rounds: int, headers: str) -> None:
    served = load_served(snapshot, progress=False)
    state = ApiState(served.store, served.search, Settings(), Runtime())
    sock = listening_socket("127.0.0.1", 0)
    listening = await start(state, sock)
    port = sock.getsockname()[1]
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            for _ in range(2):  # made and cached, then answered by the lane: the bytes the bare peer sends
                async with session.get(f"http://127.0.0.1:{port}{target}") as response:
                    body = await response.read()
                    assert response.status == 200, response.status
                    raw_head = "".join(f"{k}: {v}\r\n" for k, v in response.headers.items())
    finally:
        await listening.close(grace=0)
        sock.close()
    state.draining = False  # closing the listener stopped the state; the lane is driven by hand below
    server = listening.server
    assert isinstance(server, FastLaneServer)
    lane = server.lane
    block = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}\r\n".encode()
    handler = server()
    sink = Sink()
    handler.connection_made(sink)  # type: ignore[arg-type]
    handler.data_received(block)
    assert sink.written > len(body), "the lane did not answer the request"
    bare = Bare({target.encode(): f"HTTP/1.1 200 OK\r\n{raw_head}\r\n".encode("latin-1") + body})
    bare.connection_made(Sink())  # type: ignore[arg-type]
    head = handler._reader.read(block)
    assert head is not None
    asked = lane.asked_of(head)
    assert asked is not None
    now = handler._loop_time()
    cached = lane.cache.get(asked.ask.key)
    assert cached is not None
    found = decide(cached, asked.ask, lane.last_modified)
    assert found is not None
    reply = found[1]
    counts: dict[str, int] = {}
    last_modified = lane.last_modified
    parts = (reply.wire, asked.cors, reply.wire_end, b"-" * 29, asked.ending, reply.body)
    figures = {
        "lane: a whole request (data_received)": per_call(lambda: handler.data_received(block), rounds),
        "bare protocol: a whole request (data_received)": per_call(lambda: bare.data_received(block), rounds),
        "lane: reading the head (HeadReader.read)": per_call(lambda: handler._reader.read(block), rounds),
        "lane: the reply's bytes (FastLane.respond)": per_call(lambda: lane.respond(asked, handler, now), rounds),
        "lane: the cache lookup (ReplyCache.get)": per_call(lambda: lane.cache.get(asked.ask.key), rounds),
        "lane: the reply decided (hits.decide: coding, status)": per_call(lambda: decide(cached, asked.ask, last_modified), rounds),
        "lane: CORS for a docs Origin (Cors.wire)": per_call(lambda: lane.cors.wire(b"https://docs.example.org"), rounds),
        "lane: the bytes joined (head parts and body)": per_call(lambda: b"".join(parts), rounds),
        "lane: the metrics (one count by route)": per_call(lambda: counts.__setitem__(reply.route, counts.get(reply.route, 0) + 1), rounds),
        "lane: two clock reads (perf_counter)": per_call(lambda: perf_counter() - perf_counter(), rounds),
    }
    handler.connection_lost(None)
    for name, micros in figures.items():
        print(f"{micros:6.3f} µs  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshot", default=str(HERE.parent / "snapshots" / "demo"))
    parser.add_argument("--target", default="/api/v2/project/1/")
    parser.add_argument("--header", action="append", default=[], help="a request header, 'Name: value' (repeatable)")
    parser.add_argument("--rounds", type=int, default=200_000)
    args = parser.parse_args()
    headers = "".join(f"{line}\r\n" for line in args.header)
    asyncio.run(measure(args.snapshot, args.target, args.rounds, headers))


if __name__ == "__main__":
    main()
