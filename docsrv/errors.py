"""Errors the command line reports in one line, without a traceback (with SnapshotError)."""

from __future__ import annotations


class StartError(Exception):
    """A server that cannot start: the message says why."""


class CommandError(Exception):
    """A command that refuses to do what would lose data (an empty import, an existing output)."""


class PullError(Exception):
    """A pull that failed; the message says what, in one line."""
