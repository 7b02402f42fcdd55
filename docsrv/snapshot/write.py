"""Writing record files: JSON Lines, optionally gzip- or zstd-compressed."""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import msgspec
import zstandard

from .load import record_files
from .records import FileDigest, Manifest

SUFFIX = {"none": ".jsonl", "gz": ".jsonl.gz", "zst": ".jsonl.zst"}


def digest_of(path: Path) -> FileDigest:
    with open(path, "rb") as data:
        return FileDigest(size=os.fstat(data.fileno()).st_size, sha256=hashlib.file_digest(data, "sha256").hexdigest())


class RecordWriter:
    """Writes records of one kind to ``<kind>.jsonl[.gz|.zst]`` in a snapshot directory.

    The records go to a ``.partial`` file that takes the real name only when the writer is
    closed without an error, so a reader never sees half a file.
    """

    def __init__(self, directory: Path, kind: str, compress: str = "none") -> None:
        self.path = directory / f"{kind}{SUFFIX[compress]}"
        self._partial = self.path.with_name(self.path.name + ".partial")
        self.count = 0
        self._encoder = msgspec.json.Encoder()
        self._raw = open(self._partial, "wb")  # noqa: SIM115 - closed in close()
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

    def close(self, *, keep: bool = True) -> None:
        if self._stream is not self._raw:
            self._stream.close()
        self._raw.close()
        if keep:
            os.replace(self._partial, self.path)
        else:
            self._partial.unlink(missing_ok=True)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close(keep=kind is None)


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """Write ``manifest.json`` in one step (a new file renamed over the old), listing the size and
    digest of every record file in ``directory``: written last, it seals the snapshot."""
    manifest = msgspec.structs.replace(manifest, files={path.name: digest_of(path) for path in record_files(directory)})
    partial = directory / "manifest.json.partial"
    partial.write_bytes(msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n")
    os.replace(partial, directory / "manifest.json")
