"""Every private name of aiohttp that docsrv touches, in one place, checked when it is imported.

docsrv extends aiohttp's connection handler (the fast lane, JSON errors, the first-request
deadline) and answers a request aiohttp's parser read with a version it does not speak. aiohttp
keeps what that needs private, and its internals change between minor releases: so no other
module names them, and an aiohttp release that renames or drops one fails at import with the
names, rather than serving wrongly. pyproject.toml pins the minor version these were read from.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.http import HttpVersion11
from aiohttp.web_protocol import RequestHandler

#: Attributes of a connection handler read or set here (``__slots__`` of RequestHandler and its bases).
HANDLER_ATTRIBUTES = ("_request_count", "_keepalive_handle", "_next_keepalive_close_time", "_keepalive_timeout", "_loop")
#: Methods of a connection handler called or overridden (``_handle_request`` answers one request).
HANDLER_METHODS = ("_process_keepalive", "_handle_request")
#: What a request keeps of its parsed message (``as_http11``): the message and its version.
REQUEST_ATTRIBUTES = ("_message", "_version")
#: Fields of the parsed message replaced by ``as_http11``.
MESSAGE_FIELDS = ("version", "should_close")
#: What the low-level server keeps of the keyword arguments its handlers are made with.
SERVER_ATTRIBUTES = ("_kwargs", "_loop")


def missing_names() -> list[str]:
    """The private names above that this aiohttp lacks."""
    slots = set(chain.from_iterable(getattr(cls, "__slots__", ()) for cls in RequestHandler.__mro__))
    missing = [f"RequestHandler.{name}" for name in HANDLER_ATTRIBUTES if name not in slots]
    missing += [f"RequestHandler.{name}()" for name in HANDLER_METHODS if not callable(getattr(RequestHandler, name, None))]
    missing += [f"BaseRequest.{name}" for name in REQUEST_ATTRIBUTES if name not in web.BaseRequest.ATTRS]
    from aiohttp.http_parser import RawRequestMessage

    missing += [f"RawRequestMessage.{name}" for name in ("_replace", *MESSAGE_FIELDS) if not hasattr(RawRequestMessage, name)]
    assigned = web.Server.__init__.__code__.co_names
    missing += [f"Server.{name}" for name in SERVER_ATTRIBUTES if name not in assigned]
    return missing


def check() -> None:
    missing = missing_names()
    if missing:
        raise ImportError(
            f"docsrv extends aiohttp's connection handler, and aiohttp {aiohttp.__version__} lacks what it uses: "
            f"{', '.join(missing)}; install the aiohttp version pyproject.toml names"
        )


check()


class HookedRequestHandler(RequestHandler):
    """aiohttp's connection handler, told when aiohttp has answered a request of its own."""

    async def _handle_request(self, request: Any, start_time: float | None, request_handler: Any) -> tuple[Any, bool]:
        resp, reset = await super()._handle_request(request, start_time, request_handler)
        self.answered_by_aiohttp(bool(resp.keep_alive) and not reset)
        return resp, reset

    def answered_by_aiohttp(self, keep_alive: bool) -> None:
        """aiohttp has answered a request; ``keep_alive`` False when it closes the connection."""


def loop_of(handler: RequestHandler) -> Any:
    return handler._loop


def requests_answered(handler: RequestHandler) -> int:
    """Requests aiohttp itself has answered on this connection."""
    return handler._request_count


def keepalive_seconds(handler: RequestHandler) -> float:
    return handler._keepalive_timeout


def stop_keepalive(handler: RequestHandler) -> None:
    """Cancel aiohttp's keep-alive timer (the fast lane keeps its own while it answers)."""
    if handler._keepalive_handle is not None:
        handler._keepalive_handle.cancel()
        handler._keepalive_handle = None


def resume_keepalive(handler: RequestHandler, close_time: float) -> None:
    """Give the keep-alive deadline back to aiohttp: its timer, armed for ``close_time``."""
    handler._next_keepalive_close_time = close_time
    if handler._keepalive_handle is None:
        handler._keepalive_handle = handler._loop.call_at(close_time, handler._process_keepalive)


def handler_kwargs(server: web.Server) -> dict[str, Any]:
    """The keyword arguments a low-level server makes each connection handler with."""
    return server._kwargs


def server_loop(server: web.Server) -> Any:
    return server._loop


def as_http11(request: web.BaseRequest) -> web.BaseRequest:
    """The request, answered as HTTP/1.1: aiohttp writes a response's status line with the
    request's version, and a version docsrv does not speak (``HTTP/2.0`` in an HTTP/1 request
    line) must not appear in an HTTP/1 response. The connection is closed after it."""
    answered = request.clone()
    answered._message = answered._message._replace(version=HttpVersion11, should_close=True)
    answered._version = HttpVersion11  # aiohttp keeps the message's version apart too
    return answered
