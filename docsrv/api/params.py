"""Query parameters: parsing known ones strictly, and the links of a paginated list.

A known parameter with a malformed value is a 400 that names it; unknown parameters are
ignored. A repeated parameter counts by its last value, as Django's QueryDict does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlencode

from multidict import MultiMapping

from .errors import ApiError
from .request import ApiRequest

T = TypeVar("T")
#: Query values longer than this are refused before they are looked at.
MAX_NUMBER_DIGITS = 18


#: How much of a value a client sent an error message quotes.
EXCERPT_CHARACTERS = 40


def excerpt(text: str, limit: int = EXCERPT_CHARACTERS) -> str:
    """At most ``limit`` characters of what a client sent, non-printable ones escaped, for an error message."""
    shown = text if len(text) <= limit else text[:limit] + "..."
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in shown)


def last(query: MultiMapping[str], name: str) -> str | None:
    values = query.getall(name, None)
    return None if values is None else values[-1]


def whole_number(text: str) -> int | None:
    """``text`` as a non-negative whole number, or None if it is not one."""
    if not text or len(text) > MAX_NUMBER_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def positive_id(text: str) -> int | None:
    number = whole_number(text)
    return number if number else None


def by_id(items: Mapping[int, T], text: str, not_found: dict) -> T:
    """The item whose id ``text`` names; a 404 with the body ``not_found`` (each API has its own)
    for an id that is not a positive whole number or names nothing public."""
    found = items.get(positive_id(text) or 0)
    if found is None:
        raise ApiError(404, not_found)
    return found


def boolean(query: MultiMapping[str], name: str, error: Callable[[str, str], ApiError]) -> bool | None:
    """The value of a true/false parameter (also 1/0, any case); None when it is absent."""
    text = last(query, name)
    if text is None:
        return None
    lowered = text.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise error(name, "Must be true or false.")


class Page:
    """Which slice of a list a request asks for, and the links to its neighbours."""

    __slots__ = ("limit", "offset")

    def __init__(self, limit: int, offset: int) -> None:
        self.limit = limit
        self.offset = offset

    def slice(self, items: Sequence[T]) -> Sequence[T]:
        return items[self.offset : self.offset + self.limit]

    def next_offset(self, count: int) -> int | None:
        return self.offset + self.limit if self.offset + self.limit < count else None

    def previous_offset(self) -> int | None:
        """Offset of the previous page; 0 means the first page (the link drops ``offset``)."""
        if self.offset <= 0:
            return None
        return max(self.offset - self.limit, 0)


@dataclass(frozen=True, slots=True)
class Paging:
    """How an API pages its lists by ``limit`` and ``offset`` (DECISIONS.md sections 2 and 4): the
    handlers, the v1 schema documents and the OpenAPI document all read these."""

    default_limit: int
    max_limit: int
    #: v1: ``limit=0`` means the largest page; v2: it is an error.
    zero_limit_means_max: bool

    def limit_help(self) -> str:
        if self.zero_limit_means_max:
            return f"Page size: 1 to {self.max_limit}; 0 means {self.max_limit}; default {self.default_limit}."
        return f"Page size: 1 to {self.max_limit} (larger is clamped), default {self.default_limit}."


V2_PAGING = Paging(default_limit=10, max_limit=1000, zero_limit_means_max=False)
V1_PAGING = Paging(default_limit=20, max_limit=1000, zero_limit_means_max=True)


def parse_page(query: MultiMapping[str], paging: Paging, error: Callable[[str, str], ApiError]) -> Page:
    limit = paging.default_limit
    text = last(query, "limit")
    if text is not None:
        number = whole_number(text)
        if number is None or (number == 0 and not paging.zero_limit_means_max):
            raise error("limit", "A positive integer is required.")
        limit = min(number or paging.max_limit, paging.max_limit)
    offset = 0
    text = last(query, "offset")
    if text is not None:
        number = whole_number(text)
        if number is None:
            raise error("offset", "A non-negative integer is required.")
        offset = number
    return Page(limit, offset)


def page_link(request: ApiRequest, base: str, limit: int, offset: int | None) -> str:
    """``base`` + this request's path and query, with limit and offset replaced.

    The other parameters keep their values and order of repetition; keys are sorted so that
    equal requests get equal links. ``offset`` None (the first page) drops the parameter.
    """
    return link(request, base, {"limit": str(limit), "offset": str(offset) if offset else None})


def page_number_link(request: ApiRequest, base: str, number: int) -> str:
    """The link to page ``number`` of a list paged by number: ``page`` replaced (dropped for the
    first page), ``limit`` and ``offset`` dropped (they mean nothing beside ``page``)."""
    return link(request, base, {"page": str(number) if number > 1 else None, "limit": None, "offset": None})


def link(request: ApiRequest, base: str, replaced: dict[str, str | None]) -> str:
    params = [(k, v) for k, v in request.query.items() if k not in replaced]
    params += [(k, v) for k, v in replaced.items() if v is not None]
    params.sort(key=lambda kv: kv[0])
    query = urlencode(params)
    return f"{base}{request.path}?{query}" if query else f"{base}{request.path}"
