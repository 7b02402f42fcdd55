"""What a serving process keeps across snapshots: its metrics, its access log, and the status
that the master shares with every worker (reloads and their failures)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import orjson
from aiohttp import web

from .metrics import Metrics

STATUS_FILE = "status.json"


class Runtime:
    def __init__(self, run_dir: Path | None = None, *, access_log: bool = False) -> None:
        self.run_dir = run_dir
        self.metrics = Metrics(run_dir)
        self.access_log = access_log
        self.started = time.time()

    def status(self) -> dict:
        """Reload counts and the last reload error, as the master last wrote them."""
        if self.run_dir is not None:
            try:
                return json.loads((self.run_dir / STATUS_FILE).read_text())
            except (OSError, ValueError):
                pass
        return {"reloads": 0, "reload_failures": 0, "last_reload_error": None, "workers": 1, "load_seconds": None}

    def log_access(self, request: web.BaseRequest, status: int, size: int, seconds: float, route: str, snapshot: str) -> None:
        """One JSON line on standard output per request (``--access-log``)."""
        record = {
            "time": time.time(),
            "worker": os.getpid(),
            "remote": request.remote,
            "method": request.method,
            "path": request.raw_path,
            "route": route,
            "status": status,
            "bytes": size,
            "ms": round(seconds * 1000, 3),
            "snapshot": snapshot,
            "user_agent": request.headers.get("User-Agent"),
        }
        sys.stdout.write(orjson.dumps(record).decode() + "\n")


def write_status(run_dir: Path, status: dict) -> None:
    partial = run_dir / (STATUS_FILE + ".partial")
    partial.write_text(json.dumps(status))
    os.replace(partial, run_dir / STATUS_FILE)
