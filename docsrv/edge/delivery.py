"""Sending purge keys to a cache, in the request shape each documents, in batches, with retries.

- ``varnish-xkey``: ``PURGE <url>`` with the keys, space separated, in an ``xkey-purge`` header
  (the xkey vmod's convention; ``deploy/varnish/docsrv.vcl`` answers it), under Varnish's
  default limit of 8 KB a header line.
- ``fastly``: ``POST https://api.fastly.com/service/<service id>/purge`` with the keys in a
  ``Surrogate-Key`` header, at most 256 a request, the token (``FASTLY_API_TOKEN``) in
  ``Fastly-Key``.
- ``cloudflare``: ``POST https://api.cloudflare.com/client/v4/zones/<zone id>/purge_cache``
  with ``{"tags": [...]}``, at most 30 a request, the token (``CLOUDFLARE_API_TOKEN``) as a
  bearer token.

A batch that fails to connect, times out, or is answered 429 or 5xx is tried again, up to
ATTEMPTS times with a doubling pause (or the pause a Retry-After asks for); any other answer
is final. A redirect is never followed (it would carry the token to another host) and fails the
purge; a dialect that needs a token refuses to start without it. Of a reply, a few KiB are read
and a redacted line is quoted (``replies.py``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import aiohttp
import orjson

from .replies import one_line, read_some

ATTEMPTS = 4
FIRST_PAUSE_SECONDS = 0.5
TIMEOUT_SECONDS = 30.0


class PurgeError(Exception):
    """A batch was refused, or failed every attempt."""


@dataclass(frozen=True)
class Dialect:
    method: str
    #: The most keys a request takes, and the most bytes of them (joined by a space).
    max_keys: int
    max_bytes: int
    #: The environment variable holding the API token, if the API takes one.
    token_variable: str | None
    request: Callable[[list[str], str | None], tuple[dict[str, str], bytes | None]]


def varnish_request(keys: list[str], token: str | None) -> tuple[dict[str, str], bytes | None]:
    return {"xkey-purge": " ".join(keys)}, None


def fastly_request(keys: list[str], token: str | None) -> tuple[dict[str, str], bytes | None]:
    headers = {"Surrogate-Key": " ".join(keys), "Accept": "application/json"}
    if token:
        headers["Fastly-Key"] = token
    return headers, None


def cloudflare_request(keys: list[str], token: str | None) -> tuple[dict[str, str], bytes | None]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers, orjson.dumps({"tags": keys})


DIALECTS = {
    "varnish-xkey": Dialect("PURGE", 10_000, 7_000, None, varnish_request),
    "fastly": Dialect("POST", 256, 15_000, "FASTLY_API_TOKEN", fastly_request),
    "cloudflare": Dialect("POST", 30, 30 * 1024, "CLOUDFLARE_API_TOKEN", cloudflare_request),
}


def batches(keys: list[str], dialect: Dialect) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for key in keys:
        if batch and (len(batch) == dialect.max_keys or size + len(key) + 1 > dialect.max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(key)
        size += len(key) + 1
    if batch:
        yield batch


@dataclass
class Delivered:
    keys: int = 0
    requests: int = 0
    retries: int = 0


async def deliver(keys: list[str], url: str, dialect_name: str) -> Delivered:
    """Send every key to ``url``; raise PurgeError naming the first batch that failed for good."""
    dialect = DIALECTS[dialect_name]
    token = os.environ.get(dialect.token_variable) if dialect.token_variable else None
    if dialect.token_variable and not token:
        raise PurgeError(f"{dialect_name} needs its API token in {dialect.token_variable}, which is not set")
    done = Delivered()
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for number, batch in enumerate(batches(keys, dialect), start=1):
            headers, body = dialect.request(batch, token)
            pause = FIRST_PAUSE_SECONDS
            for attempt in range(1, ATTEMPTS + 1):
                done.requests += 1
                try:
                    async with session.request(dialect.method, url, headers=headers, data=body, allow_redirects=False) as response:
                        text = one_line((await read_some(response)).decode(errors="replace"), (token,))
                        if response.status < 300:
                            break
                        if 300 <= response.status < 400:
                            where = one_line(response.headers.get("Location", "nowhere"), (token,))
                            raise PurgeError(f"batch {number} ({len(batch)} keys): HTTP {response.status} redirects to {where}; "
                                             "purges follow no redirect (give the endpoint's own URL)")
                        if response.status != 429 and response.status < 500:
                            raise PurgeError(f"batch {number} ({len(batch)} keys): HTTP {response.status} {text}")
                        problem = f"HTTP {response.status}"
                        pause = retry_after(response.headers.get("Retry-After"), pause)
                except (TimeoutError, aiohttp.ClientError) as error:
                    problem = one_line(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__, (token,))
                if attempt == ATTEMPTS:
                    raise PurgeError(f"batch {number} ({len(batch)} keys): {problem} after {ATTEMPTS} attempts")
                done.retries += 1
                await asyncio.sleep(pause)
                pause *= 2
            done.keys += len(batch)
    return done


def retry_after(header: str | None, pause: float) -> float:
    """The pause a Retry-After of whole seconds asks for (at most a minute), else ``pause``."""
    if header is not None and header.strip().isdigit():
        return min(float(header.strip()), 60.0)
    return pause
