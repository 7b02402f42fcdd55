"""When to reload, and a reload under way.

A reload is asked for by SIGHUP, by ``--watch`` seeing another snapshot at the path, or by the
files of the snapshot served changing on disk. A snapshot is taken only when settled: its
manifest lists each file's size, and every file has it (a snapshot still being copied is waited
for, not loaded); a failed load is tried again only when the files change again. One reload runs
at a time; one asked for meanwhile follows it.

The snapshot loads in a thread of its own (``Reload``), so that the master goes on supervising
meanwhile: a worker that dies is replaced, SIGTERM stops the server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

import msgspec

from ..serving import Served, Signature, load_served, resolve, signature
from ..snapshot.records import Manifest
from .workers import Workers

log = logging.getLogger("docsrv")


class Reload:
    """A reload under way: the snapshot loading in a thread, then its workers starting. The
    master's loop advances it and never waits for it; the thread writes to ``wake`` when done."""

    def __init__(self, why: str, directory: Path, wake: int) -> None:
        self.why = why
        self.directory = directory
        self.error: Exception | None = None
        self._served: Served | None = None
        #: The new workers, once the snapshot has loaded.
        self.workers: Workers | None = None
        self._wake = wake
        self.thread = threading.Thread(target=self._load, name="docsrv-reload", daemon=True)
        self.thread.start()

    def _load(self) -> None:
        try:
            self._served = load_served(self.directory)
        except Exception as error:  # a bad snapshot of any kind: reported by the loop
            self.error = error
        finally:
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake, b"L")

    @property
    def loading(self) -> bool:
        return self.thread.is_alive()

    def loaded(self) -> Workers:
        """The set of new workers (none started yet) on the loaded snapshot."""
        if self.workers is None:
            assert self._served is not None
            self.workers = Workers(self._served)
        return self.workers

    def pids(self) -> set[int]:
        return self.workers.pids() if self.workers is not None else set()


class ReloadPolicy:
    """Whether the snapshot at the path should be loaded now, and what is queued."""

    def __init__(self, snapshot: Path, served: Served, *, watch: bool) -> None:
        self.snapshot = snapshot
        self.watch = watch
        #: (directory, signature) of what is served, of the last snapshot a load was tried on, and
        #: of one not yet settled that is waited for.
        self.loaded: tuple[Path, Signature] = (served.directory, served.signature)
        self.name = served.store.name
        self.tried: tuple[Path, Signature] | None = None
        self.waiting_for: tuple[Path, Signature] | None = None
        #: Why another reload was asked for while one was under way (taken after it).
        self.again: str | None = None

    def look(self) -> tuple[str | None, tuple[str, Path] | None]:
        """Look at the snapshot path: (a problem with the files served, if they changed on disk;
        why and what to reload, when a settled snapshot other than the one served is there)."""
        directory = resolve(self.snapshot)
        now = (directory, signature(directory))
        if now == self.loaded or now == self.tried:
            return None, None
        problem = None
        if directory == self.loaded[0]:
            changed = sorted({entry[0] for entry in set(now[1]) ^ set(self.loaded[1])})
            problem = f"files of snapshot {self.name} changed on disk: {', '.join(changed)}"
        elif not self.watch:
            return None, None
        if not settled(directory):
            if self.waiting_for != now:
                self.waiting_for = now
                log.info("waiting for the snapshot at %s to be complete", self.snapshot)
            return problem, None
        self.tried = now
        why = f"a new snapshot at {self.snapshot}" if directory != self.loaded[0] else "its files changed"
        return problem, (why, directory)

    def swapped(self, served: Served) -> None:
        self.loaded = (served.directory, served.signature)
        self.name = served.store.name

    def queued(self) -> str | None:
        """Why a reload asked for during the last one should follow it, if one was."""
        why, self.again = self.again, None
        return why


def settled(directory: Path) -> bool:
    """Whether a snapshot directory looks complete: its manifest reads, and every file it lists
    is there at its full size (the load then checks every digest)."""
    try:
        manifest = msgspec.json.decode((directory / "manifest.json").read_bytes(), type=Manifest)
        return all((directory / name).stat().st_size == entry.size for name, entry in manifest.files.items())
    except (OSError, msgspec.DecodeError):
        return False
