"""Datetimes as the API shows them: in UTC (orjson then writes them with a ``Z``)."""

from __future__ import annotations

from datetime import UTC, datetime


def utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)
