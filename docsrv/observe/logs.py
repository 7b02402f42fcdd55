"""How every docsrv process writes its log: one line a record, as text or as JSON.

``--log-format json`` (``DOCSRV_LOG_FORMAT=json``) writes one JSON object a line, as the access
log does, for a collector that parses them: ``time`` (ISO 8601, UTC), ``level``, ``logger``,
``pid``, ``message``, and ``exception`` (the traceback, as one string) when there is one. The
text form is ``time level message``; a message of several lines (a snapshot's problems) is
folded onto one, its lines joined by `` | ``, so that a line-based collector never splits a
record. A traceback stays below its line in the text form.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).replace("\r", "").replace("\n", " | ")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def configure(log_format: str) -> None:
    """Log INFO and above to standard error in ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
