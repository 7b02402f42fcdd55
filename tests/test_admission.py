"""Search admission: searches run one at a time, a full queue answers 503 with Retry-After, and a
search whose client has gone is dropped before it runs."""

import asyncio
import threading

import pytest

from docsrv.api.admission import CLIENT_GONE, SearchQueue
from docsrv.api.errors import ApiError
from docsrv.api.request import ApiRequest


class Client:
    """A client that may go away: what the queue asks of a request is whether it has."""

    def __init__(self) -> None:
        self.left = False
        self.request = ApiRequest.of("/api/v2/docsearch/?q=x", gone=lambda: self.left)


class Blocked:
    """A queue whose first search holds the search thread until ``release`` is set."""

    def __init__(self, limit: int) -> None:
        self.queue = SearchQueue(limit)
        self.release = threading.Event()
        self.ran: list[int] = []

    def search(self, n: int) -> int:
        self.release.wait(10)
        self.ran.append(n)
        return n

    async def start(self) -> asyncio.Future:
        first = asyncio.ensure_future(self.queue.run(Client().request, self.search, 0))
        await asyncio.sleep(0)
        while len(self.queue):  # the first is taken into the search thread, which blocks
            await asyncio.sleep(0.01)
        return first


async def test_a_full_queue_refuses_with_503_and_retry_after():
    blocked = Blocked(limit=2)
    queue, release, ran, search = blocked.queue, blocked.release, blocked.ran, blocked.search
    first = await blocked.start()
    waiting = [asyncio.ensure_future(queue.run(Client().request, search, n)) for n in (1, 2)]
    await asyncio.sleep(0)
    with pytest.raises(ApiError) as refused:
        await queue.run(Client().request, search, 3)
    assert refused.value.status == 503
    assert refused.value.headers == {"Retry-After": "1"}
    assert refused.value.body == {"detail": "Too many searches are waiting; try again shortly."}
    release.set()
    assert await first == 0 and [await w for w in waiting] == [1, 2]
    assert ran == [0, 1, 2]
    assert queue.counts == {"run": 3, "refused": 1, "dropped": 0}


async def test_a_search_whose_client_has_gone_is_dropped_before_it_runs():
    blocked = Blocked(limit=10)
    queue, release, ran, search = blocked.queue, blocked.release, blocked.ran, blocked.search
    first = await blocked.start()
    gone, closing, staying = Client(), Client(), Client()
    futures = [asyncio.ensure_future(queue.run(c.request, search, n)) for n, c in ((1, gone), (2, closing), (3, staying))]
    await asyncio.sleep(0)
    gone.left = True
    closing.left = True
    release.set()
    assert await first == 0
    for future in futures[:2]:
        with pytest.raises(ApiError) as dropped:
            await future
        assert dropped.value.status == CLIENT_GONE
    assert await futures[2] == 3
    assert ran == [0, 3]
    assert queue.counts == {"run": 2, "refused": 0, "dropped": 2}
    # A client already gone when it asks is not queued at all.
    late = Client()
    late.left = True
    with pytest.raises(ApiError):
        await queue.run(late.request, search, 4)
    assert queue.counts["dropped"] == 3 and ran == [0, 3]


async def test_an_error_in_a_search_reaches_its_request_and_the_queue_goes_on():
    queue = SearchQueue(limit=4)

    def broken():
        raise ValueError("bad")

    with pytest.raises(ValueError):
        await queue.run(Client().request, broken)
    assert await queue.run(Client().request, lambda: 7) == 7
