"""The list envelope of both APIs: a head (v2: count, next, previous; v1: meta) and the items of
one page, each rendered and encoded on its own, with the purge keys of what the page shows."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from ..http.reply import Reply
from .state import V1_JSON, ApiState, encoded_each

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ListStyle:
    """How an API writes a list: the key of its items, its purge key, and its JSON options."""

    items_key: str
    api_key: str
    option: int


V2_LIST = ListStyle("results", "v2", orjson.OPT_UTC_Z)
V1_LIST = ListStyle("objects", "v1", V1_JSON)


async def listed(
    state: ApiState, style: ListStyle, head: dict[str, Any], shown: Sequence[T], render: Callable[[T], Any],
    keys_of: Callable[[T], Iterable[str]], list_key: str,
) -> Reply:
    """The 200 of one page: ``head``, then the ``shown`` items rendered (a long page off the
    event loop), with the purge keys of the list and of each item."""

    def make() -> tuple[dict, list[str]]:
        body = {**head, style.items_key: encoded_each(render, shown, style.option)}
        return body, [style.api_key, list_key, *(key for item in shown for key in keys_of(item))]

    return await state.ok_made(len(shown), make, style.option, list_key)
