"""Every route docsrv serves, and the dispatcher that answers a request.

docsrv runs on aiohttp's low-level ``web.Server`` with this small router rather than on
``web.Application``: the application's routing and request objects cost 12-17 µs a request,
more than a cached reply takes to find (see shared notes on performance). A GET first looks
for a ready reply under its path and query; only a miss reaches a handler.
"""

from __future__ import annotations

import logging
from time import perf_counter
from urllib.parse import quote

from aiohttp import hdrs, web

from ..http.caching import not_modified
from ..http.compression import choose
from ..http.protocol import JsonErrorServer
from . import docsearch, openapi, ops, v1, v2
from .routing import Route, Router
from .state import ALLOW, ApiError, ApiState, Reply

log = logging.getLogger("docsrv")

ROUTES = (
    Route("/api/v2/project/", v2.project_list),
    Route("/api/v2/project/{id}/", v2.project_detail),
    Route("/api/v2/project/{id}/active_versions/", v2.active_versions),
    Route("/api/v2/version/", v2.version_list),
    Route("/api/v2/version/{id}/", v2.version_detail),
    Route("/api/v2/build/", v2.build_list),
    Route("/api/v2/build/{id}/", v2.build_detail),
    Route("/api/v2/docsearch/", docsearch.docsearch),
    Route("/api/v1/", v1.root),
    Route("/api/v1/build/", v1.build_list),
    Route("/api/v1/build/schema/", v1.schema_handler(v1.BUILD)),
    Route("/api/v1/build/{id}/", v1.build_detail),
    Route("/api/v1/file/", v1.file_list),
    Route("/api/v1/file/schema/", v1.schema_handler(v1.FILE)),
    Route("/api/v1/file/search/", docsearch.file_search),
    Route("/api/v1/file/anchor/", docsearch.anchor_search),
    Route("/api/v1/file/{id}/", v1.file_detail),
    Route("/api/v1/project/", v1.project_list),
    Route("/api/v1/project/schema/", v1.schema_handler(v1.PROJECT)),
    Route("/api/v1/project/{id}/", v1.project_detail),
    Route("/api/v1/project/{id}", v1.project_detail),
    Route("/api/v1/user/", v1.user_list),
    Route("/api/v1/user/schema/", v1.schema_handler(v1.USER)),
    Route("/api/v1/user/{id}/", v1.user_detail),
    Route("/api/v1/version/", v1.version_list),
    Route("/api/v1/version/schema/", v1.schema_handler(v1.VERSION)),
    Route("/api/v1/version/{id}/", v1.version_detail),
    Route("/api/v1/version/{id}", v1.version_detail),
    Route("/healthz", ops.healthz),
    Route("/readyz", ops.readyz),
    Route("/metrics", ops.metrics),
    Route("/openapi.json", openapi.document),
)

ROUTER = Router(ROUTES)


class Dispatcher:
    """The request handler of the low-level server."""

    def __init__(self, state: ApiState) -> None:
        self.state = state

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        started = perf_counter()
        state = self.state
        method = request.method
        status = None
        if method == "GET" or method == "HEAD":
            raw = request.raw_path
            key = raw if state.fixed_base else (request.scheme, request.host, raw)
            reply = state.cache.get(key)
            if reply is None:
                reply = await self.answer(request, state)
                if reply.etag is not None:
                    state.cache.put(key, reply)
            headers = request.headers
            if reply.compressible:
                coding = choose(headers.get(hdrs.ACCEPT_ENCODING, ""))
                if coding is not None:
                    reply = reply.variant(coding)
            if reply.etag is not None and (hdrs.IF_NONE_MATCH in headers or hdrs.IF_MODIFIED_SINCE in headers):
                if not_modified(headers, reply.etag, state.last_modified):
                    status = 304
                    response = web.Response(status=304, headers=reply.headers_304)
        elif method == "OPTIONS":
            reply = state.preflight
        else:
            reply = state.uncached(405, {"detail": f'Method "{method}" not allowed.'}, {"Allow": ALLOW})
            reply.route = "method not allowed"
        if status is None:
            status = reply.status
            response = web.Response(body=reply.body, status=status, headers=reply.headers)
        runtime = state.runtime
        elapsed = perf_counter() - started
        runtime.metrics.observe(reply.route, status, elapsed)
        if runtime.access_log:
            runtime.log_access(request, status, len(reply.body) if status != 304 else 0, elapsed, reply.route, state.store.name)
        return response

    async def answer(self, request: web.BaseRequest, state: ApiState) -> Reply:
        path = request.path
        found = ROUTER.match(path)
        if found is None:
            reply = self.unrouted(request, state)
            reply.route = "unmatched"
            return reply
        route, params = found
        try:
            reply = await route.handler(request, state, params)
        except ApiError as error:
            reply = state.uncached(error.status, error.body, error.headers)
        except Exception:
            log.exception("error answering %s", request.raw_path)
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


def init_server(state: ApiState, **kwargs) -> web.Server:
    """The low-level aiohttp server answering every route above from ``state``."""
    return JsonErrorServer(Dispatcher(state), **kwargs)
