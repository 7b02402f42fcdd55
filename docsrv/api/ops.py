"""Endpoints for whoever runs the replica: liveness, readiness and metrics."""

from __future__ import annotations

import os
from datetime import datetime, timezone

from aiohttp import web

from ..metrics import render
from ..http.reply import Reply
from .state import ApiState


async def healthz(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    return state.uncached(200, {"status": "ok"})


async def readyz(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    store = state.store
    status = state.runtime.status()
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
            "worker": os.getpid(),
            "workers": status.get("workers", 1),
            "reloads": status.get("reloads", 0),
            "reload_failures": status.get("reload_failures", 0),
            "last_reload_error": status.get("last_reload_error"),
        },
    )


async def metrics(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    """Prometheus text: requests and latency of every worker, and the snapshot's facts."""
    store = state.store
    runtime = state.runtime
    status = runtime.status()
    snapshot = {"snapshot": store.name}
    gauges = {
        "docsrv_snapshot_info": ("The snapshot being served.", 1, snapshot),
        "docsrv_snapshot_age_seconds": (
            "Seconds since the snapshot was taken.",
            round((datetime.now(timezone.utc) - store.created_at).total_seconds()),
            snapshot,
        ),
        "docsrv_snapshot_load_seconds": ("Seconds the last successful load took.", round(store.load_seconds, 3), snapshot),
        "docsrv_reloads_total": ("Snapshots swapped in since start.", status.get("reloads", 0), {}),
        "docsrv_reload_failures_total": ("Snapshots that failed to load on reload.", status.get("reload_failures", 0), {}),
        "docsrv_workers": ("Worker processes serving.", status.get("workers", 1), {}),
    }
    body = render(runtime.metrics.totals(), gauges).encode()
    return state.text(200, body, "text/plain; version=0.0.4; charset=utf-8")
