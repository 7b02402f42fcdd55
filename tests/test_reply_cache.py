"""The reply cache: every byte it holds counted, never past its limit, hot replies kept through a
flood of one-off keys (S3-FIFO), aliases of canonical keys, compressed variants charged."""

import gc
import tracemalloc

import pytest

from docsrv.http.reply import Reply
from docsrv.http.reply_cache import Entry, ReplyCache


def reply(body: bytes, tag: str = "t") -> Reply:
    headers = {"Content-Type": "application/json", "ETag": f'"{tag}"', "Surrogate-Key": f"v2 project-{tag}", "Cache-Tag": f"v2,project-{tag}"}
    return Reply(200, body, headers, etag=f'"{tag}"')


def traced(limit: int, fill) -> tuple[ReplyCache, int]:
    """A cache of ``limit`` bytes after ``fill(cache)``, and every byte allocated since it was made
    that is still held."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cache = ReplyCache(limit)
        fill(cache)
        gc.collect()
        return cache, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("key_length", [3000, 10])
def test_the_bytes_it_counts_cover_what_it_holds_and_stay_within_the_limit(key_length):
    """Long keys (a flood of junk URLs) and tiny entries (where bookkeeping is most of it)."""
    limit = 2 << 20

    def flood(cache: ReplyCache) -> None:
        for n in range(25_000):  # far more than fits: small and large bodies
            key = f"/api/v2/project/1/?x={n}{'y' * (n % key_length)}"
            cache.put(key, reply(b"{}" * (n % 900), str(n)))
            cache.alias(f"{key}&z=1", key)
            assert cache.nbytes <= limit

    cache, held = traced(limit, flood)
    assert len(cache) > 100 and cache.evictions > 10_000
    # What the cache really holds (every allocation since it was made) is within what it counts.
    assert held <= cache.nbytes * 1.05 + (64 << 10), (held, cache.nbytes)


def test_replies_replaced_again_and_again_under_keys_that_fit_stay_counted():
    """A reply replaced under its key (a reply a changeset touched, made anew) leaves its entry in
    its queue until the queue reaches it. Those entries are counted: replaced again and again in
    a cache that never fills, they once held memory the count did not see, without bound."""
    limit = 1 << 20

    def replaced(cache: ReplyCache) -> None:
        for n in range(50_000):
            cache.put(f"/api/v2/build/{n % 7}/{'x' * 200}", reply(b"{}" * 100, str(n % 7)))
            assert cache.nbytes <= limit

    cache, held = traced(limit, replaced)
    assert len(cache) == 7
    assert held <= cache.nbytes * 1.05 + (64 << 10), (held, cache.nbytes)


def test_a_reply_larger_than_the_small_queue_is_not_kept():
    cache = ReplyCache(100_000)
    cache.put("/big", reply(b"x" * 50_000))
    assert cache.get("/big") is None and len(cache) == 0


def test_hot_entries_survive_a_flood_of_one_off_keys():
    cache = ReplyCache(1 << 20)
    hot = [f"/api/v2/version/{n}/" for n in range(50)]
    for key in hot:
        cache.put(key, reply(b"v" * 500, key))
    for n in range(200_000):
        if n % 10 == 0:  # hot traffic beside the flood: one request in ten
            key = hot[(n // 10) % len(hot)]
            if cache.get(key) is None:
                cache.put(key, reply(b"v" * 500, key))
        flood = f"/api/v2/project/1/?x={n}{'f' * 700}"
        assert cache.get(flood) is None
        cache.put(flood, reply(b"p" * 500, str(n)))
    assert all(cache.get(key) is not None for key in hot)
    assert cache.nbytes <= 1 << 20


def test_plain_fifo_would_have_lost_them():
    """The flood above is a real threat: the same flood through a cache with no second queue
    (everything evicted in order of arrival) loses every hot entry. S3-FIFO's main queue is what
    keeps them, so the test above cannot pass by the flood being too small."""
    from collections import OrderedDict

    fifo: OrderedDict = OrderedDict()
    hot = [f"/api/v2/version/{n}/" for n in range(50)]
    room = (1 << 20) // 1500
    for n in range(20_000):
        if n % 10 == 0:
            fifo.setdefault(hot[(n // 10) % len(hot)], True)
        fifo[f"/x/{n}"] = True
        while len(fifo) > room:
            fifo.popitem(last=False)
    assert sum(key in fifo for key in hot) < len(hot) // 2


def test_an_alias_answers_with_its_target_and_dangles_harmlessly_when_the_target_goes():
    cache = ReplyCache(1 << 20)
    made = reply(b"{}", "a")
    cache.put("/api/v2/version/?active=true&project__slug=pip", made)
    cache.alias("/api/v2/version/?project__slug=pip&active=true", "/api/v2/version/?active=true&project__slug=pip")
    assert cache.get("/api/v2/version/?project__slug=pip&active=true") is made
    cache.put("/api/v2/version/?active=true&project__slug=pip", reply(b"[]", "b"))  # replaced
    assert cache.get("/api/v2/version/?project__slug=pip&active=true").body == b"[]"
    assert cache.get("/nothing") is None


def test_compressed_variants_are_charged_to_their_entry():
    cache = ReplyCache(1 << 20)
    made = reply(b"x" * 5000)
    cache.put("/k", made)
    before = cache.nbytes
    variant = made.compressed("gzip", b"z" * 300)
    cache.add_variant(made, "gzip", variant)
    assert made.variants["gzip"] is variant
    assert cache.nbytes - before >= 300 + len(variant.headers)
    assert variant.etag == '"t-gzip"' and variant.headers["Content-Encoding"] == "gzip"
    cache.add_variant(made, "gzip", made.compressed("gzip", b"other"))  # made twice: the first is kept
    assert made.variants["gzip"] is variant


def stamped(body: bytes, tag: str, snapshot: str = "s1") -> Reply:
    headers = {"Content-Type": "application/json", "X-Snapshot": snapshot, "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT",
               "ETag": f'"{tag}"', "Surrogate-Key": f"v2 project-{tag}", "Cache-Tag": f"v2,project-{tag}"}
    return Reply(200, body, headers, etag=f'"{tag}"')


def test_a_changeset_drops_what_it_touched_and_renames_the_rest_when_next_asked():
    """``advance``: a reply showing a touched key is gone (a miss, its bytes given back); any
    other keeps its body and ETag, and its headers, 304 headers, wire heads and compressed
    variants take the new snapshot's name, in their places. Nothing is scanned until asked."""
    cache = ReplyCache(1 << 20)
    for tag in ("a", "b"):
        made = stamped(b"{}" * 200, tag)
        cache.put(f"/{tag}", made)
        cache.add_variant(made, "gzip", made.compressed("gzip", b"zipped"))
    cache.alias("/b?x=1", "/b")
    held = cache.nbytes
    cache.advance(2, ["project-a", "build-9"], {"X-Snapshot": "s2-longer", "Last-Modified": "Tue, 02 Jan 2024 00:00:00 GMT"})
    assert cache.nbytes == held  # nothing done yet
    assert cache.get("/a") is None and len(cache) == 2  # the alias of /b and /b are left
    kept = cache.get("/b?x=1")
    assert kept is not None and kept.stamp == 2 and kept.body == b"{}" * 200 and kept.etag == '"b"'
    assert list(kept.headers) == ["Content-Type", "X-Snapshot", "Last-Modified", "ETag", "Surrogate-Key", "Cache-Tag"]
    assert kept.headers["X-Snapshot"] == "s2-longer" and kept.headers_304["Last-Modified"] == "Tue, 02 Jan 2024 00:00:00 GMT"
    assert b"X-Snapshot: s2-longer\r\n" in kept.wire and b"X-Snapshot: s2-longer\r\n" in kept.wire_304
    assert kept.variants["gzip"].headers["X-Snapshot"] == "s2-longer" and kept.variants["gzip"].headers["ETag"] == '"b-gzip"'
    # The bytes counted follow: /a's reply given back (its entry stays, vacant, for the reply made
    # anew), /b's grown by its longer name.
    dropped = sum(entry.nbytes for entry in cache._small if entry.vacant)
    assert dropped == Entry("/a", None, None).nbytes
    assert cache.nbytes == sum(entry.nbytes for entry in cache._entries.values()) + dropped < held


def test_a_reply_made_anew_after_a_changeset_takes_the_place_of_the_one_dropped():
    """A hot reply a changeset touched, made anew, keeps its entry and its standing in the main
    queue: a worker that applies changesets while serving holds no more entries than a fresh one
    asked the same, and a flood of one-off keys after that still does not push it out."""
    cache = ReplyCache(200_000)
    cache.put("/hot", stamped(b"{}" * 100, "hot"))
    for n in range(300):  # enough one-off keys to cycle the small queue: /hot, asked, goes to main
        cache.get("/hot")
        cache.put(f"/once-{n}", stamped(b"{}" * 100, f"once-{n}"))
    assert cache._entries["/hot"].main
    for sequence in range(1, 501):
        cache.advance(sequence, ["project-hot"], {"X-Snapshot": f"s{sequence}"})
        assert cache.get("/hot") is None
        made = stamped(b"{}" * 100, "hot", f"s{sequence}")
        made.stamp = sequence
        cache.put("/hot", made)
        assert cache.get("/hot") is made and cache._entries["/hot"].main
    assert sum(1 for entry in cache._main if entry.key == "/hot") == 1
    assert len(cache._small) + len(cache._main) <= len(cache) + 1  # no trail of entries left behind


def test_a_reply_made_before_a_changeset_and_kept_after_it_is_checked_too():
    """A request under way when a changeset lands finishes with the state it began with; its
    reply, kept then, is stamped with that state and checked when next asked for."""
    cache = ReplyCache(1 << 20)
    cache.advance(5, ["project-a"], {"X-Snapshot": "s5"})
    late = stamped(b"{}", "a")
    late.stamp = 4
    cache.put("/a", late)
    assert cache.get("/a") is None


def test_the_touched_keys_are_bounded(monkeypatch):
    from docsrv.http import reply_cache

    monkeypatch.setattr(reply_cache, "MAX_TOUCHED", 10)
    cache = ReplyCache(1 << 20)
    cache.put("/a", stamped(b"{}", "a"))
    cache.advance(1, [f"build-{n}" for n in range(11)], {"X-Snapshot": "s1"})
    assert len(cache) == 0 and cache.nbytes == 0 and not cache._touched
