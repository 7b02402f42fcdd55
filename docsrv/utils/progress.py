"""Progress bars for long snapshot work: shown on a terminal, silent when output is not one
(tqdm is imported only then: it costs every process's start, servers' and tests' included)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from io import BufferedReader
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm


def wanted() -> bool:
    """Whether to draw progress: only when a person is watching stderr."""
    return sys.stderr.isatty()


@contextmanager
def progress_bar(total: int | None, desc: str, enabled: bool, *, unit: str = "B") -> Iterator[tqdm | None]:
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False, file=sys.stderr) as bar:
        yield bar


class ReadProgress:
    """A binary file whose reads advance a progress bar by the bytes read."""

    def __init__(self, raw: BufferedReader, bar: tqdm) -> None:
        self._raw = raw
        self._bar = bar

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._bar.update(len(data))
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:
        count = self._raw.readinto(buffer)
        self._bar.update(count or 0)
        return count

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)
