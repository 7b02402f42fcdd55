"""What one loaded snapshot serves with: the store, its search index, the reply cache, and
serializers (one per API). A worker serves one ApiState all its life: a reload starts new workers on
the new snapshot (see ``serve/supervisors/master.py``), so every response comes wholly from one snapshot.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import orjson

from ..config import Settings
from ..edge.keys import purge_keys
from ..http.caching import http_date, strong_etag
from ..http.compression import OFFLOAD_BYTES, compress
from ..http.cors import Cors
from ..http.hosts import AllowedHosts
from ..http.offload import offload
from ..http.reply import Reply
from ..http.reply_cache import ReplyCache
from ..observe.runtime import Runtime
from ..search.query import SearchIndex
from ..store.loaded import Store
from .admission import SearchQueue

T = TypeVar("T")
#: A list page that renders more items than this is made in the heavy-work thread.
OFFLOAD_ITEMS = 100


#: How v1 encodes every object, envelope and schema document: keys sorted, as the original's v1
#: serializer wrote them (DECISIONS.md section 4).
V1_JSON = orjson.OPT_UTC_Z | orjson.OPT_SORT_KEYS


def encoded_each(render: Callable[[Any], Any], items: Sequence[Any], option: int = orjson.OPT_UTC_Z) -> list[orjson.Fragment]:
    """Each item rendered and encoded on its own: encoding a long page in one call would hold the
    GIL (and so the event loop, when the page is made in the heavy-work thread) for milliseconds."""
    return [orjson.Fragment(orjson.dumps(render(item), option=option)) for item in items]


ALLOW = "GET, HEAD, OPTIONS"
#: The answer to a CORS preflight, its Access-Control-Allow-Origin aside (``http/cors.py``).
PREFLIGHT = {
    "Access-Control-Allow-Methods": ALLOW,
    "Access-Control-Allow-Headers": "*",
    "Access-Control-Max-Age": "86400",
    "Allow": ALLOW,
}


class ApiState:
    def __init__(self, store: Store, search: SearchIndex, settings: Settings, runtime: Runtime) -> None:
        self.search = search
        self.settings = settings
        self.runtime = runtime
        self.cache = ReplyCache(settings.response_cache_bytes)
        self.cache.stamp = store.manifest.sequence
        runtime.metrics.cache = self.cache
        self.searches = SearchQueue(settings.search_queue)
        runtime.metrics.searches = self.searches
        self.fixed_base = settings.public_url.rstrip("/") if settings.public_url else None
        self.allowed_hosts = AllowedHosts(settings.allowed_hosts)
        #: Set when this worker stops: every response then closes its connection.
        self.draining = False
        #: Why the snapshot can no longer be trusted, when a worker found its files changed.
        self.problem: str | None = None
        #: Who may read replies from a browser: the headers of each reply's CORS answer, which
        #: the dispatcher and the fast lane add by the request's Origin (so every reply varies by it).
        self.cors = Cors(store.public_url.split("://", 1)[1])
        self._serve(store)

    def _serve(self, store: Store) -> None:
        """What this state takes from the snapshot it serves."""
        self.store = store
        self.last_modified = store.created_at
        self.snapshot_name = store.name
        self._common = {
            "Content-Type": "application/json",
            "X-Snapshot": store.name,
        }
        self._ok = {
            **self._common,
            "Cache-Control": self.settings.cache_control,
            "Last-Modified": http_date(store.created_at),
            "Vary": "Accept-Encoding, Origin",
        }
        self._error = {**self._common, "Cache-Control": "no-cache", "Vary": "Origin"}
        self._serializers: dict[type, object] = {}
        self.preflight = self.empty(204, PREFLIGHT)
        self.preflight.route = "preflight"

    def following(self, store: Store, touched: Iterable[str], search: SearchIndex | None = None) -> ApiState:
        """The state that serves ``store``, a changeset applied to this state's (``store/changes.py``),
        with ``search``, its index, when the changeset changed pages, sharing this one's cache,
        search queue and runtime: the cache then treats each reply with a
        key in ``touched`` as gone, and gives every other the new snapshot's ``X-Snapshot`` and
        ``Last-Modified`` when it is next asked for (``ReplyCache.advance``). A request in flight
        finishes with the state it began with."""
        made = copy.copy(self)
        made._serve(store)
        if search is not None:
            made.search = search
        made.cache.advance(store.manifest.sequence, touched, {"X-Snapshot": store.name, "Last-Modified": made._ok["Last-Modified"]})
        return made

    def serializer(self, cls: type[T]) -> T:
        """The serializer ``cls(store)`` of this snapshot, made once."""
        found = self._serializers.get(cls)
        if found is None:
            found = self._serializers[cls] = cls(self.store)  # type: ignore[call-arg]
        return found  # type: ignore[return-value]

    def ok(self, data: object, keys: Iterable[str], option: int = orjson.OPT_UTC_Z, list_key: str | None = None) -> Reply:
        """A 200 whose body is ``data`` as JSON, with validators and the purge keys ``keys`` (and
        ``list_key``, for a page of a list: ``edge/keys.py``)."""
        body = data if isinstance(data, bytes) else orjson.dumps(data, option=option)
        etag = strong_etag(body)
        named = purge_keys(keys, list_key)
        headers = {**self._ok, "ETag": etag, "Surrogate-Key": " ".join(named), "Cache-Tag": ",".join(named)}
        reply = Reply(200, body, headers, etag=etag)
        reply.stamp = self.store.manifest.sequence
        return reply

    async def ok_made(
        self, count: int, make: Callable[[], tuple[object, Iterable[str]]], option: int = orjson.OPT_UTC_Z, list_key: str | None = None
    ) -> Reply:
        """A 200 of what ``make()`` returns (the data and its purge keys), made in the heavy-work
        thread when it renders more than OFFLOAD_ITEMS items."""
        if count > OFFLOAD_ITEMS:
            return await offload(self._made, make, option, list_key)
        return self._made(make, option, list_key)

    def _made(self, make: Callable[[], tuple[object, Iterable[str]]], option: int, list_key: str | None) -> Reply:
        data, keys = make()
        return self.ok(data, keys, option, list_key)

    async def compressed(self, reply: Reply, coding: str) -> Reply:
        """The variant of ``reply`` compressed with ``coding``: made once (a large body off the
        event loop), then kept on the reply, and charged to the cache entry that owns it."""
        body = reply.body
        data = await offload(compress, body, coding) if len(body) > OFFLOAD_BYTES else compress(body, coding)
        variant = reply.variants.get(coding)  # another request may have made it meanwhile
        if variant is None:
            variant = reply.compressed(coding, data)
            self.cache.add_variant(reply, coding, variant)
        return variant

    def uncached(self, status: int, data: dict, headers: dict[str, str] | None = None) -> Reply:
        """A reply no cache should keep: errors, and live facts such as health."""
        return Reply(status, orjson.dumps(data, option=orjson.OPT_UTC_Z), {**self._error, **(headers or {})})

    def text(self, status: int, body: bytes, content_type: str) -> Reply:
        """A reply in another format than JSON (the Prometheus metrics), never cached."""
        return Reply(status, body, {**self._error, "Content-Type": content_type})

    def empty(self, status: int, headers: dict[str, str]) -> Reply:
        """A reply with no body (a CORS preflight)."""
        reply = Reply(status, b"", {**self._common, **headers, "Vary": "Origin"})
        del reply.headers["Content-Type"]
        return reply
