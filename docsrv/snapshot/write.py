"""Writing snapshots: record files (JSON Lines, optionally gzip- or zstd-compressed), the
manifest that seals them, and whole directories built aside and renamed into place."""

from __future__ import annotations

import ctypes
import gzip
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import msgspec
import zstandard

from ..errors import CommandError
from ..utils.files import replace_file
from .load import record_files
from .records import FileDigest, Manifest
from .verified import carry_record

SUFFIX = {"none": ".jsonl", "gz": ".jsonl.gz", "zst": ".jsonl.zst"}
#: What ends the name of a file or directory written aside before it is renamed into place.
PARTIAL = ".partial"


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
        self._partial = self.path.with_name(self.path.name + PARTIAL)
        self.count = 0
        self._encoder = msgspec.json.Encoder()
        self._raw = open(self._partial, "wb")  # noqa: SIM115 - closed in close()
        self._stream: IO[bytes] | gzip.GzipFile
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

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, traceback: object) -> None:
        self.close(keep=kind is None)


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """Write ``manifest.json`` in one step (a new file renamed over the old), listing the size and
    digest of every record file in ``directory``: written last, it seals the snapshot."""
    manifest = msgspec.structs.replace(manifest, files={path.name: digest_of(path) for path in record_files(directory)})
    replace_file(directory / "manifest.json", msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n")


def seal_index(directory: Path, index: Path) -> int:
    """List the files of the search index in ``index`` (inside ``directory``) in the snapshot's
    manifest, with their sizes and digests, so that it is published and pulled with the records;
    the manifest's other fields are kept. Hidden files (tantivy's locks and bookkeeping) are not
    part of it. Returns how many files were listed."""
    old = (directory / "manifest.json").read_bytes()
    manifest = msgspec.json.decode(old, type=Manifest)
    files = sorted(p for p in index.rglob("*") if p.is_file() and not p.name.startswith("."))
    listed = {path.relative_to(index).as_posix(): digest_of(path) for path in files}
    new = msgspec.json.format(msgspec.json.encode(msgspec.structs.replace(manifest, index=listed)), indent=2) + b"\n"
    replace_file(directory / "manifest.json", new)
    carry_record(directory, old, new)  # the record files are as they were: their check stands
    return len(listed)


@contextmanager
def built_aside(target: Path, *, replace: bool = False) -> Iterator[Path]:
    """A new directory beside ``target`` to build a snapshot in. When the block ends without an
    error, it takes ``target``'s place (an existing ``target`` only with ``replace``); when it
    fails or is interrupted, it is removed and ``target`` is as it was."""
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise CommandError(f"{target}: not a directory (name the snapshot directory itself)")
    if target.exists() and not replace:
        raise CommandError(f"{target} already exists: choose another directory, or --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        partial = Path(tempfile.mkdtemp(prefix=f".{target.name}{PARTIAL}-", dir=target.parent))
    except OSError as error:  # named by the directory asked for, not the temporary one beside it
        raise OSError(error.errno, error.strerror, str(target)) from error
    try:
        yield partial
        partial.chmod(0o755)
        put_in_place(partial, target)
    except OSError as error:  # a full disk, a read-only directory: named by the path being written
        shutil.rmtree(partial, ignore_errors=True)
        written = Path(error.filename) if isinstance(error.filename, str) else None
        name = target / written.relative_to(partial) if written is not None and written.is_relative_to(partial) else target
        raise OSError(error.errno, error.strerror, str(name)) from error
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


#: renameat2(2): exchange two paths in one step.
AT_FDCWD = -100
RENAME_EXCHANGE = 2


def put_in_place(new: Path, target: Path) -> None:
    """Rename ``new`` to ``target``. An existing ``target`` is exchanged with it in one step where
    the system allows (Linux renameat2), else moved aside first; then it is removed."""
    if not target.exists():
        os.rename(new, target)
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        exchanged = libc.renameat2(AT_FDCWD, os.fsencode(new), AT_FDCWD, os.fsencode(target), RENAME_EXCHANGE) == 0
    except (OSError, AttributeError):
        exchanged = False
    if exchanged:
        shutil.rmtree(new)  # it now holds what was at target
        return
    old = new.with_name(new.name + ".old")
    os.rename(target, old)
    os.rename(new, target)
    shutil.rmtree(old)
