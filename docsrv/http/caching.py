"""Validators and conditional requests (RFC 9110 section 13)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from typing import NamedTuple


def strong_etag(body: bytes) -> str:
    """A strong entity tag that depends on the body alone: equal across restarts and replicas."""
    return '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


def http_date(moment: datetime) -> str:
    return format_datetime(moment.astimezone(UTC).replace(microsecond=0), usegmt=True)


class Validators(NamedTuple):
    """A conditional request's validators, read once (a kept read of the fast lane is not read
    again: ``hits.Ask``)."""

    #: The entity tags of every If-None-Match field, weakness dropped (``*`` for any), or None.
    tags: frozenset[str] | None
    #: If-Modified-Since, when it is a date.
    since: datetime | None


def validators(if_none_match: list[str] | None, if_modified_since: str | None) -> Validators | None:
    """The validators of a GET or HEAD with these request headers (every If-None-Match field,
    and the If-Modified-Since one); None when it has none that count.

    If-None-Match takes precedence: when present, If-Modified-Since is not looked at
    (RFC 9110 section 13.2.2). If-None-Match compares weakly.
    """
    if if_none_match is not None:
        tags = frozenset(tag.strip().removeprefix("W/") for field in if_none_match for tag in field.split(","))
        return Validators(tags, None)
    if if_modified_since is None:
        return None
    try:
        since = parsedate_to_datetime(if_modified_since)
    except (TypeError, ValueError, IndexError):
        return None
    return Validators(None, since if since.tzinfo is not None else since.replace(tzinfo=UTC))


def not_modified(validators: Validators, etag: str, last_modified: datetime) -> bool:
    """Whether a reply with this entity tag and date is answered 304 to a request with these
    validators."""
    tags = validators.tags
    if tags is not None:
        return etag in tags or "*" in tags
    return validators.since is not None and last_modified.replace(microsecond=0) <= validators.since
