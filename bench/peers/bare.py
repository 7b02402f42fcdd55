"""The limit: a bare uvloop ``asyncio.Protocol`` with httptools' request parser, answering each
request target with the exact bytes docsrv sent for it, head and body.

`python bench/peers/bare.py PORT RESPONSES`: RESPONSES is a JSON object mapping a request target
(``"/api/v2/project/7/"``; with ``"\\t304"`` appended, the same target asked with
``If-None-Match``) to docsrv's whole response, as Latin-1 text. Per request it parses the head,
looks the target up in a dict and writes the bytes: nothing a real server could skip less. It
runs on one core like the docsrv worker it is compared with (issue 36).
"""

import asyncio
import json
import sys

import httptools
import uvloop

NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


class Bare(asyncio.Protocol):
    def __init__(self, responses: dict[bytes, bytes]) -> None:
        self.responses = responses
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.target = b""
        self.revalidating = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_message_begin(self) -> None:
        self.revalidating = False

    def on_url(self, url: bytes) -> None:
        self.target = url

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 13 and name.lower() == b"if-none-match":
            self.revalidating = True

    def on_message_complete(self) -> None:
        assert self.transport is not None
        key = self.target + b"\t304" if self.revalidating else self.target
        self.transport.write(self.responses.get(key, NOT_FOUND))


def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    with open(path, encoding="latin-1") as file:
        responses = {target.encode("latin-1"): response.encode("latin-1") for target, response in json.load(file).items()}
    loop = uvloop.new_event_loop()
    server = loop.run_until_complete(loop.create_server(lambda: Bare(responses), "127.0.0.1", port, backlog=4096))
    try:
        loop.run_forever()
    finally:
        server.close()


if __name__ == "__main__":
    main()
