"""``docsrv snapshot pull``: a published snapshot from an origin (any static HTTP(S) server, a CDN,
an object store), checked and indexed as a server would, then made current; or, from an origin
that ``docsrv snapshot publish`` wrote, the changesets after the state this replica holds
(``kept.py``).

``URL/manifest.json`` names every file of the snapshot with its size and SHA-256; each file
lies beside it. A pull fetches the manifest (conditionally: an unchanged snapshot costs one
small request), then every file it lists, in parallel, streamed to disk without blocking the
event loop, into ``DIR/.pull-<name>-<digest>/``; an interrupted pull resumes there (files
already whole are kept; a partial one continues with a Range request where the origin allows).
Each file's size and digest are checked as it arrives. A snapshot whose publisher built its
search index (``docsrv index``) lists the index's files too, and they come with it. Then the
snapshot is loaded and checked as a server would, its search index built if it came without one
made from these records (an older snapshot), and only then is it renamed to ``DIR/<name>`` and
``DIR/current`` pointed at it, with the atomic rename of a new symlink: a server watching
``DIR/current`` reloads. Any failure leaves ``current`` where it was. The last ``keep``
snapshots stay; older ones that ``current`` does not name are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import aiofiles
import aiohttp
import msgspec

from ..config import Deadlines
from ..errors import PullError
from ..snapshot.origin import HEAD, SNAPSHOTS, Head, PublishedChangeset, changeset_path
from ..snapshot.records import INDEX, FileDigest, Manifest
from ..snapshot.write import put_in_place
from ..utils.files import replace_file
from ..utils.progress import progress_bar, wanted
from .fetch import PullState, decode_manifest, fetch_all, fetch_file, get_small, head_of
from .indexing import check_and_index
from .kept import CURRENT, FOLD_CHANGESETS, current_name, held_state, point_current, reserved, take_changesets, write_chain

log = logging.getLogger("docsrv")

STATE_FILE = ".pull-state.json"
#: Files fetched at once.
PARALLEL = 4
DEFAULT_DEADLINES = Deadlines()


@dataclass
class Pulled:
    name: str
    #: False when the origin's snapshot is the one ``current`` already names.
    changed: bool
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    #: How many changesets were applied (``follow``).
    changesets: int = 0

    def where(self, into: Path) -> str:
        """Where the pulled state is: ``current`` names it, or keeps it in changesets after the snapshot it names."""
        current = current_name(into)
        if current == self.name:
            return f"{into / CURRENT} -> {self.name}"
        return f"kept after {into / CURRENT} -> {current} as changesets, which a server with --watch applies in memory"


async def pull(
    url: str, into: Path, *, keep: int = 2, progress: bool | None = None, build_index: bool = True,
    deadlines: Deadlines = DEFAULT_DEADLINES, fold_at: int | None = FOLD_CHANGESETS,
) -> Pulled:
    """Pull the snapshot published at ``url`` into ``into`` and point ``into/current`` at it.
    Changesets a server applies in memory (``store.changes.in_memory``) are kept after it
    instead, up to ``fold_at`` (None: any number, which a sidecar folds in the background:
    ``pull_every``).

    Every failure of the origin (refused, reset, redirected in a loop or off http(s), too slow)
    is a PullError of one line."""
    if not url.startswith(("http://", "https://")):
        raise PullError(f"{url}: not an http:// or https:// URL")
    started = time.perf_counter()
    base = url.rstrip("/")
    made = not into.exists()
    into.mkdir(parents=True, exist_ok=True)
    try:
        return await pull_into(base, into, keep=keep, progress=progress, build_index=build_index, deadlines=deadlines, started=started,
                               fold_at=fold_at)
    except BaseException:
        if made:  # a first pull that failed before anything was kept leaves no empty directory
            with contextlib.suppress(OSError):
                into.rmdir()
        raise


async def pull_into(
    base: str, into: Path, *, keep: int, progress: bool | None, build_index: bool, deadlines: Deadlines, started: float,
    fold_at: int | None = None,
) -> Pulled:
    state = read_state(into)
    current = current_name(into)
    timeout = aiohttp.ClientTimeout(total=None, connect=deadlines.connect_seconds)
    async with aiohttp.ClientSession(timeout=timeout, raise_for_status=False, max_field_size=8190) as session:
        headers = {}
        if state.name is not None and state.name == current:
            if state.etag:
                headers["If-None-Match"] = state.etag
            if state.last_modified:
                headers["If-Modified-Since"] = state.last_modified
        # An origin that ``docsrv snapshot publish`` wrote has a head; a snapshot published by
        # hand (its files at URL) has none, and is pulled whole as before.
        status, raw, validators = await get_small(session, f"{base}/{HEAD}", headers, deadlines, absent_ok=True)
        if status == 304:
            return Pulled(current or "", changed=False, seconds=time.perf_counter() - started)
        if status == 200:
            return await follow(session, base, head_of(raw, base), into, validators, current=current, keep=keep,
                                progress=progress, build_index=build_index, deadlines=deadlines, started=started, fold_at=fold_at)
        status, raw, validators = await get_small(session, f"{base}/manifest.json", headers, deadlines)
        if status == 304:
            return Pulled(current or "", changed=False, seconds=time.perf_counter() - started)
        manifest = decode_manifest(raw, base)
        validators.name = manifest.name
        target = into / manifest.name
        if current == manifest.name and (target / "manifest.json").is_file() and (target / "manifest.json").read_bytes() == raw:
            write_state(into, validators)
            return Pulled(manifest.name, changed=False, seconds=time.perf_counter() - started)
        files, total = await fetch_snapshot(session, base, manifest, raw, into, progress=progress, build_index=build_index,
                                            deadlines=deadlines)
    point_current(into, manifest.name)
    write_state(into, validators)
    prune(into, keep)
    return Pulled(manifest.name, changed=True, files=files, bytes=total, seconds=time.perf_counter() - started)


async def fetch_snapshot(
    session: aiohttp.ClientSession, base: str, manifest: Manifest, raw: bytes, into: Path, *, progress: bool | None,
    build_index: bool, deadlines: Deadlines,
) -> tuple[int, int]:
    """Fetch every file of the snapshot at ``base`` into ``into/<name>``, checked and indexed as a
    server would load it (``current`` is not moved): (files, bytes)."""
    if (problem := reserved(manifest.name)) is not None:
        raise PullError(f"{base}/manifest.json: {problem}")
    held = into / manifest.name / "manifest.json"
    if held.is_file() and held.read_bytes() == raw:  # this very snapshot, put in place whole after its checks
        return 0, 0
    partial = into / f".pull-{manifest.name}-{hashlib.sha256(raw).hexdigest()[:12]}"
    partial.mkdir(exist_ok=True)
    # The records, and the search index when the publisher built and sealed one (``docsrv index``).
    wanted_files = {**manifest.files, **{f"{INDEX}/{name}": entry for name, entry in manifest.index.items()}}
    for name in manifest.index:
        (partial / INDEX / name).parent.mkdir(parents=True, exist_ok=True)
    total = sum(entry.size for entry in wanted_files.values())
    show = wanted() if progress is None else progress
    with progress_bar(total, f"pull {manifest.name}", show) as bar:
        limit = asyncio.Semaphore(PARALLEL)

        async def one(name: str, entry: FileDigest) -> None:
            async with limit:
                await fetch_file(session, f"{base}/{name}", partial / name, entry, bar, deadlines)

        await fetch_all(one(name, entry) for name, entry in wanted_files.items())
    async with aiofiles.open(partial / "manifest.json", "wb") as out:  # last: it seals the snapshot
        await out.write(raw)
    # The index of the snapshot served now, if any, spares building again the shards alike in both.
    await asyncio.to_thread(check_and_index, partial, manifest.name, build_index, into / CURRENT)
    put_in_place(partial, into / manifest.name)
    return len(wanted_files), total


async def follow(
    session: aiohttp.ClientSession, base: str, head: Head, into: Path, validators: PullState, *, current: str | None,
    keep: int, progress: bool | None, build_index: bool, deadlines: Deadlines, started: float, fold_at: int | None = None,
) -> Pulled:
    """Follow an origin's chain: from the state this replica holds when it is on the chain (the
    snapshot ``current`` names and the changesets kept after it), else from the base (pulled
    whole), fetch the changesets it lacks and check each. Those a server applies in memory are
    kept after ``current``; otherwise, or past ``fold_at`` kept, they are folded into the
    snapshot they make, which ``current`` then names (``take_changesets``)."""
    validators.name, validators.history = head.name, head.history
    held = held_state(into, current)
    if held is not None and held[0] == head.name and held[1] == head.sequence:
        write_state(into, validators)
        return Pulled(head.name, changed=False, seconds=time.perf_counter() - started)
    position = head.position(*held) if held is not None else None
    if held is not None and position is None:
        going_back(base, head, held, read_state(into).history)
    files = total = 0
    if position is not None and position < len(head.leading) and len(head.chain) - position > FOLD_CHANGESETS:
        log.info("%s/%s: %d changesets behind, before the base %s: taking the base whole", base, HEAD, len(head.chain) - position,
                 head.base)
        position = None  # the fold of that many would replace the state served all the same
    if position is None:  # too far behind, on another base, or new: from the base, whole
        where = f"{base}/{SNAPSHOTS}/{head.base}"
        _status, raw, _unused = await get_small(session, f"{where}/manifest.json", {}, deadlines)
        manifest = decode_manifest(raw, where)
        if manifest.name != head.base:
            raise PullError(f"{where}/manifest.json: names snapshot {manifest.name}, not the base {head.base} that {HEAD} names")
        files, total = await fetch_snapshot(session, where, manifest, raw, into, progress=progress, build_index=build_index,
                                            deadlines=deadlines)
        point_current(into, head.base)
        write_chain(into, head.base, head.base_sequence, [])
        position = len(head.leading)
    wanted_changesets = head.chain[position:]
    if wanted_changesets:
        fetched = await fetch_changesets(session, base, wanted_changesets, into, deadlines)
        await asyncio.to_thread(take_changesets, fetched, into, build_index, fold_at)
        files += len(fetched)
        total += sum(entry.size for entry in wanted_changesets)
    write_state(into, validators)
    prune(into, keep)
    return Pulled(head.name, changed=True, files=files, bytes=total, seconds=time.perf_counter() - started,
                  changesets=len(wanted_changesets))


def going_back(base: str, head: Head, held: tuple[str, int], followed: str) -> None:
    """Say when ``head``, which does not lead on from the state ``held`` (name, sequence), would
    take the replica back in time: PullError, and the replica keeps what it serves, when it is
    of the history followed (``followed``) and behind it, or rewrites it (another state at a
    sequence the replica has passed); a warning naming both when it is of another history (the
    origin was published anew), which is then followed."""
    name, sequence = held
    if head.history and followed and head.history != followed:
        log.warning("%s/%s: the origin publishes history %s, not %s that this replica followed to %s at sequence %d: "
                    "following it from %s at sequence %d", base, HEAD, head.history, followed, name, sequence, head.name, head.sequence)
        return
    if head.sequence < sequence:
        raise PullError(f"{base}/{HEAD}: at sequence {head.sequence} ({head.name}), behind the sequence {sequence} ({name}) this "
                        "replica serves (a stale head, an edge cache's old copy?); keeping what it serves")
    if head.base_sequence <= sequence:
        raise PullError(f"{base}/{HEAD}: names {head.base} at sequence {head.base_sequence}, whose changesets do not reach {name} "
                        f"at sequence {sequence}, which this replica serves (the origin's history was rewritten); keeping what it "
                        "serves")


async def fetch_changesets(
    session: aiohttp.ClientSession, base: str, wanted_changesets: list[PublishedChangeset], into: Path, deadlines: Deadlines
) -> list[tuple[PublishedChangeset, Path]]:
    """Fetch each changeset into ``into/.pull-changesets/``, its size and digest checked as it
    arrives, ``PARALLEL`` at a time (a replica far behind fetches hundreds); in order."""
    directory = into / ".pull-changesets"
    directory.mkdir(exist_ok=True)
    fetched = [(entry, directory / f"{entry.sequence}.jsonl") for entry in wanted_changesets]
    limit = asyncio.Semaphore(PARALLEL)

    async def one(entry: PublishedChangeset, path: Path) -> None:
        async with limit:
            await fetch_file(session, f"{base}/{changeset_path(entry.sequence)}", path,
                             FileDigest(size=entry.size, sha256=entry.sha256), None, deadlines, sealed_by=HEAD)

    await fetch_all(one(entry, path) for entry, path in fetched)
    return fetched


def prune(into: Path, keep: int) -> list[str]:
    """Remove pulled snapshots beyond the newest ``keep``, never the one ``current`` names."""
    current = current_name(into)
    snapshots = [p for p in into.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")
                 and (p / "manifest.json").is_file()]
    snapshots.sort(key=lambda p: (p / "manifest.json").stat().st_mtime, reverse=True)
    removed = []
    for old in snapshots[max(keep, 1):]:
        if old.name != current:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old.name)
    return removed


def read_state(into: Path) -> PullState:
    try:
        return msgspec.json.decode((into / STATE_FILE).read_bytes(), type=PullState)
    except (OSError, msgspec.DecodeError):
        return PullState()


def write_state(into: Path, state: PullState) -> None:
    replace_file(into / STATE_FILE, msgspec.json.encode(state))

