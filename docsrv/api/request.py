"""What a handler reads of a request: made by the dispatcher once the route is known.

Handlers never see aiohttp's request: they read this small value and return a ``Reply``. So a
handler can be called with a request value made in a test, and the dispatcher alone knows how
aiohttp spells a path, a query, a host or a closed connection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from multidict import MultiDict, MultiDictProxy, MultiMapping
from yarl import URL


def never() -> bool:
    return False


class ApiRequest(NamedTuple):
    #: The path parameters, by their names in the route's template.
    params: Mapping[str, str]
    #: The canonical query: only the parameters the route reads, in order of name.
    query: MultiMapping[str]
    #: The path as sent, percent-encoded: the links to a list's other pages start with it.
    path: str
    #: What absolute links start with: the public URL, else the request's scheme and Host.
    base: str
    #: Whether the client has gone (a search waiting its turn is then dropped).
    gone: Callable[[], bool] = never

    @classmethod
    def of(cls, target: str, base: str = "", params: Mapping[str, str] | None = None, gone: Callable[[], bool] = never) -> ApiRequest:
        """The request value of ``target`` (a path and query), as a test or a tool makes one."""
        url = URL(target)
        return cls(params or {}, MultiDictProxy(MultiDict(url.query)), url.raw_path, base, gone)
