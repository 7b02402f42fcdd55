"""Writing record files: JSON Lines, optionally gzip- or zstd-compressed."""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import msgspec
import zstandard

SUFFIX = {"none": ".jsonl", "gz": ".jsonl.gz", "zst": ".jsonl.zst"}


class RecordWriter:
    """Appends records of one kind to ``<kind>.jsonl[.gz|.zst]`` in a snapshot directory."""

    def __init__(self, directory: Path, kind: str, compress: str = "none") -> None:
        self.path = directory / f"{kind}{SUFFIX[compress]}"
        self.count = 0
        self._encoder = msgspec.json.Encoder()
        self._raw = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._stream: BinaryIO
        if compress == "gz":
            self._stream = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=6, mtime=0)
        elif compress == "zst":
            self._stream = zstandard.ZstdCompressor(level=3).stream_writer(self._raw, closefd=False)
        else:
            self._stream = self._raw

    def write(self, records: Iterable) -> None:
        batch = list(records)
        if batch:
            self._stream.write(self._encoder.encode_lines(batch))
            self.count += len(batch)

    def close(self) -> None:
        if self._stream is not self._raw:
            self._stream.close()
        self._raw.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
