"""gzip and brotli for replies over 1 KB, chosen by Accept-Encoding, made once per reply.

Each compressed variant is a reply of its own, kept on the identity reply (see ``reply.py``),
so a hot body is compressed once in a worker's life. Brotli's quality falls with the body's
size: on a long list page, a high quality costs several times a lower one's time for a body a
few per cent smaller; bodies over ``OFFLOAD_BYTES`` are compressed off the event loop.
"""

from __future__ import annotations

import gzip
from functools import lru_cache

import brotli

MIN_SIZE = 1024
#: Bodies larger than this are compressed in the heavy-work thread (about a millisecond).
OFFLOAD_BYTES = 32 << 10
#: Bodies larger than this get brotli's quality 5 instead of 9.
LARGE_BYTES = 64 << 10
#: Preferred first when the client weighs them alike.
CODINGS = ("br", "gzip")


@lru_cache(maxsize=512)
def choose(accept_encoding: str) -> str | None:
    """The coding to send for an Accept-Encoding value (with q-values), or None for identity."""
    weights: dict[str, float] = {}
    for item in accept_encoding.lower().split(","):
        name, _, params = item.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if name:
            weights[name.strip()] = q
    star = weights.get("*", 0.0)
    best, best_q = None, 0.0
    for coding in CODINGS:
        q = weights.get(coding, weights.get("x-gzip", star) if coding == "gzip" else star)
        if q > best_q:
            best, best_q = coding, q
    return best


def compress(body: bytes, coding: str) -> bytes:
    if coding == "br":
        return brotli.compress(body, quality=9 if len(body) <= LARGE_BYTES else 5)
    return gzip.compress(body, compresslevel=6, mtime=0)
