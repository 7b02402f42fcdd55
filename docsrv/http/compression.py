"""gzip and brotli for replies over 1 KB, chosen by Accept-Encoding, made once per reply.

Each compressed variant is a reply of its own, kept on the identity reply, so a hot body is
compressed once in a worker's life. A variant has its own strong ETag (the identity tag with
``-gzip`` or ``-br``), as RFC 9110 asks of different representations.
"""

from __future__ import annotations

import gzip
from functools import lru_cache

import brotli

MIN_SIZE = 1024
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
        return brotli.compress(body, quality=9)
    return gzip.compress(body, compresslevel=6, mtime=0)
