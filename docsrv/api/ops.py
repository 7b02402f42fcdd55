"""Endpoints for whoever runs the replica: liveness and readiness."""

from __future__ import annotations

from datetime import datetime, timezone

from aiohttp import web

from .state import ApiState, Reply


async def healthz(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    return state.uncached(200, {"status": "ok"})


async def readyz(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    store = state.store
    health = state.health
    age = (datetime.now(timezone.utc) - store.created_at).total_seconds()
    return state.uncached(
        200,
        {
            "status": "ready",
            "snapshot": store.name,
            "created_at": store.created_at,
            "age_seconds": int(age),
            "load_seconds": round(store.load_seconds, 3),
            "counts": store.counts,
            "reloads": health.reloads,
            "reload_failures": health.reload_failures,
            "last_reload_error": health.last_reload_error,
        },
    )
