"""A server following its replica's changesets: each one applied in memory, in every worker, as it
arrives, without a reload (DECISIONS.md section 7).

``docsrv snapshot pull`` keeps, beside the ``current`` link it points at the snapshot served, the
changesets that follow that snapshot, laid out as on the origin: ``DIR/head.json`` lists them
(sequence, what each follows and makes, size and SHA-256) and ``DIR/changesets/<sequence>.jsonl``
holds each (``pull.py``). A server started with ``--watch`` on ``DIR/current`` follows them:

- its generation applies those it finds before it forks the workers (``caught_up``), so a
  restart serves the state it served before;
- each worker then looks at ``head.json`` several times a second (one ``stat``), and applies
  each new changeset that follows the state it serves: checked against its seal, read, and
  applied to its store in the heavy-work thread (``store_changes.py``), then swapped in at once
  on the event loop (``ApiState.following``): a request sees the state before or the one after,
  and one under way finishes with its own.

A changeset that does not follow (another base, a gap), or fails its seal or its reading, is
never applied: the worker says so in one line and serves what it has until ``head.json``
changes. One that the store cannot take in memory (it changes projects, versions or pages) waits
for the pull, which writes the snapshot it makes and points ``current`` at it: the server then
reloads onto it, as it does for any new snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from .api.state import ApiState
from .http.offload import offload
from .http.purge import build_change_keys
from .serving import Served
from .snapshot.changeset import Changeset, composed, read_listed
from .snapshot.errors import SnapshotError
from .snapshot.origin import HEAD, PublishedChangeset, changeset_path, decode_head
from .store import Store
from .store_changes import applied, in_memory

log = logging.getLogger("docsrv")

#: How often a worker looks for a new changeset (a ``stat`` of ``head.json``).
FOLLOW_SECONDS = 0.1


class ChainError(Exception):
    """A changeset the replica holds that cannot be applied; the message says why, in one line."""


@dataclass(frozen=True)
class Step:
    """A changeset applied: the store it made, and the purge keys of the replies it touched."""

    store: Store
    touched: list[str]


def chain_directory(snapshot: Path) -> Path | None:
    """Where the changesets that follow the snapshot at ``snapshot`` are kept: the directory of
    the link a pull points at the snapshot (None when ``snapshot`` is no link)."""
    return snapshot.parent if snapshot.is_symlink() else None


def pending(directory: Path, name: str, sequence: int) -> list[PublishedChangeset]:
    """The changesets ``directory`` holds after the state ``name`` at ``sequence``, in order; none
    when the first of them does not follow that state (the pull is changing the chain)."""
    try:
        head = decode_head((directory / HEAD).read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as error:
        raise ChainError(f"{directory / HEAD}: {error}") from None
    after = [entry for entry in head.changesets if entry.sequence > sequence]
    if not after or after[0].sequence != sequence + 1 or after[0].follows != name:
        return []
    return after


def read_sealed(directory: Path, entry: PublishedChangeset) -> Changeset:
    """A changeset the replica holds, checked against what ``head.json`` records of it."""
    where = directory / changeset_path(entry.sequence)
    try:
        return read_listed(where.read_bytes(), entry, str(where))
    except OSError as error:
        raise ChainError(f"{where}: {error.strerror}") from None
    except SnapshotError as error:
        raise ChainError(error.summary()) from None


def step(directory: Path, store: Store, entry: PublishedChangeset) -> Step | None:
    """Apply one changeset to ``store``: None when it is not applied in memory (``store_changes``)."""
    done = applied(store, read_sealed(directory, entry), entry.published_at)
    if done is None:
        return None
    touched = [key for before, after in done.builds.values() for key in build_change_keys(before, after)]
    return Step(done.store, touched)


def caught_up(served: Served, directory: Path | None) -> Served:
    """``served`` with every changeset that follows it applied, as far as they apply in memory
    (a generation, before it forks its workers). They are composed into one and applied once:
    the 201 changesets of 10 builds a large replica kept took 3.5 s in turn, 0.28 s composed. A
    problem is logged; the changesets read before it are applied."""
    if directory is None:
        return served
    store = served.store
    changesets: list[Changeset] = []
    last: PublishedChangeset | None = None
    try:
        for entry in pending(directory, store.name, store.manifest.sequence):
            changeset = read_sealed(directory, entry)
            if (last is not None and entry.follows != last.product) or not in_memory(changeset, store.public_url):
                break
            changesets.append(changeset)
            last = entry
    except ChainError as error:
        log.error("changeset not applied: %s; serving %s", error, last.product if last is not None else store.name)
    if last is None:
        return served
    done = applied(store, composed(changesets), last.published_at)
    assert done is not None  # the first follows the store (``pending``), each the one before, and each applies in memory
    log.info("applied the changesets after %s: serving %s (sequence %d)", store.name, done.store.name, done.store.manifest.sequence)
    return Served(done.store, served.search, served.directory, served.signature)


class Serving(Protocol):
    """What answers a worker's requests (``server.Listening``): the state it serves, and how it
    moves on to another."""

    state: ApiState

    def serve(self, state: ApiState) -> None: ...


class Follower:
    """A worker's follower of the changesets in ``directory``; ``holder`` answers its requests."""

    def __init__(self, directory: Path, holder: Serving) -> None:
        self.directory = directory
        self.holder = holder
        self._seen: tuple[int, int, int] | None = None

    async def run(self) -> None:
        while True:
            await asyncio.sleep(FOLLOW_SECONDS)
            try:
                stat = (self.directory / HEAD).stat()
            except OSError:
                continue
            seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if seen != self._seen:
                self._seen = seen
                await self.catch_up()

    async def catch_up(self) -> None:
        """Apply each changeset that follows the state served, one at a time."""
        state = self.holder.state
        try:
            for entry in pending(self.directory, state.store.name, state.store.manifest.sequence):
                done = await offload(step, self.directory, state.store, entry)
                if done is None:
                    log.info("changeset %d changes what is not applied in memory: serving %s until the pull's snapshot of it",
                             entry.sequence, state.store.name)
                    return
                state = state.following(done.store, done.touched)
                self.holder.serve(state)
                published = done.store.published_at
                log.info("worker %d applied changeset %d: serving %s%s", os.getpid(), entry.sequence, state.store.name,
                         f", {(datetime.now(UTC) - published).total_seconds():.3f} s after it was published" if published else "")
        except ChainError as error:
            log.error("changeset not applied: %s; serving %s", error, state.store.name)
