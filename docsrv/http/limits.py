"""Limits for hostile clients, in one place: aiohttp's parser and the fast lane hold requests
to the same ones."""

from __future__ import annotations

from typing import Any

#: The longest request line or header field (aiohttp's parser; the lane reads no longer header block).
MAX_LINE_BYTES = 8190
#: The most header fields a request may have.
MAX_HEADERS = 100

#: The keyword arguments of aiohttp's low-level server that set them.
SERVER_LIMITS: dict[str, Any] = {
    "max_line_size": MAX_LINE_BYTES,
    "max_field_size": MAX_LINE_BYTES,
    "max_headers": MAX_HEADERS,
    "access_log": None,
}
