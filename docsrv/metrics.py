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

#: Upper bounds of the latency histogram, in seconds.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
RETIRED = "retired.json"


class Metrics:
    """One worker's counts: requests by route template and status, and latency by route."""

    def __init__(self, run_dir: Path | None) -> None:
        self.run_dir = run_dir
        self.requests: dict[tuple[str, int], int] = {}
        #: route -> [bucket counts..., +Inf count, sum of seconds]
        self.latency: dict[str, list[float]] = {}

    def observe(self, route: str, status: int, seconds: float) -> None:
        key = (route, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        histogram = self.latency.get(route)
        if histogram is None:
            histogram = self.latency[route] = [0] * (len(BUCKETS) + 1) + [0.0]
        histogram[bisect.bisect_left(BUCKETS, seconds)] += 1
        histogram[-1] += seconds

    def as_json(self) -> dict:
        return {
            "requests": [[route, status, count] for (route, status), count in self.requests.items()],
            "latency": self.latency,
        }

    def flush(self) -> None:
        """Write this worker's counts where the other workers can read them."""
        if self.run_dir is None:
            return
        path = self.run_dir / f"worker-{os.getpid()}.json"
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(self.as_json()))
        os.replace(partial, path)

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


def merge(parts: list[dict]) -> dict:
    requests: dict[tuple[str, int], int] = {}
    latency: dict[str, list[float]] = {}
    for part in parts:
        for route, status, count in part.get("requests", ()):
            requests[(route, status)] = requests.get((route, status), 0) + count
        for route, histogram in part.get("latency", {}).items():
            into = latency.setdefault(route, [0] * len(histogram))
            for index, value in enumerate(histogram):
                into[index] += value
    return {"requests": [[r, s, c] for (r, s), c in requests.items()], "latency": latency}


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
    partial = retired.with_suffix(".partial")
    partial.write_text(json.dumps(merge([before, last])))
    os.replace(partial, retired)
    path.unlink(missing_ok=True)


def render(totals: dict, gauges: dict[str, tuple[str, float, dict[str, str]]]) -> str:
    """The Prometheus text exposition of ``totals`` and of ``gauges`` (name -> help, value, labels)."""
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
    for name, (help_text, value, labels) in gauges.items():
        shown = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name}{{{shown}}} {value}"]
    return "\n".join(lines) + "\n"


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
