"""Files other processes read while they are rewritten: written whole, then renamed into place."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` in one step: a reader sees the old file or the new, never half."""
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):  # a full disk keeps no half-written file
            partial.unlink()
        raise
