"""Work that would hold the event loop for more than a millisecond runs in a thread of its own.

Rendering a long list page takes milliseconds and compressing a large body as long again; on
the event loop, every other request of the worker would wait that long (a cached detail's p99
beside a few clients of 1,000-item lists: ``bench/stress.py``). Such work runs in the
one heavy-work thread instead: brotli and zlib let go of the GIL while they compress, and Python
code hands the GIL back to the event loop every switch interval, which workers shorten
(``utils/held_calls.py``).
One thread: heavy requests queue behind each other, not in front of the cheap ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

HEAVY_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docsrv-heavy")


async def offload(function: Callable[..., T], *args: object) -> T:
    """``function(*args)`` in the heavy-work thread."""
    return await asyncio.get_running_loop().run_in_executor(HEAVY_THREAD, function, *args)
