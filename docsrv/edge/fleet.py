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

POLL_SECONDS = 0.5


async def replica_state(session: aiohttp.ClientSession, base: str, snapshot: str) -> str | None:
    """None when the replica at ``base`` serves ``snapshot`` alone; else what it does instead."""
    try:
        async with session.get(base.rstrip("/") + "/readyz") as response:
            body = await response.read()
            if response.status != 200:
                return f"/readyz answered {response.status}"
            ready = orjson.loads(body)
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as error:
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    if ready.get("snapshot") != snapshot:
        return f"serves snapshot {ready.get('snapshot')}"
    if ready.get("draining_workers", 0):
        return f"{ready['draining_workers']} worker(s) of an earlier snapshot still draining"
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
