"""prctl(2) for docsrv's processes: a death signal from the parent, a name ``ps`` shows, and the
master as the reaper of workers left by their parents. Where prctl is missing (not Linux),
nothing happens: the workers also watch their parent themselves."""

from __future__ import annotations

import contextlib
import ctypes

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, value: int | bytes) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, ctypes.c_char_p(value) if isinstance(value, bytes) else value, 0, 0, 0)


def die_with_parent(signum: int) -> None:
    """Ask the kernel to send ``signum`` when the parent dies."""
    prctl(PR_SET_PDEATHSIG, signum)


def name_process(name: str) -> None:
    """Name the calling process as ``ps`` and ``top`` show it (at most 15 bytes)."""
    prctl(PR_SET_NAME, name.encode()[:15])


def become_subreaper() -> None:
    """Make the calling process the one that children left by their parents go to."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
