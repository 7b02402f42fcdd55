"""HTTP endpoints that misbehave on purpose, on loopback: they redirect, stream for ever, or echo
the request back. For docsrv's own clients (purge delivery, ``fleet wait``)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: The longest an endless body streams, so that a client that never stops reading cannot hang a test.
ENDLESS_SECONDS = 30.0


class LoopbackServer:
    """A threading HTTP server on a free loopback port, serving ``handler`` until ``close``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Hostile(LoopbackServer):
    """Answers every request as ``behaviour`` says: ``("redirect", url)``, ``("endless", None)``,
    ``("echo", status)``, or ``("json", body)``; records the requests it gets."""

    def __init__(self, behaviour: str, argument: object = None) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hostile.requests.append((self.command, self.path, dict(self.headers)))
                if behaviour == "redirect":
                    self.send_response(307)
                    self.send_header("Location", f"{argument}/steal")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif behaviour == "endless":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    chunk = b"[" + b"0," * 32768
                    deadline = time.monotonic() + ENDLESS_SECONDS
                    try:
                        while time.monotonic() < deadline:
                            self.wfile.write(chunk)
                    except OSError:
                        pass  # the client stopped reading and closed: what it should do
                    self.close_connection = True
                elif behaviour == "echo":
                    body = f"{self.requestline}\r\n{self.headers}".encode()
                    self.send_response(int(argument))  # type: ignore[call-overload]
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    body = str(argument).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            do_GET = do_POST = do_PURGE = answer

            def log_message(self, *args) -> None:
                pass

        super().__init__(Handler)
