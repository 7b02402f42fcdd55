"""Request metrics of every worker, aggregated, in the Prometheus text format.

Each worker counts in plain dictionaries (about a microsecond a request) and writes its
totals to ``<run dir>/worker-<pid>.json`` once a second. ``/metrics``, answered by whichever
worker takes the request, adds up every worker's file, with its own live counts in place of
its file. When a worker exits, the master folds its last counts into ``retired.json``, so the
counters never go back.
"""

from __future__ import annotations

import bisect
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..utils.files import replace_file

if TYPE_CHECKING:
    from ..api.admission import SearchQueue
    from ..http.reply_cache import ReplyCache
    from .process_metrics import Families

#: Upper bounds of the latency histogram, in seconds.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
RETIRED = "retired.json"


class Metrics:
    """One worker's counts: requests by route template and status, latency by route, reply-cache
    hits and misses by route, and the reply cache's own figures."""

    def __init__(self, run_dir: Path | None) -> None:
        self.run_dir = run_dir
        self.requests: dict[tuple[str, int], int] = {}
        #: route -> [bucket counts..., +Inf count, sum of seconds]
        self.latency: dict[str, list[float]] = {}
        #: GET and HEAD requests answered from the reply cache, and not, by route.
        self.hits: dict[str, int] = {}
        self.misses: dict[str, int] = {}
        #: Cached replies the fast lane sent since the last fold, by status (200 or 304) and route,
        #: and the seconds they took together: a dictionary increment per request, folded into the
        #: counts above whenever they are read (the latency histogram takes them at their mean).
        self.lane: dict[int, dict[str, int]] = {200: {}, 304: {}}
        self.lane_seconds = 0.0
        #: Of the hits, those the fast lane sent, by route.
        self.lane_replies: dict[str, int] = {}
        #: The reply cache and search queue whose figures are reported (set by the serving state).
        self.cache: ReplyCache | None = None
        self.searches: SearchQueue | None = None

    def observe(self, route: str, status: int, seconds: float, hit: bool = False) -> None:
        key = (route, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        counts = self.hits if hit else self.misses
        counts[route] = counts.get(route, 0) + 1
        histogram = self.latency.get(route)
        if histogram is None:
            histogram = self.latency[route] = [0] * (len(BUCKETS) + 1) + [0.0]
        histogram[bisect.bisect_left(BUCKETS, seconds)] += 1
        histogram[-1] += seconds

    def fold_lane(self) -> None:
        counts = [(route, status, count) for status, sent in self.lane.items() for route, count in sent.items()]
        if not counts:
            return
        for sent in self.lane.values():
            sent.clear()  # in place: the fast lane holds these dictionaries
        mean = self.lane_seconds / sum(count for _route, _status, count in counts)
        self.lane_seconds = 0.0
        bucket = bisect.bisect_left(BUCKETS, mean)
        for route, status, count in counts:
            key = (route, status)
            self.requests[key] = self.requests.get(key, 0) + count
            self.hits[route] = self.hits.get(route, 0) + count
            self.lane_replies[route] = self.lane_replies.get(route, 0) + count
            histogram = self.latency.get(route)
            if histogram is None:
                histogram = self.latency[route] = [0] * (len(BUCKETS) + 1) + [0.0]
            histogram[bucket] += count
            histogram[-1] += mean * count

    def as_json(self) -> dict:
        self.fold_lane()
        cache = self.cache
        return {
            "requests": [[route, status, count] for (route, status), count in self.requests.items()],
            "latency": self.latency,
            "cache_hits": self.hits,
            "cache_misses": self.misses,
            "fast_lane": self.lane_replies,
            "cache_evictions": cache.evictions if cache is not None else 0,
            "searches": dict(self.searches.counts) if self.searches is not None else {},
            # Gauges: a worker's own, never carried into the retired totals.
            "gauges": {"cache_entries": len(cache), "cache_bytes": cache.nbytes} if cache is not None else {},
        }

    def flush(self) -> None:
        """Write this worker's counts where the other workers can read them."""
        if self.run_dir is None:
            return
        replace_file(self.run_dir / f"worker-{os.getpid()}.json", json.dumps(self.as_json()).encode())

    def totals(self) -> dict:
        """Every worker's counts added up, this worker's live ones included."""
        parts = [self.as_json()]
        if self.run_dir is not None:
            own = f"worker-{os.getpid()}.json"
            for path in self.run_dir.glob("*.json"):
                if path.name != own:
                    try:
                        parts.append(json.loads(path.read_text()))
                    except (OSError, ValueError):
                        continue
        return merge(parts)


def merge(parts: list[dict], *, gauges: bool = True) -> dict:
    """The sum of several workers' counts; without ``gauges``, only what counts up (for the
    totals of workers that have exited)."""
    requests: dict[tuple[str, int], int] = {}
    latency: dict[str, list[float]] = {}
    totals: dict[str, dict[str, int]] = {"cache_hits": {}, "cache_misses": {}, "fast_lane": {}, "searches": {}, "gauges": {}}
    evictions = 0
    for part in parts:
        for route, status, count in part.get("requests", ()):
            requests[(route, status)] = requests.get((route, status), 0) + count
        for route, histogram in part.get("latency", {}).items():
            into = latency.setdefault(route, [0] * len(histogram))
            for index, value in enumerate(histogram):
                into[index] += value
        for name, into_counts in totals.items():
            if name == "gauges" and not gauges:
                continue
            for label, count in part.get(name, {}).items():
                into_counts[label] = into_counts.get(label, 0) + count
        evictions += part.get("cache_evictions", 0)
    return {"requests": [[r, s, c] for (r, s), c in requests.items()], "latency": latency, **totals, "cache_evictions": evictions}


def retire(run_dir: Path, pid: int) -> None:
    """Fold the counts of a worker that has exited into the retired totals."""
    path = run_dir / f"worker-{pid}.json"
    try:
        last = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    retired = run_dir / RETIRED
    try:
        before = json.loads(retired.read_text())
    except (OSError, ValueError):
        before = {}
    replace_file(retired, json.dumps(merge([before, last], gauges=False)).encode())
    path.unlink(missing_ok=True)


def render(totals: dict, families: Families) -> str:
    """The Prometheus text exposition of ``totals`` and of ``families`` (name -> type, help, samples)."""
    lines = [
        "# HELP docsrv_requests_total Requests answered, by route template and status (all workers).",
        "# TYPE docsrv_requests_total counter",
    ]
    for route, status, count in sorted(totals["requests"]):
        lines.append(f'docsrv_requests_total{{route="{escape(route)}",status="{status}"}} {count}')
    lines += [
        "# HELP docsrv_request_duration_seconds Time to answer a request, by route template (all workers).",
        "# TYPE docsrv_request_duration_seconds histogram",
    ]
    for route, histogram in sorted(totals["latency"].items()):
        label = escape(route)
        cumulative = 0
        for bound, count in zip((*BUCKETS, "+Inf"), histogram[:-1], strict=True):
            cumulative += count
            lines.append(f'docsrv_request_duration_seconds_bucket{{route="{label}",le="{bound}"}} {int(cumulative)}')
        lines.append(f'docsrv_request_duration_seconds_sum{{route="{label}"}} {histogram[-1]:.6f}')
        lines.append(f'docsrv_request_duration_seconds_count{{route="{label}"}} {int(cumulative)}')
    for name, help_text in (("hits", "answered from"), ("misses", "not found in")):
        lines += [
            f"# HELP docsrv_reply_cache_{name}_total GET and HEAD requests {help_text} the reply cache, by route template (all workers).",
            f"# TYPE docsrv_reply_cache_{name}_total counter",
        ]
        for route, count in sorted(totals[f"cache_{name}"].items()):
            lines.append(f'docsrv_reply_cache_{name}_total{{route="{escape(route)}"}} {count}')
    lines += [
        "# HELP docsrv_fast_lane_replies_total Of the reply cache's hits, those the fast lane sent, by route template (all workers).",
        "# TYPE docsrv_fast_lane_replies_total counter",
    ]
    for route, count in sorted(totals["fast_lane"].items()):
        lines.append(f'docsrv_fast_lane_replies_total{{route="{escape(route)}"}} {count}')
    lines += [
        "# HELP docsrv_searches_total Searches by outcome: run, refused (queue full: 503) or dropped (client gone) (all workers).",
        "# TYPE docsrv_searches_total counter",
    ]
    for outcome, count in sorted(totals["searches"].items()):
        lines.append(f'docsrv_searches_total{{outcome="{outcome}"}} {count}')
    own = totals["gauges"]
    for name, kind, help_text, value in (
        ("evictions_total", "counter", "Replies evicted to keep the reply caches within their bytes (all workers).",
         totals["cache_evictions"]),
        ("entries", "gauge", "Entries in the reply caches, aliases included (sum over live workers).", own.get("cache_entries", 0)),
        ("bytes", "gauge", "Bytes held by the reply caches, every object counted (sum over live workers).", own.get("cache_bytes", 0)),
    ):
        lines += [f"# HELP docsrv_reply_cache_{name} {help_text}", f"# TYPE docsrv_reply_cache_{name} {kind}",
                  f"docsrv_reply_cache_{name} {value}"]
    return "\n".join(lines) + "\n" + families_text(families)


def families_text(families: Families) -> str:
    """The Prometheus text exposition of ``families`` (name -> type, help, samples)."""
    lines = []
    for name, (kind, help_text, samples) in families.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for labels, value in samples:
            shown = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{shown}}} {value}" if shown else f"{name} {value}")
    return "".join(line + "\n" for line in lines)


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
