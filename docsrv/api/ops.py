"""Endpoints for whoever runs the replica: liveness, readiness and metrics."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from ..http.reply import Reply
from ..observe.metrics import render
from ..observe.process_metrics import Families, build_info, own_process, server_memory
from ..store.loaded import Store
from .request import ApiRequest
from .state import ApiState


async def healthz(request: ApiRequest, state: ApiState) -> Reply:
    return state.uncached(200, {"status": "ok"})


async def readyz(request: ApiRequest, state: ApiState) -> Reply:
    """200 while the snapshot is served as loaded; 503 once its files changed on disk (the master
    reloads it; until then a load balancer sends traffic elsewhere)."""
    store = state.store
    status = state.runtime.status()
    problem = status.problem or state.problem
    age = (datetime.now(UTC) - store.created_at).total_seconds()
    return state.uncached(
        503 if problem else 200,
        {
            "status": "degraded" if problem else "ready",
            "problem": problem,
            "snapshot": store.name,
            "sequence": store.manifest.sequence,
            "created_at": store.created_at,
            "age_seconds": int(age),
            "load_seconds": round(store.load_seconds, 3),
            "counts": store.counts,
            "worker": os.getpid(),
            "workers": status.workers,
            "workers_wanted": status.workers_wanted,
            "reloads": status.reloads,
            "reload_failures": status.reload_failures,
            "last_reload_error": status.last_reload_error,
            "draining_workers": status.draining,
            "follow_problem": state.runtime.follow_problem,
            "waiting_for": state.runtime.waiting_for,
        },
    )


async def metrics(request: ApiRequest, state: ApiState) -> Reply:
    """Prometheus text: requests and latency of every worker, and the snapshot's facts."""
    store = state.store
    runtime = state.runtime
    status = runtime.status()
    snapshot = {"snapshot": store.name}
    families: Families = {
        "docsrv_snapshot_info": ("gauge", "The snapshot being served.", [(snapshot, 1)]),
        "docsrv_snapshot_age_seconds": (
            "gauge", "Seconds since the snapshot was taken.", [(snapshot, round((datetime.now(UTC) - store.created_at).total_seconds()))],
        ),
        "docsrv_snapshot_sequence": ("gauge", "Where the snapshot stands in its origin's sequence (0: never published).",
                                     [(snapshot, store.manifest.sequence)]),
        **changeset_age(store),
        "docsrv_snapshot_load_seconds": ("gauge", "Seconds the last successful load took.", [(snapshot, round(store.load_seconds, 3))]),
        "docsrv_reloads_total": ("counter", "Snapshots swapped in since start.", [({}, status.reloads)]),
        "docsrv_reload_failures_total": ("counter", "Snapshots that failed to load on reload.", [({}, status.reload_failures)]),
        "docsrv_workers": ("gauge", "Worker processes ready and serving.", [({}, status.workers)]),
        "docsrv_workers_wanted": ("gauge", "Worker processes there should be.", [({}, status.workers_wanted)]),
        "docsrv_draining_workers": ("gauge", "Workers of an earlier snapshot still finishing their requests.", [({}, status.draining)]),
        "docsrv_snapshot_problem": ("gauge", "1 while the snapshot's files have changed on disk under the server.",
                                    [({}, 1 if (status.problem or state.problem) else 0)]),
        "docsrv_follow_problem": ("gauge", "1 while this worker cannot apply the changesets after the state it serves.",
                                  [({}, 1 if runtime.follow_problem else 0)]),
        **build_info(),
        **own_process(),
        **(server_memory(os.getppid()) if runtime.run_dir is not None else {}),
    }
    body = render(runtime.metrics.totals(), families).encode()
    return state.text(200, body, "text/plain; version=0.0.4; charset=utf-8")


def changeset_age(store: Store) -> Families:
    """Seconds since the changeset that made the state served was published, while a changeset
    applied in memory made it (docs/operations.md, "Following changesets in memory")."""
    if store.published_at is None:
        return {}
    age = round((datetime.now(UTC) - store.published_at).total_seconds(), 3)
    samples = [({"snapshot": store.name}, age)]
    return {"docsrv_changeset_age_seconds": ("gauge", "Seconds since the changeset served was published.", samples)}
