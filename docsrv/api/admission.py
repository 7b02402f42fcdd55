"""Search admission: the searches of a worker run one at a time, and only so many may wait.

A search costs a millisecond or more of the one search thread; a client can ask for thousands
at once and go away. So each worker keeps a bounded queue: when it is full, a search is
refused at once with ``503`` and ``Retry-After`` (the CDN or client tries again, or another
replica does), and a search whose client has gone by the time its turn comes is dropped
without running. tantivy lets go of the GIL while it searches, but highlighting holds it: with
one search thread the event loop competes with one thread for the GIL, not with a pool.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .errors import ApiError
from .request import ApiRequest

SEARCH_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docsrv-search")
RETRY_AFTER_SECONDS = 1
#: The status recorded (never sent) for a search dropped because its client had gone, as nginx logs it.
CLIENT_GONE = 499


class SearchQueue:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._waiting: deque[tuple[ApiRequest, Callable[..., Any], tuple, asyncio.Future]] = deque()
        self._pump: asyncio.Task | None = None
        #: Searches run, refused (queue full) and dropped (client gone), since start.
        self.counts = {"run": 0, "refused": 0, "dropped": 0}

    def __len__(self) -> int:
        return len(self._waiting)

    async def run(self, request: ApiRequest, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in the search thread, in turn; 503 when too many wait."""
        if request.gone():
            self.counts["dropped"] += 1
            raise ApiError(CLIENT_GONE, {"detail": "Client closed the connection."})
        if len(self._waiting) >= self.limit:
            self.counts["refused"] += 1
            raise ApiError(
                503,
                {"detail": "Too many searches are waiting; try again shortly."},
                {"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting.append((request, function, args, future))
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._run_waiting())
        return await future

    async def _run_waiting(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting:
            request, function, args, future = self._waiting.popleft()
            if future.done():
                continue
            if request.gone():
                self.counts["dropped"] += 1
                future.set_exception(ApiError(CLIENT_GONE, {"detail": "Client closed the connection."}))
                continue
            self.counts["run"] += 1
            try:
                result = await loop.run_in_executor(SEARCH_THREAD, function, *args)
            except Exception as error:  # handed to the request that asked, which reports it
                if not future.done():
                    future.set_exception(error)
            else:
                if not future.done():
                    future.set_result(result)
