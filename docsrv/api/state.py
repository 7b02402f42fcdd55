"""What one loaded snapshot serves with: the store, its search index, the reply cache, and
rendered shapes. A worker serves one ApiState all its life: a reload starts new workers on
the new snapshot (see supervisor.py), so every response comes wholly from one snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

import orjson

from ..config import Settings
from ..http.caching import ReplyCache, http_date, strong_etag
from ..http.compression import MIN_SIZE, compress
from ..http.purge import purge_keys
from ..runtime import Runtime
from ..search import SearchIndex
from ..store import Store

T = TypeVar("T")


class ApiError(Exception):
    """An error reply: raised by a handler, rendered by the dispatcher."""

    def __init__(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
        super().__init__(status, body)
        self.status = status
        self.body = body
        self.headers = headers or {}


class Reply:
    """A response ready to send: status, encoded body, and every header that goes with it."""

    __slots__ = ("status", "body", "etag", "headers", "headers_304", "route", "compressible", "_variants")

    def __init__(self, status: int, body: bytes, headers: dict[str, str], *, etag: str | None = None) -> None:
        self.status = status
        self.body = body
        self.headers = headers
        self.etag = etag
        #: The route template that answered, set by the dispatcher (a label for metrics).
        self.route = ""
        self.headers_304 = {k: v for k, v in headers.items() if k != "Content-Type"} if etag else headers
        self.compressible = etag is not None and len(body) > MIN_SIZE
        self._variants: dict[str, Reply] | None = None

    @property
    def footprint(self) -> int:
        """The bytes this reply may come to hold: its body, and room for its compressed variants
        (made later, on demand, each smaller than the body), plus its headers."""
        return len(self.body) * (2 if self.compressible else 1) + 200

    def variant(self, coding: str) -> Reply:
        """This reply compressed with ``coding``, made on first use and kept."""
        variants = self._variants
        if variants is None:
            variants = self._variants = {}
        found = variants.get(coding)
        if found is None:
            assert self.etag is not None
            etag = f'{self.etag[:-1]}-{coding}"'
            headers = {**self.headers, "Content-Encoding": coding, "ETag": etag}
            found = variants[coding] = Reply(self.status, compress(self.body, coding), headers, etag=etag)
            found.route = self.route
        return found


ALLOW = "GET, HEAD, OPTIONS"
#: The answer to a CORS preflight: any origin may read, with any request header.
PREFLIGHT = {
    "Access-Control-Allow-Methods": ALLOW,
    "Access-Control-Allow-Headers": "*",
    "Access-Control-Max-Age": "86400",
    "Allow": ALLOW,
}


class ApiState:
    def __init__(self, store: Store, search: SearchIndex, settings: Settings, runtime: Runtime) -> None:
        self.store = store
        self.search = search
        self.settings = settings
        self.runtime = runtime
        self.cache = ReplyCache(settings.response_cache_bytes)
        self.last_modified = store.created_at
        self.fixed_base = settings.public_url.rstrip("/") if settings.public_url else None
        self._common = {
            "Content-Type": "application/json",
            "Access-Control-Allow-Origin": "*",
            "X-Snapshot": store.name,
        }
        self._ok = {
            **self._common,
            "Cache-Control": settings.cache_control,
            "Last-Modified": http_date(store.created_at),
            "Vary": "Accept-Encoding",
        }
        self._error = {**self._common, "Cache-Control": "no-cache"}
        self._shapes: dict[type, object] = {}
        self.preflight = self.empty(204, PREFLIGHT)
        self.preflight.route = "preflight"

    def shapes(self, cls: type[T]) -> T:
        """The renderer ``cls(store)`` of this snapshot, made once."""
        found = self._shapes.get(cls)
        if found is None:
            found = self._shapes[cls] = cls(self.store)
        return found  # type: ignore[return-value]

    def ok(self, data, keys: Iterable[str]) -> Reply:
        """A 200 whose body is ``data`` as JSON, with validators and the purge keys ``keys``."""
        body = data if isinstance(data, bytes) else orjson.dumps(data, option=orjson.OPT_UTC_Z)
        etag = strong_etag(body)
        named = purge_keys(keys)
        headers = {**self._ok, "ETag": etag, "Surrogate-Key": " ".join(named), "Cache-Tag": ",".join(named)}
        return Reply(200, body, headers, etag=etag)

    def uncached(self, status: int, data: dict, headers: dict[str, str] | None = None) -> Reply:
        """A reply no cache should keep: errors, and live facts such as health."""
        return Reply(status, orjson.dumps(data, option=orjson.OPT_UTC_Z), {**self._error, **(headers or {})})

    def text(self, status: int, body: bytes, content_type: str) -> Reply:
        """A reply in another format than JSON (the Prometheus metrics), never cached."""
        return Reply(status, body, {**self._error, "Content-Type": content_type})

    def empty(self, status: int, headers: dict[str, str]) -> Reply:
        """A reply with no body (a CORS preflight)."""
        reply = Reply(status, b"", {**self._common, **headers})
        del reply.headers["Content-Type"]
        return reply
