"""The search index of the state kept changesets of pages make, which the pull builds and a
following server opens: pages are then applied in memory, as every other kind is.

A changeset that changes pages, or makes private or deletes a project or version that holds
pages, changes what doc search finds (``store.changes.changes_index``). The pull that keeps it
builds the index of the state it makes (of several pulled at once, the last one's) beside the
changesets, in ``DIR/indexes/<sequence>/``, before ``head.json`` lists it (the index first, the
pointer last): the shards whose served pages changed are built again from the snapshot's lines
of theirs with every kept change made, in ``DIR/index-shards/<sequence>/``, and each shard of
the index is a symbolic link to its directory there or to the one the index of the state before
links to, the snapshot's own index's included (``search.rebuild.rebuild_index``). Every score then
equals that of an index built whole from the snapshot the changesets make, and a fold of them
finds that index current, shard by shard. A worker applying the changeset opens that index and
serves it with the store the changeset makes, both at once (``serve/following.py``).

The pull keeps the newest two of those indexes: a worker applies every changeset it has not
applied at once, with the last one's index. A kept changeset that changes the index and has no
index at or after it is not applied in memory: it waits for the pull's snapshot of it. A
sidecar keeps the store of the state it indexed last and where the lines of the snapshot's pages
file are (``StateCache``), so that the next changeset costs the shards it changes.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..search.build import link_files
from ..search.index_files import LISTING, SHARDS_DIRECTORY, shard_directories, shard_path
from ..search.location import current_index, fingerprint
from ..search.rebuild import PageLines, plan_changed_shards, rebuild_index
from ..snapshot.changeset import Changeset, composed
from ..snapshot.origin import PublishedChangeset, changeset_path
from ..snapshot.records import PageHead
from ..snapshot.write import built_aside
from ..store.changes import applied, changes_index
from ..store.loaded import Store, load_store
from ..utils.files import link_or_copy

log = logging.getLogger("docsrv")

#: Where the indexes of kept changesets are, beside ``changesets/``.
INDEXES = "indexes"
#: Where the shards built for them are, by the sequence each was built for
#: (``<sequence>/shards/<key>/``): an index's shards are links to those and to its snapshot's.
BUILT_SHARDS = "index-shards"
#: What a changeset's index was built for, in its directory.
MARKER = "changeset-index.json"
#: The indexes kept: a worker applies every kept changeset it has not applied at once, with the
#: last one's index; the one before stays for a worker that read ``head.json`` just before the
#: pull listed another (one that finds its index gone says so and tries again at the next look).
KEEP_INDEXES = 2


def index_path(directory: Path, sequence: int) -> Path:
    return directory / INDEXES / str(sequence)


def changeset_index(directory: Path, entry: PublishedChangeset) -> Path | None:
    """The index the replica in ``directory`` holds of the state the changeset ``entry`` makes, if
    it holds one built for it (its product's name and sequence)."""
    path = index_path(directory, entry.sequence)
    try:
        marker = json.loads((path / MARKER).read_bytes())
    except (OSError, ValueError):
        return None
    return path if marker == {"product": entry.product, "sequence": entry.sequence} else None


def prune_indexes(directory: Path, kept: set[int]) -> None:
    """Remove the indexes of changesets no longer kept, and of those kept, all but the newest
    KEEP_INDEXES (a worker that opened one keeps its open files), then the shards built for
    changesets that no index left links to: a shard built again can be large, and a sidecar
    keeps up to ``kept.FOLD_CHANGESETS`` changesets."""
    root = directory / INDEXES
    if root.is_dir():
        held = sorted(int(path.name) for path in root.iterdir() if path.name.isdigit() and int(path.name) in kept)
        wanted = {str(sequence) for sequence in held[-KEEP_INDEXES:]}
        for path in root.iterdir():
            if path.name not in wanted:
                shutil.rmtree(path, ignore_errors=True)
    built = directory / BUILT_SHARDS
    if built.is_dir():
        used = shards_used(root, built)
        for path in built.iterdir():
            if path.name not in used:
                shutil.rmtree(path, ignore_errors=True)


def shards_used(indexes: Path, built: Path) -> set[str]:
    """The directories of ``built`` (shards built for changesets) that an index in ``indexes`` links to.
    Each shard of a changeset's index is one relative link to the directory its files are in
    (``search.rebuild.rebuild_index``): read in one system call, not resolved (a real path takes
    a dozen, for each of hundreds of shards at each changeset)."""
    home = os.path.join(os.path.realpath(built), "")
    used = set()
    for index in indexes.iterdir() if indexes.is_dir() else ():
        shards = os.path.realpath(index / SHARDS_DIRECTORY)
        try:
            links = list(os.scandir(shards))
        except OSError:
            continue
        for link in links:
            try:
                target = os.path.normpath(os.path.join(shards, os.readlink(link.path)))
            except OSError:  # a directory, not a link: of no changeset's shards
                continue
            if target.startswith(home):
                used.add(target[len(home):].split(os.sep, 1)[0])
    return used


@contextmanager
def held_index(index: Path | None) -> Iterator[Path | None]:
    """``index`` as it is now, in hard links beside it, for a fold that takes minutes while the
    pull goes on keeping changesets and removing their older indexes (``prune_indexes``); removed
    at the end."""
    if index is None:
        yield None
        return
    held = index.parent.parent / f".held-index-{index.name}-{os.getpid()}"
    shutil.rmtree(held, ignore_errors=True)
    try:
        for shard, directory in shard_directories(index).items():
            link_files(directory, shard_path(held, shard))
        link_or_copy(index / LISTING, held / LISTING)
        yield held
    finally:
        shutil.rmtree(held, ignore_errors=True)


class StateCache:
    """The store of the last state a pull indexed, kept for the next pull of a sidecar (loading
    the snapshot and applying the kept changesets again would cost most of the pull),
    and where the lines of its snapshot's pages file are. A sidecar loads both as soon as it
    holds a snapshot (``warm``), not when the first changeset of pages asks for them."""

    def __init__(self) -> None:
        self.store: Store | None = None
        #: Where the lines of the snapshot's pages file are, found at its first changeset of pages.
        self.places: PageLines | None = None
        #: Held while ``warm`` loads a store: ``state`` waits for it, rather than load another.
        self._loading = threading.Lock()
        #: The snapshot ``warm`` last loaded, or tried to.
        self._warmed: Path | None = None
        #: The snapshot whose own index was last found (``snapshot_index``), its fingerprint, and the index.
        self._indexed: tuple[Path, str, Path | None] | None = None

    def cold(self, snapshot: Path) -> bool:
        """Whether ``warm`` has something to do for ``snapshot``: the store kept is of another, or
        the lines of its pages file are not found yet; and it was not tried (a load that failed
        is not tried again)."""
        store = self.store
        return self._warmed != snapshot and (store is None or store.path != snapshot or self.places is None)

    def warm(self, snapshot: Path) -> None:
        """Load the store of ``snapshot``, unless the store kept is of it, and find the lines of
        its pages file and its own index (``snapshot_index``): seconds at the large scale, that the
        first changeset of pages after a sidecar's start (or a snapshot pulled whole, or a fold)
        otherwise waits for. The store kept before, of another snapshot, is let go first (two large
        stores at once would double the sidecar's memory)."""
        with self._loading:
            self._warmed = snapshot
            started = time.perf_counter()
            if self.store is None or self.store.path != snapshot:
                self.store = self.places = None
                self.store = load_store(snapshot, progress=False, page_text=False)
            self.places_of(self.store)
            self.snapshot_index(snapshot)
        log.info("loaded %s ahead of the next change of pages in %.1f s", snapshot.name, time.perf_counter() - started)

    def snapshot_index(self, snapshot: Path) -> Path | None:
        """The index of ``snapshot``'s own content in it, checked as a server opens it
        (``search.location.current_index``), found once while the snapshot is what it was (its
        fingerprint): opening every shard to check it was a large part of the first changeset of
        pages after a sidecar's start."""
        digest = fingerprint(snapshot)
        found = self._indexed
        if found is None or found[:2] != (snapshot, digest):
            found = self._indexed = (snapshot, digest, current_index(snapshot, digest, check=True, own=True))
        return found[2]

    def places_of(self, store: Store) -> PageLines | None:
        """The places of the lines of ``store``'s snapshot's pages file, found once for each snapshot."""
        if self.places is None or self.places.path.parent != store.path:
            self.places = PageLines.of(store)
        return self.places

    def rebase(self, snapshot: Path, base: tuple[str, int], folded: list[tuple[PublishedChangeset, Changeset]], product: Path) -> None:
        """The store kept, once the changesets ``folded`` after the snapshot ``snapshot`` (its name
        and sequence: ``base``) were folded into ``product``: caught up with the last of them, it
        is of ``product``'s state and reads its files from now on, so that the next change is
        applied to it, not to ``product`` loaded again (seconds at the large scale). The lines
        of the fold's pages file are found again when first needed."""
        store = self.state(snapshot, base, folded)
        if store is not None:
            store = copy.copy(store)
            store.path = product
        self.store, self.places = store, None

    def state(self, snapshot: Path, base: tuple[str, int], kept: list[tuple[PublishedChangeset, Changeset]]) -> Store | None:
        """The store of the snapshot ``snapshot`` (its name and sequence: ``base``) with the
        changesets ``kept`` applied: the one kept, caught up with those kept since it was; None
        when it is of none of those states. A store being loaded (``warm``) is waited for."""
        with self._loading:
            store = self.store
        if store is None or store.path != snapshot:
            return None
        if (store.name, store.manifest.sequence) not in [base, *((entry.product, entry.sequence) for entry, _changeset in kept)]:
            return None
        after = [changeset for entry, changeset in kept if entry.sequence > store.manifest.sequence]
        if not after:
            return store
        done = applied(store, composed(after), indexed=True)
        return done.store if done is not None else None


def index_changesets(directory: Path, snapshot: Path, kept: list[tuple[PublishedChangeset, Changeset]],
                     new: list[tuple[PublishedChangeset, Changeset]], cache: StateCache | None = None) -> bool:
    """Build in ``directory`` the index of the state that the last changeset of ``new`` that
    changes the index (``store.changes.changes_index``) makes, following the snapshot ``snapshot``
    and the changesets ``kept`` after it; False, with what was built left in place for nothing,
    when they are not applied in memory after all or the index needs every shard built (the
    operators its pages name changed): the pull then folds them.

    The index builds again the shards of the pages that every changeset since the index before
    changed, those whose header did not say so included: a server applies those with this index.
    Those of ``new`` before the last have none of their own: a server that has not applied them
    applies them all at once with the last one's, and a sidecar that falls behind (a shard's build
    takes longer than changesets take to come) catches up with one build, not one for each."""
    chain = [*kept, *new]
    first = chain[0]
    indexing = [at for at, (_entry, changeset) in enumerate(new) if changes_index(changeset)]
    if not indexing:
        return True
    indexed = [at for at, (_entry, changeset) in enumerate(kept) if changes_index(changeset)]
    reflected = kept[: indexed[-1] + 1] if indexed else []  # what the index before holds
    store = cache.state(snapshot, (first[1].header.follows, first[0].sequence - 1), reflected) if cache is not None else None
    if store is None:
        store = load_store(snapshot, progress=False, page_text=False)
        if reflected:
            done = applied(store, composed([changeset for _entry, changeset in reflected]), indexed=True)
            if done is None:
                return False
            store = done.store
    if reflected:
        earlier = changeset_index(directory, reflected[-1][0])
    elif cache is not None:
        earlier = cache.snapshot_index(snapshot)
    else:
        earlier = current_index(snapshot, fingerprint(snapshot), check=True, own=True)
    if earlier is None:
        return False
    upto = len(kept) + indexing[-1] + 1
    done = applied(store, composed([changeset for _entry, changeset in chain[len(reflected):upto]]), indexed=True)
    if done is None:
        return False
    entry = chain[upto - 1][0]
    started = time.perf_counter()
    plan = plan_changed_shards(done.store, page_changes(chain[:upto]), versions_touched(done.pages), earlier,
                               cache.places_of(done.store) if cache is not None else None)
    if plan is None:
        return False
    target = index_path(directory, entry.sequence)
    built = directory / BUILT_SHARDS / str(entry.sequence)
    shutil.rmtree(built, ignore_errors=True)  # left by a pull killed while it built them: no index listed links there
    try:
        with built_aside(target, replace=True) as partial:
            rebuild_index(done.store, plan, partial, built_in=built)
            (partial / MARKER).write_text(json.dumps({"product": entry.product, "sequence": entry.sequence}))
    except BaseException:
        shutil.rmtree(built, ignore_errors=True)
        raise
    log.info("changeset %d: built %d of the %d shards of the search index again in %.1f s", entry.sequence, len(plan.changed),
             len(plan.digests), time.perf_counter() - started)
    if cache is not None:
        cache.store = done.store
    return True


def versions_touched(pages: list[tuple[PageHead | None, PageHead | None]]) -> set[int]:
    """The versions of the served pages that changed (before, after)."""
    return {page.version for pair in pages for page in pair if page is not None}


def page_changes(chain: list[tuple[PublishedChangeset, Changeset]]) -> dict[int, tuple[str, bytes] | None]:
    """The pages ``chain`` changes, as ``composed`` composes them (its order is that of the new
    pages a fold writes): by id, the file its last line is in and the line, or None for one deleted."""
    together = composed([changeset for _entry, changeset in chain])
    where = {identity: changeset_path(entry.sequence) for entry, changeset in chain for identity in changeset.upserts["pages"]}
    return dict.fromkeys(together.deletes["pages"]) | {i: (where[i], line) for i, line in together.upserts["pages"].items()}

