"""Matching a request path to a route: a dictionary for fixed paths, patterns for the rest."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from aiohttp import web

from .state import ApiState, Reply

Handler = Callable[[web.BaseRequest, ApiState, dict[str, str]], Awaitable[Reply]]


class Route(NamedTuple):
    #: The path, with ``{name}`` for one path segment; also the route's label in metrics.
    template: str
    handler: Handler


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
