"""Matching a request path to a route: a dictionary for fixed paths, patterns for the rest."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from ..http.reply import Reply
from .request import ApiRequest
from .state import ApiState

#: What answers a route: the request value in, a reply out.
Handler = Callable[[ApiRequest, ApiState], Awaitable[Reply]]
#: Which query parameters a route reads: every other one is dropped before its handler sees
#: the request, and is no part of the reply's cache key (DECISIONS.md section 1).
Accepts = Callable[[str], bool]



def params(*names: str) -> Accepts:
    return frozenset(names).__contains__


class Route(NamedTuple):
    #: The path, with ``{name}`` for one path segment; also the route's label in metrics.
    template: str
    handler: Handler
    #: What /openapi.json says of the route: its OpenAPI operation (summary, parameters, responses).
    doc: dict
    accepts: Accepts
    #: Whether the reply may depend on the request's Host, so that Host must be an allowed one
    #: (every API route; not the probes and metrics that orchestrators call by address).
    checks_host: bool = True


def route(template: str, handler: Handler, doc: dict, *, accepts: Accepts | None = None, checks_host: bool = True) -> Route:
    """A route that reads the query parameters its documentation lists, unless ``accepts`` says otherwise."""
    if accepts is None:
        accepts = frozenset(p["name"] for p in doc["parameters"] if p["in"] == "query").__contains__
    return Route(template, handler, doc, accepts, checks_host)


class Router:
    def __init__(self, routes: tuple[Route, ...]) -> None:
        self.routes = routes
        self._fixed = {r.template: r for r in routes if "{" not in r.template}
        self._patterns = [
            (re.compile(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(r.template))), r)
            for r in routes
            if "{" in r.template
        ]

    def match(self, path: str) -> tuple[Route, dict[str, str]] | None:
        route = self._fixed.get(path)
        if route is not None:
            return route, {}
        for pattern, route in self._patterns:
            found = pattern.fullmatch(path)
            if found is not None:
                return route, found.groupdict()
        return None
