"""The changesets a replica keeps after the snapshot ``current`` names, and their fold.

A pull keeps the changesets a server applies in memory after ``current``, listed in the
replica's own ``head.json`` (``serve/following.py`` reads it), with the search index of each state
whose pages changed (``replica/changeset_index.py``). Those it cannot keep, or past ``fold_at``, are
folded: applied to the snapshot, built aside, checked and indexed as a server would load it
(``indexing.py``), and ``current`` pointed at the product."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from ..errors import PullError
from ..snapshot.changeset import Changeset, apply, composed, product_manifest, read_listed
from ..snapshot.errors import SnapshotError
from ..snapshot.load import manifest_of
from ..snapshot.origin import CHANGESETS, HEAD, Head, PublishedChangeset, changeset_path, decode_head
from ..snapshot.origin import FORMAT as ORIGIN_FORMAT
from ..snapshot.origin import FORMAT_VERSION as ORIGIN_FORMAT_VERSION
from ..snapshot.records import Manifest
from ..snapshot.references import Change, References
from ..snapshot.write import PARTIAL, put_in_place
from ..store.changes import changes_index, in_memory
from ..utils.files import replace_file
from .changeset_index import BUILT_SHARDS, INDEXES, StateCache, changeset_index, held_index, index_changesets, prune_indexes
from .indexing import check_and_index, reuse_index

log = logging.getLogger("docsrv")

CURRENT = "current"
#: What a replica keeps beside its snapshots, by name: a snapshot of one of these names (its
#: directory there) would stand on it.
RESERVED = {
    CURRENT: "the link a pull points at the snapshot it serves",
    HEAD: "the list of the changesets a replica keeps",
    CHANGESETS: "the directory of the changesets a replica keeps",
    INDEXES: "the directory of the kept changesets' search indexes",
    BUILT_SHARDS: "the directory of the shards built for them",
}
#: The most changesets kept after the snapshot served: past it, they are folded into the snapshot
#: they make, and the server reloads onto it (its workers share its pages again).
FOLD_CHANGESETS = 200


def reserved(name: str) -> str | None:
    """Why no snapshot may be named ``name``, in words, or None: a replica keeps ``RESERVED`` and
    what it writes aside beside its snapshots, each of which it keeps in a directory of its name."""
    if name in RESERVED:
        return f"the snapshot is named {name!r}, the name of {RESERVED[name]}; publish it under another name"
    if name.endswith(PARTIAL):
        return f"the snapshot is named {name!r}, ending as what a replica writes aside does; publish it under another name"
    return None


def held_state(into: Path, current: str | None) -> tuple[str, int] | None:
    """The state this replica holds: (name, sequence) of the last changeset kept after the
    snapshot ``current`` names, or of that snapshot; None without one."""
    if current is None:
        return None
    kept = kept_chain(into, current)
    if kept is not None:
        return kept.name, kept.sequence
    held = read_held(into / current)
    return (held.name, held.sequence) if held is not None else None


def kept_chain(into: Path, current: str) -> Head | None:
    """The changesets kept after the snapshot ``current`` names (``into/head.json``), if that is
    what they follow."""
    try:
        chain = decode_head((into / HEAD).read_bytes())
    except (OSError, ValueError):
        return None
    return chain if chain.base == current else None


def write_chain(into: Path, name: str, sequence: int, changesets: list[PublishedChangeset]) -> None:
    """``into/head.json``: the changesets kept after the snapshot ``name`` (``serve/following.py`` reads
    it), written in one rename once each file it lists is in place; then the files of changesets
    it no longer lists are removed."""
    chain = Head(format=ORIGIN_FORMAT, format_version=ORIGIN_FORMAT_VERSION, base=name, base_sequence=sequence,
                 changesets=changesets, published_at=datetime.now(UTC))
    replace_file(into / HEAD, msgspec.json.encode(chain))
    listed = {f"{entry.sequence}.jsonl" for entry in changesets}
    if (into / CHANGESETS).is_dir():
        for path in (into / CHANGESETS).iterdir():
            if path.name not in listed:
                path.unlink(missing_ok=True)
    prune_indexes(into, {entry.sequence for entry in changesets})


def take_changesets(fetched: list[tuple[PublishedChangeset, Path]], into: Path, build_index: bool, fold_at: int | None) -> None:
    """Keep the changesets ``fetched`` after those kept, when a server applies every one in memory
    and no more than ``fold_at`` would be kept; else fold them all into the snapshot they make.
    Each is checked first: by its product's name (``reserved``) and against the state it follows
    (``HELD_REFERENCES``); the first that fails is refused, those before it are taken."""
    current = current_name(into)
    assert current is not None
    kept = kept_chain(into, current)
    held = read_held(into / current)
    if held is None:
        raise PullError(f"{into / current}: the snapshot current names has no manifest that reads")
    chain = kept.changesets if kept is not None else []
    changesets = [read_checked(path, entry) for entry, path in fetched]
    misnamed = next(((at, f"{path.name} (changeset {entry.sequence}): {problem}")
                     for at, ((entry, path), changeset) in enumerate(zip(fetched, changesets, strict=True))
                     if (problem := reserved(changeset.header.product.name)) is not None), None)
    upto = misnamed[0] if misnamed is not None else len(fetched)
    checked = HELD_REFERENCES.check(into, current, held.sequence, chain, fetched[:upto], changesets[:upto])
    refused = checked.refused or misnamed
    if refused is not None:
        at, problem = refused
        if at:
            keep_or_fold(into, current, held, chain, fetched[:at], changesets[:at], checked.false_claims, build_index, fold_at)
        raise PullError(problem)
    keep_or_fold(into, current, held, chain, fetched, changesets, checked.false_claims, build_index, fold_at)


def keep_or_fold(into: Path, current: str, held: Manifest, chain: list[PublishedChangeset], fetched: list[tuple[PublishedChangeset, Path]],
                 changesets: list[Changeset], false_claims: dict[int, str], build_index: bool, fold_at: int | None) -> None:
    """``take_changesets`` of changesets checked. Those before the first that changes the search
    index are kept first when they apply in memory: a server serves them while that one's index
    is built. Any whose header claims what is false (``false_claims``, by position) is folded at
    once, with those before and after it: no server applies it."""
    for at, claim in false_claims.items():
        log.warning("%s (changeset %d): its header's claim is false (%s): folded into the snapshot it makes, not kept",
                    fetched[at][1].name, fetched[at][0].sequence, claim)
    if false_claims:
        fold_at = 0
    ahead = next((at for at, changeset in enumerate(changesets) if changes_index(changeset)), 0)
    if ahead and (fold_at is None or len(chain) + ahead <= fold_at) and all(in_memory(c, held.public_url) for c in changesets[:ahead]):
        chain = keep_changesets(into, current, held.sequence, chain, fetched[:ahead])
        fetched, changesets = fetched[ahead:], changesets[ahead:]
    if (fold_at is None or len(chain) + len(fetched) <= fold_at) and all(in_memory(c, held.public_url, indexed=build_index)
                                                                          for c in changesets) \
            and indexes_built(into, current, chain, [(entry, c) for (entry, _path), c in zip(fetched, changesets, strict=True)]):
        keep_changesets(into, current, held.sequence, chain, fetched)
        shutil.rmtree(into / ".pull-changesets", ignore_errors=True)
        return
    product = apply_changesets([*kept_changesets(into, chain), *changesets], into, current, build_index, latest_index(into, chain))
    point_current(into, product.name)
    write_chain(into, product.name, product.sequence, [])
    HELD_REFERENCES.moved(into / product.name, product.sequence)


@dataclass
class Checked:
    """Changesets checked against the state they follow: (position, why in one line) of the first
    that does not follow it, if any, and, by position, why the header of those before it that
    claim what is false (``snapshot.references.References.false_claim``) does."""

    refused: tuple[int, str] | None = None
    false_claims: dict[int, str] = field(default_factory=dict)


class HeldReferences:
    """The references (``snapshot/references.py``) of the state a replica holds, by which each
    changeset is checked before it is kept, as a load checks a snapshot: a server applies a kept
    changeset without a check. Built from the snapshot ``current`` names and the changesets kept
    after it, then moved on with each changeset checked: a sidecar builds them once a snapshot."""

    def __init__(self) -> None:
        #: The snapshot's directory, every link resolved, and the sequence of the state held.
        self.state: tuple[Path, int] | None = None
        self.references: References | None = None
        #: Held while they are built: a pull's check waits for a build under way (``warm``).
        self._building = threading.Lock()
        #: The snapshot ``warm`` last built them for, or tried to.
        self._warmed: Path | None = None

    def cold(self, snapshot: Path) -> bool:
        """Whether ``warm`` has something to do for the snapshot ``snapshot``: the references are of
        another, and it was not tried (a build that failed is not tried again)."""
        resolved = snapshot.resolve()
        return self._warmed != resolved and (self.state is None or self.state[0] != resolved)

    def warm(self, into: Path) -> None:
        """Build the references of the state the replica ``into`` holds, ahead of its next
        changeset (seconds at the medium scale, which the first changeset after a snapshot pulled
        whole or a fold otherwise waits for)."""
        current = current_name(into)
        held = read_held(into / current) if current is not None else None
        if current is None or held is None:
            return
        self._warmed = (into / current).resolve()
        started = time.perf_counter()
        kept = kept_chain(into, current)
        with self._building:
            self._held(into, current, held.sequence, kept.changesets if kept is not None else [])
        log.info("built the references of %s ahead of the next changeset in %.1f s", current, time.perf_counter() - started)

    def _held(self, into: Path, current: str, sequence: int, chain: list[PublishedChangeset]) -> References:
        """The references of the state held: the snapshot ``current`` at ``sequence`` and ``chain`` kept after it."""
        state = ((into / current).resolve(), chain[-1].sequence if chain else sequence)
        if self.references is None or self.state != state:
            self.references, self.state = None, None
            references = References.of(state[0])
            for changeset in kept_changesets(into, chain):
                references.apply(Change.of(changeset))
            self.references, self.state = references, state
        return self.references

    def check(self, into: Path, current: str, sequence: int, chain: list[PublishedChangeset],
              fetched: list[tuple[PublishedChangeset, Path]], changesets: list[Changeset]) -> Checked:
        """``changesets`` checked against the state held (the snapshot ``current`` at ``sequence``,
        and ``chain`` kept after it) and those before each: the first that does not follow it, and
        those whose header claims what is false. The references move on to the last that follows."""
        with self._building:
            return self._checked(into, current, sequence, chain, fetched, changesets)

    def _checked(self, into: Path, current: str, sequence: int, chain: list[PublishedChangeset],
                 fetched: list[tuple[PublishedChangeset, Path]], changesets: list[Changeset]) -> Checked:
        state = ((into / current).resolve(), chain[-1].sequence if chain else sequence)
        try:
            references = self._held(into, current, sequence, chain)
            checked = Checked()
            for at, ((entry, path), changeset) in enumerate(zip(fetched, changesets, strict=True)):
                change = Change.of(changeset)
                found = references.problems(change)
                if found:  # the references stay at the one before it, which the caller keeps
                    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
                    checked.refused = at, (f"{path.name} (changeset {entry.sequence}) does not follow the state it applies to: "
                                           f"{found[0]}{more}")
                    return checked
                if (claim := references.false_claim(change)) is not None:
                    checked.false_claims[at] = claim
                references.apply(change)
                self.state = (state[0], entry.sequence)
        except SnapshotError as error:  # a file of the snapshot held that no longer reads
            self.references = self.state = None
            raise PullError(error.summary()) from None
        except BaseException:
            self.references = self.state = None
            raise
        return checked

    def moved(self, snapshot: Path, sequence: int) -> None:
        """The state held is now the snapshot ``snapshot`` at ``sequence`` (a fold's product, of
        the state the references were moved on to)."""
        if self.state is not None:
            self.state = (snapshot.resolve(), sequence)


#: The references of the state a sidecar's last pull held.
HELD_REFERENCES = HeldReferences()


def keep_changesets(into: Path, current: str, sequence: int, chain: list[PublishedChangeset],
                    fetched: list[tuple[PublishedChangeset, Path]]) -> list[PublishedChangeset]:
    """Keep the changesets ``fetched`` after ``chain``, those kept after the snapshot ``current``
    (at ``sequence``): their files in place, then ``head.json``. Returns the chain kept now."""
    (into / CHANGESETS).mkdir(exist_ok=True)
    for entry, path in fetched:
        os.replace(path, into / changeset_path(entry.sequence))
    chain = [*chain, *(entry for entry, _path in fetched)]
    write_chain(into, current, sequence, chain)
    return chain


#: The state a sidecar's last pull indexed: the next one applies its changesets to it (``replica/changeset_index.py``).
INDEXED_STATE = StateCache()


def indexes_built(into: Path, current: str, chain: list[PublishedChangeset], new: list[tuple[PublishedChangeset, Changeset]]) -> bool:
    """Whether the changesets ``new``, to be kept after ``chain``, do not change the search index
    (``store.changes.changes_index``), or their indexes were built (``replica.changeset_index.index_changesets``);
    False when they are to be folded."""
    if not any(changes_index(changeset) for _entry, changeset in new):
        return True
    kept = list(zip(chain, kept_changesets(into, chain), strict=True))
    try:
        return index_changesets(into, into / current, kept, new, INDEXED_STATE)
    except SnapshotError as error:  # a changed shard's page that does not decode as one, named by its file and line
        raise PullError(error.summary()) from None


def latest_index(into: Path, chain: list[PublishedChangeset]) -> Path | None:
    """The index of the last state of ``chain`` whose search index changed, if the pull built one."""
    return next((found for entry in reversed(chain) if (found := changeset_index(into, entry)) is not None), None)


@dataclass(frozen=True)
class Folded:
    """Kept changesets folded aside: the snapshot they followed, and the last one, whose product was made."""

    source: str
    last: PublishedChangeset
    #: How long the fold took.
    seconds: float = 0.0


def fold_kept(into: Path) -> Folded | None:
    """Fold the changesets kept after ``current`` into the snapshot they make, put in place beside
    it; ``current`` and ``head.json`` are left alone (``finish_fold``). None when none are kept."""
    started = time.perf_counter()
    current = current_name(into)
    kept = kept_chain(into, current) if current is not None else None
    if current is None or kept is None or not kept.changesets:
        return None
    with held_index(latest_index(into, kept.changesets)) as earlier:
        apply_changesets(kept_changesets(into, kept.changesets), into, current, True, earlier)
    return Folded(current, kept.changesets[-1], time.perf_counter() - started)


def finish_fold(into: Path, folded: Folded) -> bool:
    """Point ``current`` at a fold's product, keeping the changesets that came after it; False
    (and the product removed) when ``current`` moved meanwhile (another fold came first)."""
    kept = kept_chain(into, folded.source)
    if current_name(into) != folded.source or kept is None:
        shutil.rmtree(into / folded.last.product, ignore_errors=True)
        return False
    applied_in_fold = [entry for entry in kept.changesets if entry.sequence <= folded.last.sequence]
    try:
        INDEXED_STATE.rebase(into / folded.source, (kept.base, kept.base_sequence),
                             list(zip(applied_in_fold, kept_changesets(into, applied_in_fold), strict=True)), into / folded.last.product)
    except PullError:  # a kept changeset damaged since the fold read it: the next change of pages loads the fold's snapshot
        INDEXED_STATE.store = None
    if HELD_REFERENCES.state == ((into / folded.source).resolve(), kept.changesets[-1].sequence):
        HELD_REFERENCES.moved(into / folded.last.product, kept.changesets[-1].sequence)  # the same state, on the fold's snapshot
    point_current(into, folded.last.product)
    write_chain(into, folded.last.product, folded.last.sequence, [e for e in kept.changesets if e.sequence > folded.last.sequence])
    return True


def read_checked(path: Path, entry: PublishedChangeset) -> Changeset:
    """A changeset fetched or kept, checked against what ``head.json`` records of it."""
    try:
        return read_listed(path.read_bytes(), entry, changeset_path(entry.sequence))
    except SnapshotError as error:
        raise PullError(error.summary()) from None


def kept_changesets(into: Path, chain: list[PublishedChangeset]) -> list[Changeset]:
    return [read_checked(into / changeset_path(entry.sequence), entry) for entry in chain]


def apply_changesets(changesets: list[Changeset], into: Path, current: str, build_index: bool, earlier: Path | None = None) -> Manifest:
    """Apply the changesets, composed into one (each record file is written once), to the
    snapshot ``into/current`` names; the product is built aside, checked and indexed as a server
    would load it (from ``earlier``, the index of a kept changeset's state, when there is one),
    and put in place. Returns its manifest."""
    product = product_manifest(changesets[-1])
    partial = into / f".apply-{product.name}-{product.sequence}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        try:
            apply(composed(changesets), into / current, partial)
        except SnapshotError as error:
            raise PullError(error.summary()) from None
        if build_index:
            reuse_index(into / current, partial)
        check_and_index(partial, product.name, build_index, into / current, earlier)
        put_in_place(partial, into / product.name)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(into / ".pull-changesets", ignore_errors=True)
    return product


def read_held(snapshot: Path) -> Manifest | None:
    """The manifest of a snapshot this replica holds, if it reads as one."""
    try:
        return manifest_of(snapshot)
    except (OSError, msgspec.DecodeError):
        return None


def current_name(into: Path) -> str | None:
    link = into / CURRENT
    return os.readlink(link) if link.is_symlink() else None


def point_current(into: Path, name: str) -> None:
    """``into/current`` -> ``name``, swapped in one rename (a reader sees the old link or the new)."""
    fresh = into / f".{CURRENT}.{os.getpid()}"
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(name)
    os.replace(fresh, into / CURRENT)

