"""aiohttp's low-level server, with JSON bodies for the errors its HTTP parser answers, and
a deadline for the first request of a connection.

A request that cannot be parsed (a bad request line, an oversized header, invalid bytes)
never reaches a handler: aiohttp answers it itself, in plain text. docsrv answers every
request in JSON, so the connection handler is replaced by one that does.
"""

from __future__ import annotations

from http import HTTPStatus

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler


#: A connection must complete its first request this soon, or it is closed: a client that
#: sends its headers a byte at a time (slowloris) cannot keep connections open for ever.
#: Later requests on a kept-alive connection are bounded by the keep-alive timeout.
FIRST_REQUEST_SECONDS = 10.0


class JsonErrorRequestHandler(RequestHandler):
    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._loop.call_later(FIRST_REQUEST_SECONDS, self._close_if_silent)

    def _close_if_silent(self) -> None:
        if self._request_count == 0 and self.transport is not None:
            self.transport.close()

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None, message: str | None = None):
        if status >= 500:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        else:
            self.logger.debug("Bad request from %s: %s", request.remote, message or exc)
        if request.writer.output_size > 0:
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
        detail = phrase + "." if status >= 500 or not message else f"{phrase}: {message}"
        response = web.Response(
            status=status,
            body=orjson.dumps({"detail": detail}),
            headers={"Content-Type": "application/json", "Access-Control-Allow-Origin": "*", "Connection": "close"},
        )
        response.force_close()
        return response


class JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return JsonErrorRequestHandler(self, loop=self._loop, **self._kwargs)
