"""The master process and its parts: the worker pool, the reload policy, the status it shares."""

from .master import serve

__all__ = ["serve"]
