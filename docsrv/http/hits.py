"""The one path of a cached reply: what a GET or HEAD asks of the reply cache, and what it gets.

Both doors of a worker answer cached replies: the fast lane (``fast_lane.py``), which reads the
request's head itself and writes bytes, and the dispatcher (``api/app.py``), which aiohttp hands
every other request. What a request asks is read once into an ``Ask`` (the cache key, and the
few header values that choose a representation: the coding, the validators), and ``decide``
answers it from a reply, for both: which representation, 200 or 304. Both look the reply up
under the ask's key; on a miss, or a coding not made yet, the lane hands the request to aiohttp,
and the dispatcher makes the reply, or that coding.

The key is the request target when links are built from a fixed base URL, else the Host header
and the target (docsrv speaks plain HTTP; TLS ends before it, so the scheme is always ``http``).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from .caching import Validators, not_modified
from .reply import Reply
from .reply_cache import Key


class Ask(NamedTuple):
    """What of a GET or HEAD request chooses its cached reply."""

    key: Key
    #: Whether the reply's body is sent (GET), or only its head (HEAD).
    body: bool
    #: The coding chosen from Accept-Encoding (None: identity).
    coding: str | None
    #: Its validators (None: not a conditional request).
    validators: Validators | None


def cache_key(fixed_base: str | None, host: str, target: str) -> Key:
    """The key a request's reply is cached under (``host`` is not read with a fixed base)."""
    return target if fixed_base else (host, target)


def representation(reply: Reply, coding: str | None) -> Reply | None:
    """The representation of ``reply`` to send in ``coding``; None when that variant is not
    made yet."""
    if coding is None or not reply.compressible:
        return reply
    return reply.variants.get(coding)


def status(reply: Reply, ask: Ask, last_modified: datetime) -> int:
    """The reply's own status, or 304 when the request's validators match ``reply`` (a
    representation; only 200s carry validators)."""
    if ask.validators is not None and reply.etag is not None and not_modified(ask.validators, reply.etag, last_modified):
        return 304
    return reply.status


def decide(reply: Reply, ask: Ask, last_modified: datetime) -> tuple[int, Reply] | None:
    """The status and representation of ``reply`` that answer ``ask``; None when the reply is not
    made yet in the coding asked for."""
    sent = representation(reply, ask.coding)
    if sent is None:
        return None
    return status(sent, ask, last_modified), sent

