"""What an operator watches of a follower: its ``/metrics`` (``--metrics-port``), and its log, one
line per changeset, or one a second when it publishes faster.

- ``docsrv_source_lag_seconds``: from the COMMIT of the last transaction of the last changeset
  to that changeset on the origin, durably (the promise is a second: DECISIONS.md section 7).
- ``docsrv_source_retained_wal_bytes``: the WAL the database keeps for the slot (from its
  ``restart_lsn`` to the server's current position), asked of the database every
  SLOT_SECONDS: what a stopped or slow follower costs the database's disk.
- counts of what was published (changesets and bases, records, transactions), the time of the
  last publish, and the process's own metrics, as a server's ``/metrics`` names them.

The page is served by a thread of its own (Python's ``http.server``): a scrape reads figures the
follower keeps under a lock, and never waits on the stream.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..observe.metrics import families_text
from ..observe.process_metrics import Families, build_info, own_process

log = logging.getLogger("docsrv")

#: How often the follower asks the database how much WAL its slot retains.
SLOT_SECONDS = 10.0
#: At most one line about publishing in this many seconds: the changesets published meanwhile are
#: said together in the next.
LOG_SECONDS = 1.0


class FollowerMetrics:
    """The figures of a follower, kept by its stream and read by scrapes (under a lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lag_seconds: float | None = None
        self.published: dict[str, int] = {"changeset": 0, "snapshot": 0}
        self.records = 0
        self.transactions = 0
        self.last_published: float | None = None
        self.retained_wal_bytes: int | None = None

    def publishing(self, kind: str, records: int, transactions: int, lag_seconds: float | None) -> None:
        with self._lock:
            self.published[kind] += 1
            self.records += records
            self.transactions += transactions
            self.last_published = time.time()
            if lag_seconds is not None:
                self.lag_seconds = lag_seconds

    def retained(self, wal_bytes: int | None) -> None:
        with self._lock:
            self.retained_wal_bytes = wal_bytes

    def families(self) -> Families:
        with self._lock:
            found: Families = {
                "docsrv_source_published_total": ("counter", "What the follower published: changesets, and snapshots whole "
                                                  "(a base or a compaction).",
                                                  [({"kind": kind}, count) for kind, count in self.published.items()]),
                "docsrv_source_records_total": ("counter", "Records changed by the changesets published.", [({}, self.records)]),
                "docsrv_source_transactions_total": ("counter", "Committed transactions of the source database published.",
                                                     [({}, self.transactions)]),
            }
            if self.lag_seconds is not None:
                found["docsrv_source_lag_seconds"] = ("gauge", "Seconds from the COMMIT of the last transaction of the last "
                                                      "changeset to its publish.", [({}, round(self.lag_seconds, 6))])
            if self.last_published is not None:
                found["docsrv_source_last_published_timestamp_seconds"] = (
                    "gauge", "When the follower last published, since the epoch.", [({}, round(self.last_published, 3))])
            if self.retained_wal_bytes is not None:
                found["docsrv_source_retained_wal_bytes"] = ("gauge", "WAL the source database keeps for the follower's slot "
                                                             "(from its restart_lsn to the current position).",
                                                             [({}, self.retained_wal_bytes)])
        return {**found, **own_process(), **build_info()}


def serve_metrics(metrics: FollowerMetrics, host: str, port: int) -> ThreadingHTTPServer:
    """``GET /metrics`` on ``host:port``, in a daemon thread, until the process ends."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404)
                return
            body = families_text(metrics.families()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # http.server's names
            pass  # scrapes are not logged

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="docsrv-metrics", daemon=True).start()
    return server


class PublishLog:
    """The follower's lines about what it published: one per changeset, or, when they come faster,
    one at most every LOG_SECONDS that says together those published since the last."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.said = float("-inf")
        self.unsaid: list[tuple[int, int, int, str, float]] = []

    def published(self, sequence: int, records: int, transactions: int, lsn: str, lag_seconds: float) -> None:
        self.unsaid.append((sequence, records, transactions, lsn, lag_seconds))
        self.say_if_due()

    def say_if_due(self) -> None:
        """Say what was published and not said, when a line is due."""
        if self.unsaid and self.clock() - self.said >= LOG_SECONDS:
            self.say()

    def say(self) -> None:
        unsaid, self.unsaid = self.unsaid, []
        self.said = self.clock()
        if not unsaid:
            return
        first, last = unsaid[0], unsaid[-1]
        records, transactions = sum(u[1] for u in unsaid), sum(u[2] for u in unsaid)
        if len(unsaid) == 1:
            log.info("published changeset %d: %d records changed by %d transaction(s) to %s, %.0f ms after its last commit",
                     first[0], records, transactions, first[3], first[4] * 1000)
        else:
            lags = [u[4] * 1000 for u in unsaid]
            log.info("published changesets %d-%d (%d): %d records changed by %d transaction(s) to %s, %.0f-%.0f ms after "
                     "their last commits", first[0], last[0], len(unsaid), records, transactions, last[3], min(lags), max(lags))
