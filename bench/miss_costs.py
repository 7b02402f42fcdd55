"""What a reply not yet cached costs docsrv, step by step, beyond aiohttp's own share.

    python bench/miss_costs.py [--snapshot DIR] [--target /api/v2/project/1/] [--rounds 20000]

In one process, on the small synthetic snapshot of ``run.py`` (made when missing) or DIR: the
dispatcher answering a request that misses (aiohttp's request object made once, the reply
cache holding nothing), and the steps of that answer measured apart: routing and the canonical
key, the handler (the record serialised, its validators and purge keys, the reply and its
prebuilt head), the cache's bookkeeping and the metrics. ``run.py --cache-mb 0`` measures the
same misses end to end against ``peers/ceiling.py``, aiohttp with pre-encoded bodies (issue 36).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import timeit
from pathlib import Path
from typing import Any

import orjson
from aiohttp.test_utils import make_mocked_request

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from docsrv.api.app import ROUTER, Dispatcher  # noqa: E402
from docsrv.api.request import ApiRequest  # noqa: E402
from docsrv.api.state import ApiState  # noqa: E402
from docsrv.config import Settings  # noqa: E402
from docsrv.http.caching import strong_etag  # noqa: E402
from docsrv.http.reply import Reply  # noqa: E402
from docsrv.http.reply_cache import ReplyCache  # noqa: E402
from docsrv.observe.runtime import Runtime  # noqa: E402
from docsrv.serve.served import load_served  # noqa: E402
from run import snapshot_path  # noqa: E402


def per_call(function: Any, rounds: int) -> float:
    """Microseconds a call, the best of five runs of ``rounds`` calls."""
    return min(timeit.repeat(function, number=rounds, repeat=5)) / rounds * 1e6


def run_once(loop: asyncio.AbstractEventLoop, make: Any) -> Any:
    """A coroutine that does not wait on anything, run to its end without the event loop."""
    coroutine = make()
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    loop.run_until_complete(coroutine)
    raise RuntimeError("the step waited on the event loop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshot", type=Path, default=None)
    parser.add_argument("--target", default="/api/v2/project/1/")
    parser.add_argument("--rounds", type=int, default=20_000)
    args = parser.parse_args()
    snapshot = args.snapshot or snapshot_path("small", 1)
    served = load_served(snapshot, progress=False)
    state = ApiState(served.store, served.search, Settings(response_cache_bytes=0), Runtime())
    dispatcher = Dispatcher(state)
    loop = asyncio.new_event_loop()
    request = make_mocked_request("GET", args.target, headers={"Host": "127.0.0.1:8000"}, loop=loop)
    found = ROUTER.match(request.path)
    assert found is not None, args.target
    route, params = found
    asked = ApiRequest(params, request.query, request.raw_path, "http://127.0.0.1:8000")
    reply = run_once(loop, lambda: route.handler(asked, state))
    assert reply.status == 200, reply.status
    data = orjson.loads(reply.body)
    cache = ReplyCache(64 << 20)
    rounds = args.rounds
    whole = per_call(lambda: run_once(loop, lambda: dispatcher(request)), rounds)
    handler = per_call(lambda: run_once(loop, lambda: route.handler(asked, state)), rounds)
    figures = {
        "the dispatcher, a whole miss (response object made, not written)": whole,
        "  routing and the canonical key (Dispatcher.miss without the handler)": per_call(
            lambda: (ROUTER.match(request.path), str(request.url.with_query(sorted(request.query.items())))), rounds),
        "  the handler (serialised, validators, purge keys, the reply)": handler,
        "    the body's JSON alone (orjson.dumps of the record as served)": per_call(lambda: orjson.dumps(data), rounds),
        "    the strong ETag (blake2b of the body)": per_call(lambda: strong_etag(reply.body), rounds),
        "    the reply and its prebuilt heads (Reply)": per_call(lambda: Reply(200, reply.body, reply.headers, etag=reply.etag), rounds),
        "  the reply cache's bookkeeping (ReplyCache.put, a cache with room)": per_call(
            lambda: cache.put(args.target, Reply(200, reply.body, reply.headers, etag=reply.etag)), rounds),
        "  the metrics (Metrics.observe)": per_call(lambda: state.runtime.metrics.observe(route.template, 200, 0.0001, False), rounds),
    }
    for name, micros in figures.items():
        print(f"{micros:7.2f} µs  {name}")
    loop.close()


if __name__ == "__main__":
    main()
