"""The error a handler raises: rendered by the dispatcher as an uncached JSON reply."""

from __future__ import annotations


class ApiError(Exception):
    """An error reply: raised by a handler, rendered by the dispatcher."""

    def __init__(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
        super().__init__(status, body)
        self.status = status
        self.body = body
        self.headers = headers or {}
