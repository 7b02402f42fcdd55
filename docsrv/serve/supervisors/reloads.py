"""When to reload, and a reload under way.

A reload is asked for by SIGHUP, by ``--watch`` seeing another snapshot at the path, or by the
files of the snapshot served changing on disk. A snapshot is taken only when settled: its
manifest lists each file's size, and every file has it (a snapshot still being copied is waited
for, not loaded); a failed load is tried again only when the files change again. One reload runs
at a time; one asked for meanwhile follows it.

The snapshot loads in a process of its own (a generation), so that the master goes on supervising
meanwhile: a worker that dies is replaced, SIGTERM stops the server.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec

from ...snapshot.load import manifest_of
from ..served import Signature, resolve, signature
from .generation import Generation, Loaded
from .workers import Workers

log = logging.getLogger("docsrv")


class Reload:
    """A reload under way: its generation loading the snapshot (``generation.py``), then its
    workers starting. The master's loop advances it and never waits for it."""

    def __init__(self, why: str, generation: Generation) -> None:
        self.why = why
        self.generation = generation
        #: The new workers, once the snapshot has loaded.
        self.workers: Workers | None = None

    @property
    def loading(self) -> bool:
        return self.generation.loading

    @property
    def error(self) -> Exception | None:
        return self.generation.error

    def loaded(self) -> Workers:
        """The set of new workers (none started yet) of the loaded generation."""
        if self.workers is None:
            self.workers = Workers(self.generation)
        return self.workers

    def pids(self) -> set[int]:
        return self.workers.pids() if self.workers is not None else set()


class ReloadPolicy:
    """Whether the snapshot at the path should be loaded now, and what is queued."""

    def __init__(self, snapshot: Path, loaded: Loaded, *, watch: bool) -> None:
        self.snapshot = snapshot
        self.watch = watch
        #: (directory, signature) of what is served, of the last snapshot a load was tried on, and
        #: of one not yet settled that is waited for.
        self.loaded: tuple[Path, Signature] = (Path(loaded.directory), loaded.signature)
        self.name = loaded.name
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

    def swapped(self, loaded: Loaded) -> None:
        self.loaded = (Path(loaded.directory), loaded.signature)
        self.name = loaded.name

    def queued(self) -> str | None:
        """Why a reload asked for during the last one should follow it, if one was."""
        why, self.again = self.again, None
        return why


def settled(directory: Path) -> bool:
    """Whether a snapshot directory looks complete: its manifest reads, and every file it lists
    is there at its full size (the load then checks every digest)."""
    try:
        manifest = manifest_of(directory)
        return all((directory / name).stat().st_size == entry.size for name, entry in manifest.files.items())
    except (OSError, msgspec.DecodeError):
        return False
