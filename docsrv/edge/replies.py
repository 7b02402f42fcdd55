"""What docsrv's own HTTP clients (purge delivery, ``fleet wait``) take from a reply they did not
write: a few KiB at most, and one line to print.

A purge endpoint or a replica may be anything at the other end of a URL: one that streams an
endless body must not fill memory (read ``REPLY_BYTES`` and stop), and one that echoes the
request back must not print the token it was sent, nor break the report over lines.
"""

from __future__ import annotations

import re

import aiohttp

#: The most of a reply body docsrv reads: enough for any status document it understands.
REPLY_BYTES = 64 * 1024
#: The most of a reply body an error message quotes.
QUOTED_CHARS = 200

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Credentials as they are sent in headers (``Authorization: Bearer x``, ``Fastly-Key: x``).
_CREDENTIAL = re.compile(r"(?i)(bearer\s+|basic\s+|fastly-key\s*:\s*|x-auth-key\s*:\s*)\S+")


async def read_some(response: aiohttp.ClientResponse, limit: int = REPLY_BYTES) -> bytes:
    """At most ``limit`` bytes of ``response``'s body; the rest is never read (the connection is
    closed, not reused)."""
    data = await response.content.read(limit)
    if not response.content.at_eof():
        response.close()
    return data


def one_line(text: str, secrets: tuple[str | None, ...] = ()) -> str:
    """``text`` for a one-line report: tokens redacted, control characters escaped, cut short."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "<redacted>")
    text = _CREDENTIAL.sub(lambda match: match.group(1) + "<redacted>", text)
    text = _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text.strip())
    return text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS] + "..."
