"""A server following its replica's changesets: each one applied in memory, in every worker, as it
arrives, without a reload (DECISIONS.md section 7).

``docsrv snapshot pull`` keeps, beside the ``current`` link it points at the snapshot served, the
changesets that follow that snapshot, laid out as on the origin: ``DIR/head.json`` lists them
(sequence, what each follows and makes, size and SHA-256) and ``DIR/changesets/<sequence>.jsonl``
holds each (``replica/pull.py``). A server started with ``--watch`` on ``DIR/current`` follows them:

- its generation applies those it finds before it forks the workers (``caught_up``), so a
  restart serves the state it served before;
- each worker then looks at ``head.json`` several times a second (one ``stat``), and applies
  the new changesets that follow the state it serves: each checked against its seal and read,
  those that came together composed into one (``step``), applied to its store in the
  heavy-work thread (``store/changes.py``), then swapped in at once on the event loop
  (``ApiState.following``): a request sees the state before or the one after, and one under
  way finishes with its own.

A changeset that does not follow (another base, a gap), or fails its seal or its reading, is
never applied: the worker says so in one line and serves what it has until ``head.json``
changes. A changeset that changes the search index (pages, or a project or version that holds
pages made private or deleted) is applied with the index the pull built of the state it makes
(``replica/changeset_index.py``), opened in the heavy-work thread and swapped in with the store. One
that the store cannot take in memory (it moves a project or version, or changes the index and
the pull built no index of it) waits for the pull, which writes the snapshot it makes and points
``current`` at it: the server then reloads onto it, as it does for any new snapshot.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from ..api.state import ApiState
from ..edge.keys import applied_keys
from ..http.offload import offload
from ..replica.changeset_index import changeset_index
from ..search.index_files import remove_links
from ..search.query import SearchIndex
from ..snapshot.changeset import Changeset, composed, read_listed
from ..snapshot.errors import SnapshotError
from ..snapshot.origin import HEAD, PublishedChangeset, changeset_path, decode_head
from ..store.changes import applied, changes_index, in_memory
from ..store.loaded import Store
from .served import Served

log = logging.getLogger("docsrv")

#: How often a worker looks for a new changeset (a ``stat`` of ``head.json``, microseconds): half
#: of it is added to a changeset's lag, on average.
FOLLOW_SECONDS = 0.02


class ChainError(Exception):
    """A changeset the replica holds that cannot be applied; the message says why, in one line."""


@dataclass(frozen=True)
class Step:
    """The changesets that follow a store, applied at once as far as they apply in memory."""

    #: The store they made (the store itself when none applied).
    store: Store
    #: The search index of that store, when they changed pages (``replica/changeset_index.py``); else the one served goes on.
    search: SearchIndex | None
    #: The purge keys of the replies they touched.
    touched: list[str]
    #: Those applied, in order.
    entries: list[PublishedChangeset]
    #: The sequence of the first that waits for the pull's snapshot of it (it does not apply in memory).
    waits: int | None = None
    #: Why the first that could not be read was not applied, in one line.
    error: str | None = None
    #: The links the index was opened through, to remove once it serves (``search.index_files.open_index``).
    leftovers: list[Path] = field(default_factory=list)


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


@contextmanager
def uncollected(freeze: bool) -> Iterator[None]:
    """No garbage collection while changesets are read and applied: the lists an apply makes can
    be long, and each collection would read them again, with the GIL held. With ``freeze``, what
    is then alive is frozen, as a store is once loaded (``store.loaded.load_store``): for a
    generation before it forks its workers (``caught_up``), whose workers then share it and no
    collection reads it.

    A worker that serves never freezes. A freeze keeps for the worker's life whatever it finds,
    and a worker always has requests and connections under way: those in a cycle when they end
    (a connection closed leaves some) could no longer be collected, nor what they held, the
    state they began with among it. Frozen at each changeset, a worker asked through a new
    connection for each request kept megabytes at each one (``bench/memory.py``). Its later
    collections read what its applies made until the next fold replaces it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()  # before collections come back: one then would read everything made
        if enabled:
            gc.enable()


def step(directory: Path, store: Store, search: SearchIndex | None = None, *, freeze: bool = False) -> Step:
    """The changesets ``directory`` holds after ``store``, read and checked, composed into one and
    applied at once (``changeset.composed``), up to the first that does not apply in memory or
    cannot be read: applied one at a time, each would copy what the next copies again. Those that
    change the search index (``store.changes.changes_index``) are applied with the index of the
    last one's state (the pull keeps the newest two: ``replica.changeset_index.KEEP_INDEXES``),
    opened beside ``search``, the index served (the highlight files of its shards alike are
    kept); when it has none, up to the one before it. Those after the
    last index are applied without it: one that takes pages away all the same (its header says
    otherwise) is not applied, and waits for the pull's snapshot of it. The garbage collector is
    held meanwhile, and with ``freeze`` what is made is frozen (``uncollected``). What the step
    made and dropped (the changesets read, each change before and after) is gone before the
    collector comes back, which would otherwise read it all at its first collection, with the
    GIL held."""
    with uncollected(freeze):
        return _stepped(directory, store, search)


def _stepped(directory: Path, store: Store, search: SearchIndex | None) -> Step:
    entries: list[PublishedChangeset] = []
    changesets: list[Changeset] = []
    waits = error = None
    try:
        for entry in pending(directory, store.name, store.manifest.sequence):
            changeset = read_sealed(directory, entry)
            if not in_memory(changeset, store.public_url, indexed=True):
                waits = entry.sequence
                break
            entries.append(entry)
            changesets.append(changeset)
    except ChainError as problem:
        error = str(problem)
    index = None
    while paged := [at for at, changeset in enumerate(changesets) if changes_index(changeset)]:
        index = changeset_index(directory, entries[paged[-1]])
        if index is not None:
            break
        waits = entries[paged[-1]].sequence  # its index is not there: it waits for the pull's snapshot of it
        del entries[paged[-1]:], changesets[paged[-1]:]
    cut = paged[-1] + 1 if index is not None else 0
    made = store
    touched: list[str] = []
    done_entries: list[PublishedChangeset] = []
    for part, indexed in ((slice(0, cut), True), (slice(cut, None), False)):
        if not entries[part]:
            continue
        try:
            done = applied(made, composed(changesets[part]), entries[part][-1].published_at, indexed=indexed)
        except Exception as problem:  # records that do not hold together with the state: kept unchecked, by an older pull
            sequences = f"{entries[part][0].sequence}" + (f"-{entries[part][-1].sequence}" if len(entries[part]) > 1 else "")
            error = f"changeset {sequences} cannot be applied to {made.name}: {type(problem).__name__}: {one_line(problem)}"
            break
        if done is None:  # one whose header claims what its records do not: waits for the pull's snapshot
            waits = entries[part][0].sequence
            break
        made, touched, done_entries = done.store, touched + applied_keys(done), done_entries + entries[part]
    if not done_entries:
        return Step(store, None, [], [], waits, error)
    leftovers: list[Path] = []
    try:
        opened = SearchIndex.open(made, index, search, leftovers) if index is not None else None
    except (OSError, ValueError) as problem:  # the pull removed it meanwhile (a fold), or it was damaged
        return Step(store, None, [], [], None, f"{index}: {one_line(problem)}")
    return Step(made, opened, touched, done_entries, waits, error, leftovers)


def one_line(problem: Exception) -> str:
    return " ".join(str(problem).split())[:200]


def caught_up(served: Served, directory: Path | None) -> Served:
    """``served`` with every changeset that follows it applied, as far as they apply in memory
    (a generation, before it forks its workers). A problem is logged; the changesets read before
    it are applied."""
    if directory is None:
        return served
    done = step(directory, served.store, served.search, freeze=True)
    remove_links(done.leftovers)
    if done.error is not None:
        log.error("changeset not applied: %s; serving %s", done.error, done.store.name)
    if not done.entries:
        return served
    log.info("applied the changesets after %s: serving %s (sequence %d)", served.store.name, done.store.name, done.store.manifest.sequence)
    return Served(done.store, done.search or served.search, served.directory, served.signature)


class Serving(Protocol):
    """What answers a worker's requests (``serve.worker.Listening``): the state it serves, and how it
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
                try:
                    await self.catch_up()
                except Exception as problem:  # a follower never dies: the worker serves on what it has
                    self.failed(f"{type(problem).__name__}: {one_line(problem)}")

    async def catch_up(self) -> None:
        """Apply the changesets that follow the state served, at once (``step``)."""
        state = self.holder.state
        started = time.perf_counter()
        done = await offload(step, self.directory, state.store, state.search)
        if done.entries:
            state = state.following(done.store, done.touched, done.search)
            self.holder.serve(state)
            # Said as it serves (the links its index was opened through are removed after):
            # how long after its publish, and how long since this worker saw it.
            now, took = datetime.now(UTC), time.perf_counter() - started
            for entry in done.entries:
                log.info("worker %d applied changeset %d: serving %s%s (in %.3f s)", os.getpid(), entry.sequence, state.store.name,
                         f", {(now - entry.published_at).total_seconds():.3f} s after it was published" if entry.published_at else "",
                         took)
            await offload(remove_links, done.leftovers)
        self.holder.state.runtime.waiting_for = done.waits
        if done.waits is not None:
            log.info("changeset %d changes what is not applied in memory: serving %s until the pull's snapshot of it",
                     done.waits, state.store.name)
        if done.error is not None:
            self.failed(done.error)
        else:
            self.holder.state.runtime.follow_problem = None

    def failed(self, problem: str) -> None:
        """Say once, in the log, /readyz and /metrics, why the changesets after the state served
        are not applied; the worker serves on what it has."""
        runtime = self.holder.state.runtime
        if runtime.follow_problem != problem:
            runtime.follow_problem = problem
            log.error("changeset not applied: %s; serving %s", problem, self.holder.state.store.name)
