"""The dispatcher that answers a request, by the routes of ``routes.py``.

docsrv runs on aiohttp's low-level ``web.Server`` with this small router rather than on
``web.Application``: the application's routing and request objects cost more a request than
a cached reply takes to find (``bench/lane_costs.py`` measures what each part costs). A GET first looks
for a ready reply under its path and query; only a miss reaches a handler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from operator import itemgetter
from time import perf_counter
from typing import Any
from urllib.parse import quote

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion10, HttpVersion11
from multidict import MultiDict, MultiDictProxy
from yarl import URL

from ..http import hits
from ..http.aiohttp_seam import as_http11
from ..http.caching import validators
from ..http.compression import choose
from ..http.fast_lane import FastLane, FastLaneServer
from ..http.protocol import VERSION_NOT_SUPPORTED, JsonErrorServer
from ..http.reply import Reply
from ..http.reply_cache import Key
from ..snapshot.commands import FileChanged
from . import v2
from .errors import ApiError
from .params import excerpt
from .request import ApiRequest
from .routes import ROUTES
from .routing import Route, Router
from .state import ALLOW, ApiState

log = logging.getLogger("docsrv")

ROUTER = Router(ROUTES)
HTTP_VERSIONS = (HttpVersion11, HttpVersion10)


class Dispatcher:
    """The request handler of the low-level server.

    A GET or HEAD is looked up in the reply cache under the request's own key first: that one
    dictionary lookup answers nearly every request of a hot replica. On a miss, the request is
    routed, every query parameter its route does not read is dropped, the rest are put in order,
    and the reply is looked up under that canonical key, then made by the route's handler from
    the canonical request alone. The request's own key is kept as an alias of the canonical one.
    """

    def __init__(self, state: ApiState) -> None:
        self.state = state

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        started = perf_counter()
        state = self.state
        method = request.method
        hit = False
        if request.version not in HTTP_VERSIONS:
            return await self.unsupported_version(request, state)
        origin = request.headers.get(hdrs.ORIGIN)
        cors = state.cors.headers(origin)
        if method == "GET" or method == "HEAD":
            if request.raw_path[:1] != "/":
                request = origin_form(request)
            status, reply, hit = await self.get(request, state)
        else:
            if method == "OPTIONS":
                reply = state.preflight
                cors = state.cors.preflight(origin)
            else:
                reply = state.uncached(405, {"detail": f'Method "{excerpt(method)}" not allowed.'}, {"Allow": ALLOW})
                reply.route = "method not allowed"
            status = reply.status
        if status == 304:
            response = web.Response(status=304, headers={**reply.headers_304, **cors})
        else:
            response = web.Response(body=reply.body, status=status, headers={**reply.headers, **cors})
        if state.draining:
            response.force_close()  # this worker is stopping: the client reconnects to another
        runtime = state.runtime
        elapsed = perf_counter() - started
        runtime.metrics.observe(reply.route, status, elapsed, hit)
        if runtime.access_log:
            runtime.log_access(request.remote, method, request.raw_path, request.headers.get("User-Agent"), status,
                               len(reply.body) if status != 304 else 0, elapsed, reply.route, state.snapshot_name)
        return response

    async def get(self, request: web.BaseRequest, state: ApiState) -> tuple[int, Reply, bool]:
        """The status and representation that answer a GET or HEAD, and whether it came from
        the cache: under the request's own key as the fast lane finds it, else by its canonical
        key, or made anew; decided as the lane decides (``hits.py``)."""
        ask = ask_of(request, state.fixed_base)
        reply = state.cache.get(ask.key)
        hit = reply is not None
        if reply is None:
            reply, hit = await self.miss(request, state, ask.key)
        found = hits.decide(reply, ask, state.last_modified)
        if found is None:  # compressed on first demand (a large body off the event loop)
            assert ask.coding is not None
            sent = await state.compressed(reply, ask.coding)
            found = hits.status(sent, ask, state.last_modified), sent
        return *found, hit

    @staticmethod
    async def unsupported_version(request: web.BaseRequest, state: ApiState) -> web.StreamResponse:
        """505, written as HTTP/1.1 (prepared here, as aiohttp would write the request's version)."""
        reply = state.uncached(505, {"detail": VERSION_NOT_SUPPORTED})
        cors = state.cors.headers(request.headers.get(hdrs.ORIGIN))
        response = web.Response(body=reply.body, status=505, headers={**reply.headers, **cors})
        response.force_close()
        await response.prepare(as_http11(request))
        state.runtime.metrics.observe("unsupported version", 505, 0.0)
        return response

    async def miss(self, request: web.BaseRequest, state: ApiState, key: Key) -> tuple[Reply, bool]:
        """A GET or HEAD whose own key is not cached: by its canonical key, or made anew; and
        whether it came from the cache."""
        found = ROUTER.match(request.path)
        if found is None:
            reply = self.unrouted(request, state)
            reply.route = "unmatched"
            return reply, False
        route, params = found
        if route.checks_host and state.fixed_base is None and request.host not in state.allowed_hosts:
            reply = state.uncached(400, {"detail": "Invalid Host header."})
            reply.route = route.template
            return reply, False
        query = sorted(((k, v) for k, v in request.query.items() if route.accepts(k)), key=itemgetter(0))
        url = URL.build(path=request.path, query=query)
        target = str(url)
        canonical = hits.cache_key(state.fixed_base, request.host.lower(), target)
        cached = state.cache.get(canonical)
        hit = cached is not None
        if cached is not None:
            reply = cached
        else:
            base = state.fixed_base or f"http://{request.host.lower()}"
            asked = ApiRequest(params, MultiDictProxy(MultiDict(query)), url.raw_path, base, gone_check(request))
            reply = await self.answer(asked, state, route)
            if reply.etag is not None:
                state.cache.put(canonical, reply)
        if reply.etag is not None and canonical != key:
            state.cache.alias(key, canonical)
        return reply, hit

    @staticmethod
    async def answer(request: ApiRequest, state: ApiState, route: Route) -> Reply:
        try:
            reply = await route.handler(request, state)
        except ApiError as error:
            reply = state.uncached(error.status, error.body, error.headers)
        except FileChanged as error:
            state.problem = str(error)
            reply = state.uncached(503, {"detail": "This record's file changed on disk; the snapshot is being reloaded."},
                                   {"Retry-After": "2"})
        except Exception:
            log.exception("error answering %s", excerpt(request.path, 200))
            reply = state.uncached(500, {"detail": "Internal server error."})
        reply.route = route.template
        return reply

    @staticmethod
    def unrouted(request: web.BaseRequest, state: ApiState) -> Reply:
        """A path no route takes: the slashed path when a route takes that, else 404."""
        path = request.path
        if not path.endswith("/") and ROUTER.match(path + "/") is not None:
            location = quote(path, safe="/:@!$&'()*+,;=-._~") + "/"
            if request.query_string:
                location += "?" + request.rel_url.raw_query_string
            return state.uncached(301, {"detail": "Moved permanently.", "location": location}, {"Location": location})
        return state.uncached(404, v2.NOT_FOUND)


def ask_of(request: web.BaseRequest, fixed_base: str | None) -> hits.Ask:
    """What a GET or HEAD asks of the reply cache (``hits.py``), as aiohttp read it."""
    headers = request.headers
    return hits.Ask(hits.cache_key(fixed_base, request.host, request.raw_path), request.method == "GET",
               choose(headers.get(hdrs.ACCEPT_ENCODING, "")),
               validators(headers.getall(hdrs.IF_NONE_MATCH, None), headers.get(hdrs.IF_MODIFIED_SINCE)))


def gone_check(request: web.BaseRequest) -> Callable[[], bool]:
    """Whether the client of ``request`` has gone, asked later (a search waits its turn)."""
    transport = request.transport
    return transport.is_closing if transport is not None else always


def always() -> bool:
    return True


def origin_form(request: web.BaseRequest) -> web.BaseRequest:
    """An absolute-form request (``GET http://host/path HTTP/1.1``) as the origin-form one, whose
    host is its Host header's, as the original's Django behind gunicorn read it.

    aiohttp takes such a request's host from the target instead, while the reply's links were
    built from the Host header: a target naming an allowed host then let any Host header into a
    cached body. Here the allowlist, the cache key and the links all read one host."""
    return request.clone(rel_url=request.rel_url)


def serve_state(server: web.Server, state: ApiState) -> None:
    """Let ``server`` (``init_server``'s) answer from ``state`` from now on."""
    dispatcher = server.request_handler
    assert isinstance(dispatcher, Dispatcher)
    dispatcher.state = state
    if isinstance(server, FastLaneServer):
        server.lane.serve(state)


def init_server(state: ApiState, **kwargs: Any) -> web.Server:
    """The low-level aiohttp server answering every route above from ``state``, with the fast
    lane in front unless the settings turn it off."""
    if state.settings.fast_path:
        return FastLaneServer(Dispatcher(state), lane=FastLane(state), **kwargs)
    return JsonErrorServer(Dispatcher(state), **kwargs)
