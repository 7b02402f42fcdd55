"""``docsrv fleet wait``: wait until every replica serves one snapshot and nothing older.

A replica is done when its /readyz answers 200 naming the snapshot, with no worker of an earlier
snapshot still draining (``draining_workers`` 0): until then, a kept-alive connection from a
cache may still be answered from the old snapshot, and a purge sent meanwhile could be refilled
with an old reply. So the order is: pull, ``fleet wait``, then purge.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson

from .replies import one_line, read_some

POLL_SECONDS = 0.5


async def replica_state(session: aiohttp.ClientSession, base: str, snapshot: str) -> str | None:
    """None when the replica at ``base`` serves ``snapshot`` alone; else what it does instead."""
    try:
        async with session.get(base.rstrip("/") + "/readyz", allow_redirects=False) as response:
            body = await read_some(response)
            if response.status != 200:
                return f"/readyz answered {response.status}"
            ready = orjson.loads(body)
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as error:
        return one_line(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
    if not isinstance(ready, dict):
        return f"/readyz answered {one_line(body.decode(errors='replace'))}, not a status object"
    if ready.get("snapshot") != snapshot:
        return f"serves snapshot {one_line(str(ready.get('snapshot')))}"
    draining = ready.get("draining_workers")
    if type(draining) is not int:
        return f"/readyz has no count of draining workers (draining_workers: {one_line(orjson.dumps(draining).decode())})"
    if draining:
        return f"{draining} worker(s) of an earlier snapshot still draining"
    return None


async def wait_for_fleet(snapshot: str, bases: list[str], timeout: float) -> dict[str, str]:
    """Poll every replica until each serves ``snapshot`` alone, or ``timeout`` seconds pass;
    return what each replica not yet done does instead (empty: all done)."""
    deadline = time.monotonic() + timeout
    behind = {base: "not asked yet" for base in bases}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while True:
            states = await asyncio.gather(*(replica_state(session, base, snapshot) for base in behind))
            behind = {base: state for base, state in zip(behind, states, strict=True) if state is not None}
            if not behind or time.monotonic() >= deadline:
                return behind
            await asyncio.sleep(POLL_SECONDS)
