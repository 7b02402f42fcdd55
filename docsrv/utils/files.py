"""Files other processes read: written whole, then renamed into place; or made from another
snapshot's file (linked, cloned or copied)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path


def replace_file(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` in one step: a reader sees the old file or the new, never half.
    ``durable``: on disk, the file and its name, before this returns (what a crash cannot undo)."""
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as out:
            out.write(data)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(partial, path)
        if durable:
            sync_directory(path.parent)
    except OSError as error:
        with contextlib.suppress(OSError):  # a full disk keeps no half-written file
            partial.unlink()
        if error.filename is None:  # a write's error names no file: this one
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise


def sync_directory(directory: Path) -> None:
    """The names in ``directory`` on disk (fsync(2) of the directory)."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


#: ioctl(2) FICLONE: a new file sharing the blocks of another (btrfs, xfs, bcachefs), copy on write.
FICLONE = 0x40049409


def clone_or_copy(source: Path, target: Path) -> None:
    """``target``, a new file holding what ``source`` holds: a clone of its blocks where the file
    system can, else a copy (in the kernel). Not a hard link: a link moves the change time of the
    file it links to, and a server watching the snapshot it serves would take that for a change
    (``serve.served.signature``), as would the record of that snapshot's check (``verified.py``)."""
    with open(source, "rb") as data, open(target, "wb") as out:
        try:
            fcntl.ioctl(out.fileno(), FICLONE, data.fileno())
            return
        except OSError:
            pass  # another file system, or another device: copied below (sendfile(2), in the kernel)
    shutil.copyfile(source, target)


def link_or_copy(source: str | Path, target: str | Path) -> None:
    """``target`` as a hard link to ``source`` (a file never written again), or a copy across devices."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
