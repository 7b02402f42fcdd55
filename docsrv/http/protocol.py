"""aiohttp's low-level server, with JSON bodies for the errors its HTTP parser answers, and
a deadline for the first request of a connection.

A request that cannot be parsed (a bad request line, an oversized header, invalid bytes)
never reaches a handler: aiohttp answers it itself, in plain text, quoting the bytes it could
not parse. docsrv answers every request in JSON and names the problem without echoing what
was sent, so the connection handler is replaced by one that does.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

import orjson
from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    ContentLengthError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    TransferEncodingError,
)
from aiohttp.web_protocol import RequestHandler

from .aiohttp_seam import HookedRequestHandler, handler_kwargs, loop_of, requests_answered, server_loop

#: What an error of aiohttp's HTTP parser is called in the JSON body: never the bytes that were
#: sent (the parser's own messages quote them whole).
PARSER_ERRORS = (
    (LineTooLong, "a request line or header is too long"),
    (BadHttpMethod, "the method is not a valid token"),
    (BadStatusLine, "the request line is malformed"),
    (InvalidHeader, "a header is malformed"),
    (InvalidURLError, "the request target is malformed"),
    ((TransferEncodingError, ContentLengthError), "the body's framing is malformed"),
)

#: llhttp's reason for a version it cannot parse as HTTP/1 (``HTTP/1.2``); one it parses but
#: docsrv does not speak (``HTTP/2.0``) reaches the dispatcher, which answers the same.
INVALID_VERSION = "Invalid HTTP version"
VERSION_NOT_SUPPORTED = "HTTP version not supported: only HTTP/1.0 and HTTP/1.1 are served."

#: A connection must complete its first request this soon, or it is closed: a client that
#: sends its headers a byte at a time (slowloris) cannot keep connections open for ever.
#: Later requests on a kept-alive connection are bounded by the keep-alive timeout.
FIRST_REQUEST_SECONDS = 10.0


class JsonErrorRequestHandler(HookedRequestHandler):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        loop_of(self).call_later(FIRST_REQUEST_SECONDS, self.close_if_silent)

    def has_answered(self) -> bool:
        """Whether a request of this connection has been answered."""
        return requests_answered(self) > 0

    def close_if_silent(self) -> None:
        if not self.has_answered() and self.transport is not None:
            self.transport.close()

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        if status >= 500:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        else:
            self.logger.debug("Bad request from %s: %s", request.remote, message or exc)
        if request.writer.output_size > 0:
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        if isinstance(exc, BadStatusLine) and INVALID_VERSION in str(exc):
            status, detail = 505, VERSION_NOT_SUPPORTED
        else:
            phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
            what = next((text for kind, text in PARSER_ERRORS if isinstance(exc, kind)), None)
            detail = f"{phrase}: {what}." if status < 500 and what else phrase + "."
        response = web.Response(
            status=status,
            body=orjson.dumps({"detail": detail}),
            headers={"Content-Type": "application/json", "Access-Control-Allow-Origin": "*", "Connection": "close"},
        )
        response.force_close()
        return response


class JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return JsonErrorRequestHandler(self, loop=server_loop(self), **handler_kwargs(self))
