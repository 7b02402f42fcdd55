"""Datetimes as the API shows them: in UTC (orjson then writes them with a ``Z``)."""

from __future__ import annotations

from datetime import datetime, timezone


def utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is timezone.utc else moment.astimezone(timezone.utc)
