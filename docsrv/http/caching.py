"""Validators and conditional requests (RFC 9110 section 13)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime


def strong_etag(body: bytes) -> str:
    """A strong entity tag that depends on the body alone: equal across restarts and replicas."""
    return '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


def http_date(moment: datetime) -> str:
    return format_datetime(moment.astimezone(UTC).replace(microsecond=0), usegmt=True)


def not_modified(if_none_match: list[str] | None, if_modified_since: str | None, etag: str, last_modified: datetime) -> bool:
    """Whether a GET or HEAD with these request headers (every If-None-Match field, and the
    If-Modified-Since one) is answered 304.

    If-None-Match takes precedence: when present, If-Modified-Since is not looked at
    (RFC 9110 section 13.2.2). If-None-Match compares weakly; ``*`` matches any reply.
    """
    if if_none_match is not None:
        for field in if_none_match:
            for tag in field.split(","):
                tag = tag.strip()
                if tag == "*" or tag.removeprefix("W/") == etag:
                    return True
        return False
    if if_modified_since is None:
        return False
    try:
        since = parsedate_to_datetime(if_modified_since)
    except (TypeError, ValueError, IndexError):
        return False
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return last_modified.replace(microsecond=0) <= since
