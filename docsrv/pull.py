"""``docsrv snapshot pull``: a published snapshot from an origin (any static HTTP(S) server, a CDN,
an object store), checked and indexed as a server would, then made current. It sits above
``serving``, whose load and index build it runs before it points ``current`` at a snapshot.

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
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiofiles
import aiohttp
import msgspec
from tqdm import tqdm

from .changeset_index import StateCache, changeset_index, held_index, index_changesets, prune_indexes
from .config import Deadlines
from .search import index_problem
from .serving import (
    FINGERPRINT_FILE,
    INDEX,
    build_index_aside,
    current_index,
    fingerprint,
    index_directories,
    indexed_alike,
    rebuild_index_aside,
)
from .snapshot.changeset import Changeset, apply, composed, product_manifest, read_listed
from .snapshot.errors import SnapshotError
from .snapshot.load import manifest_of
from .snapshot.origin import CHANGESETS, HEAD, SNAPSHOTS, Head, PublishedChangeset, changeset_path, decode_head
from .snapshot.origin import FORMAT as ORIGIN_FORMAT
from .snapshot.origin import FORMAT_VERSION as ORIGIN_FORMAT_VERSION
from .snapshot.records import FileDigest, Manifest
from .snapshot.write import put_in_place
from .store import load_store, prepare
from .store_changes import changes_index, in_memory
from .utils import held_calls
from .utils.files import link_or_copy, replace_file
from .utils.progress import progress_bar, wanted

log = logging.getLogger("docsrv")

CURRENT = "current"
STATE_FILE = ".pull-state.json"
#: Files fetched at once, the size of a read, and the longest a manifest may be.
PARALLEL = 4
CHUNK = 256 << 10
MAX_MANIFEST_BYTES = 4 << 20
#: Redirects followed from one URL (each to http or https only).
MAX_REDIRECTS = 5
DEFAULT_DEADLINES = Deadlines()
#: The most changesets kept after the snapshot served: past it, they are folded into the snapshot
#: they make, and the server reloads onto it (its workers share its pages again).
FOLD_CHANGESETS = 200
#: Pauses between failed pulls with --every: doubling from the first to the last.
RETRY_SECONDS = (5.0, 300.0)
#: What an origin's failure raises (aiohttp's errors; a URL it cannot take is also a ValueError).
NETWORK_ERRORS = (aiohttp.ClientError, TimeoutError, ValueError)


class PullError(Exception):
    """A pull that failed; the message says what, in one line."""


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


class PullState(msgspec.Struct):
    """What the last pull saw of the manifest, for a conditional request."""

    etag: str | None = None
    last_modified: str | None = None
    name: str | None = None


async def pull(
    url: str, into: Path, *, keep: int = 2, progress: bool | None = None, build_index: bool = True,
    deadlines: Deadlines = DEFAULT_DEADLINES, fold_at: int | None = FOLD_CHANGESETS,
) -> Pulled:
    """Pull the snapshot published at ``url`` into ``into`` and point ``into/current`` at it.
    Changesets a server applies in memory (``store_changes.in_memory``) are kept after it
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


async def get_small(
    session: aiohttp.ClientSession, where: str, headers: dict[str, str], deadlines: Deadlines, *, absent_ok: bool = False
) -> tuple[int, bytes, PullState]:
    """A manifest or a head: (its status, 200 or 304 (or 404 when ``absent_ok``), its bytes, its validators)."""
    try:
        async with asyncio.timeout(deadlines.manifest_seconds):
            async with session.get(where, headers=headers, max_redirects=MAX_REDIRECTS) as response:
                if response.status == 304 or (response.status == 404 and absent_ok):
                    return response.status, b"", PullState()
                if response.status != 200:
                    raise PullError(f"{where}: HTTP {response.status} {response.reason}")
                raw = await read_bounded(response, MAX_MANIFEST_BYTES, where)
                return 200, raw, PullState(response.headers.get("ETag"), response.headers.get("Last-Modified"))
    except TimeoutError:
        raise PullError(f"{where}: not received within {deadlines.manifest_seconds:g} s (--manifest-timeout)") from None
    except NETWORK_ERRORS as error:
        raise PullError(f"{where}: {network_failure(error)}") from None


async def fetch_snapshot(
    session: aiohttp.ClientSession, base: str, manifest: Manifest, raw: bytes, into: Path, *, progress: bool | None,
    build_index: bool, deadlines: Deadlines,
) -> tuple[int, int]:
    """Fetch every file of the snapshot at ``base`` into ``into/<name>``, checked and indexed as a
    server would load it (``current`` is not moved): (files, bytes)."""
    if manifest.name == CURRENT:
        raise PullError(f"{base}/manifest.json: the snapshot is named {CURRENT!r}, the name of the link a pull points at the "
                        "snapshot it serves; publish it under another name")
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
    validators.name = head.name
    held = held_state(into, current)
    if held is not None and held[0] == head.name:
        write_state(into, validators)
        return Pulled(head.name, changed=False, seconds=time.perf_counter() - started)
    position = head.position(*held) if held is not None else None
    files = total = 0
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


async def fetch_changesets(
    session: aiohttp.ClientSession, base: str, wanted_changesets: list[PublishedChangeset], into: Path, deadlines: Deadlines
) -> list[tuple[PublishedChangeset, Path]]:
    """Fetch each changeset into ``into/.pull-changesets/``, its size and digest checked as it arrives."""
    directory = into / ".pull-changesets"
    directory.mkdir(exist_ok=True)
    fetched = []
    for entry in wanted_changesets:
        path = directory / f"{entry.sequence}.jsonl"
        await fetch_file(session, f"{base}/{changeset_path(entry.sequence)}", path, FileDigest(size=entry.size, sha256=entry.sha256),
                         None, deadlines, sealed_by=HEAD)
        fetched.append((entry, path))
    return fetched


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
    """``into/head.json``: the changesets kept after the snapshot ``name`` (``following.py`` reads
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
    Those before the first that changes the search index are kept first when they apply in
    memory: a server serves them while that one's index is built (a shard's build: seconds)."""
    current = current_name(into)
    assert current is not None
    kept = kept_chain(into, current)
    held = read_held(into / current)
    if held is None:
        raise PullError(f"{into / current}: the snapshot current names has no manifest that reads")
    chain = kept.changesets if kept is not None else []
    changesets = [read_checked(path, entry) for entry, path in fetched]
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


#: The state a sidecar's last pull indexed: the next one applies its changesets to it (``changeset_index.py``).
INDEXED_STATE = StateCache()


def indexes_built(into: Path, current: str, chain: list[PublishedChangeset], new: list[tuple[PublishedChangeset, Changeset]]) -> bool:
    """Whether the changesets ``new``, to be kept after ``chain``, do not change the search index
    (``store_changes.changes_index``), or their indexes were built (``changeset_index.index_changesets``);
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


def reuse_index(previous: Path, product: Path) -> bool:
    """Link the search index of ``previous`` into ``product`` when it is the product's too: both
    are made of the same projects, versions and pages (their fingerprint: the changesets changed
    builds or users alone), or of the same pages in the same places (``indexed_alike``: the
    changesets were those a server applies in memory, which change no page and take none away).
    The product then needs no index build; its marker names its own fingerprint. Index files are
    never written again once made, so the two snapshots can share them."""
    digest, before = fingerprint(product), fingerprint(previous)
    found = current_index(previous, before, own=True) if before == digest or indexed_alike(previous, product) else None
    if found is None:
        return False
    for path in sorted(found.rglob("*")):
        if path.name.startswith(".") or path.is_dir() or path == found / FINGERPRINT_FILE:  # tantivy's lock files are its own
            continue
        target = product / INDEX / path.relative_to(found)
        target.parent.mkdir(parents=True, exist_ok=True)
        link_or_copy(path, target)
    marker = json.loads((found / FINGERPRINT_FILE).read_bytes())
    (product / INDEX / FINGERPRINT_FILE).write_text(json.dumps({**marker, "fingerprint": digest, "snapshot": manifest_of(product).name}))
    return True


def read_held(snapshot: Path) -> Manifest | None:
    """The manifest of a snapshot this replica holds, if it reads as one."""
    try:
        return manifest_of(snapshot)
    except (OSError, msgspec.DecodeError):
        return None


def head_of(raw: bytes, base: str) -> Head:
    try:
        return decode_head(raw)
    except ValueError as error:
        raise PullError(f"{base}/{HEAD}: {error}") from None


def decode_manifest(raw: bytes, base: str) -> Manifest:
    try:
        manifest = msgspec.json.decode(raw, type=Manifest)
    except msgspec.DecodeError as error:
        raise PullError(f"{base}/manifest.json: not a snapshot manifest: {error}") from None
    if not manifest.files:
        raise PullError(f"{base}/manifest.json: lists no files (publish a snapshot written by docsrv: its manifest seals every file)")
    if "manifest.json" in manifest.files:
        raise PullError(f"{base}/manifest.json: lists itself as a record file")
    return manifest


async def read_bounded(response: aiohttp.ClientResponse, most: int, where: str) -> bytes:
    data = bytearray()
    async for chunk in response.content.iter_chunked(CHUNK):
        data += chunk
        if len(data) > most:
            raise PullError(f"{where}: larger than {most >> 20} MiB")
    return bytes(data)


async def fetch_file(
    session: aiohttp.ClientSession, url: str, path: Path, entry: FileDigest, bar: tqdm | None, deadlines: Deadlines,
    sealed_by: str = "manifest.json",
) -> None:
    """Download ``url`` to ``path``, resuming what is there, and check its size and digest (which
    ``sealed_by`` records)."""
    digest = hashlib.sha256()
    have = path.stat().st_size if path.exists() else 0
    if have > entry.size:
        path.unlink()
        have = 0
    if have:
        async with aiofiles.open(path, "rb") as existing:
            while chunk := await existing.read(CHUNK):
                digest.update(chunk)
        if have == entry.size and digest.hexdigest() == entry.sha256:
            if bar is not None:
                bar.update(have)
            return
    headers = {"Range": f"bytes={have}-"} if 0 < have < entry.size else {}
    least = deadlines.min_kib << 10
    try:
        async with asyncio.timeout(deadlines.window) as window:  # the head within one window too
            async with session.get(url, headers=headers, max_redirects=MAX_REDIRECTS) as response:
                if response.status == 200 and headers:  # the origin does not resume: start again
                    digest, have = hashlib.sha256(), 0
                elif response.status not in (200, 206):
                    raise PullError(f"{url}: HTTP {response.status} {response.reason}")
                if bar is not None:
                    bar.update(have)
                loop = asyncio.get_running_loop()
                window_ends, window_bytes = loop.time() + deadlines.window, 0
                async with aiofiles.open(path, "ab" if have else "wb") as out:
                    while chunk := await response.content.read(CHUNK):
                        have += len(chunk)
                        if have > entry.size:
                            raise PullError(f"{url}: more than the {entry.size} bytes {sealed_by} records")
                        digest.update(chunk)
                        await out.write(chunk)
                        if bar is not None:
                            bar.update(len(chunk))
                        window_bytes += len(chunk)
                        if window_bytes >= least or have == entry.size:  # fast enough: a new window
                            window_ends, window_bytes = loop.time() + deadlines.window, 0
                            window.reschedule(window_ends)
    except TimeoutError:
        failed = (f"{url}: fewer than {deadlines.min_kib} KiB arrived in {deadlines.window:g} s (--min-kib, --rate-window) "
                  f"after {have} of {entry.size} bytes; a new pull resumes it")
        raise PullError(failed) from None
    except NETWORK_ERRORS as error:
        failed = f"{url}: transfer failed after {have} of {entry.size} bytes ({network_failure(error)}); a new pull resumes it"
        raise PullError(failed) from None
    if have != entry.size:
        raise PullError(f"{url}: {have} bytes, but {sealed_by} records {entry.size} (truncated); a new pull resumes it")
    if digest.hexdigest() != entry.sha256:
        path.unlink()
        raise PullError(f"{url}: its SHA-256 differs from the one {sealed_by} records (corrupt); the file was removed")


async def fetch_all(fetches: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run every fetch; on the first failure, cancel the others and wait for them, then raise
    that failure alone. (``gather`` leaves the others running: one that failed after it, on a
    full disk say, was reported as a traceback when the event loop closed.)"""
    try:
        async with asyncio.TaskGroup() as group:
            for fetch in fetches:
                group.create_task(fetch)
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None


def check_and_index(directory: Path, name: str, build_index: bool, previous: Path | None = None, earlier_index: Path | None = None) -> None:
    """Load the snapshot as a server would (every record checked), and build its search index
    unless it came with one built from these records: from ``earlier_index`` (that of a state
    between the two) or the index of ``previous`` (the snapshot it was made from) when there is
    one, building again only the shards whose pages changed (``serving.rebuild_index_aside``)."""
    digest = fingerprint(directory)
    # An index that came sealed but does not open and answer a search as a server's would is named
    # in the log and built anew, as one that came without.
    indexed = not build_index or current_index(directory, digest, check=True, own=True) is not None
    # The earlier index is opened and searched as a server's would be: its shards are linked into this one.
    earlier = None
    if not indexed and earlier_index is not None and index_problem(earlier_index) is None:
        earlier = earlier_index
    elif not indexed and previous is not None:
        earlier = current_index(previous, fingerprint(previous), check=True, own=True)
    try:
        # Every file's size and SHA-256 were checked as its bytes arrived: not hashed again. Pages
        # are loaded as a server loads them, without their text, unless the whole index is to be
        # built: the records are then also kept in MessagePack for the server's load (snapshot/binary.py).
        store = load_store(directory, progress=False, digests_checked=True, page_text=not indexed and earlier is None, keep=True)
    except SnapshotError as error:
        raise PullError(error.summary(name=name)) from None
    if indexed:
        return
    target = index_directories(directory, digest)[0]
    if earlier is not None:
        try:
            rebuilt = rebuild_index_aside(store, earlier, target, digest)
        except SnapshotError as error:  # a changed page that does not decode as one, named by file and line
            raise PullError(error.summary(name=name)) from None
        if rebuilt is not None:
            log.info("%s: built %d of the %d shards of the search index again in %.1f s", name, rebuilt.built, rebuilt.shards,
                     rebuilt.seconds)
            return
        store = load_store(directory, progress=False, trust=True)  # every shard is to be built: with the pages' text
    elif (directory / INDEX).exists():
        log.warning("%s: the index it came with was built from other content, or cannot serve; building it anew", name)
    build_index_aside(store, target, digest, False)
    del store
    prepare(directory, progress=False)  # the records as a server loads them, in MessagePack


def current_name(into: Path) -> str | None:
    link = into / CURRENT
    return os.readlink(link) if link.is_symlink() else None


def point_current(into: Path, name: str) -> None:
    """``into/current`` -> ``name``, swapped in one rename (a reader sees the old link or the new)."""
    fresh = into / f".{CURRENT}.{os.getpid()}"
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(name)
    os.replace(fresh, into / CURRENT)


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


def network_failure(error: Exception) -> str:
    """One line for what aiohttp raised (its messages can be empty, or name a whole request)."""
    if isinstance(error, aiohttp.TooManyRedirects):
        return f"more than {MAX_REDIRECTS} redirects"
    if isinstance(error, aiohttp.NonHttpUrlRedirectClientError):
        return f"redirected to {str(error)[:200]!r}, which is not an http(s) URL"
    text = " ".join(str(error).split())[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def pull_every(
    url: str, into: Path, seconds: float, *, keep: int, progress: bool | None = None, deadlines: Deadlines = DEFAULT_DEADLINES
) -> None:
    """Pull now and every ``seconds``, each look ``seconds`` after the one before began (at once
    when a pull took longer: a pull that built an index took about 1.5 s at the large scale, and
    a pause after it made a changeset published meanwhile wait that much more); a failure,
    whatever it is, is logged in one line and tried again after a pause that doubles with each
    failure in a row (from ``seconds`` or 5 s, whichever is shorter, to 5 minutes): a sidecar
    never dies of its origin. Every look is logged in one line (a pull, or that the snapshot is
    current), and so is a recovery."""
    sys.setswitchinterval(held_calls.GIL_SWITCH_SECONDS)  # its looks go on beside the state it loads (``tend_warming``)
    failures = 0
    folding: asyncio.Task[Folded | None] | None = None
    warming: asyncio.Task[None] | None = None
    clock = asyncio.get_running_loop().time
    while True:
        began = clock()
        try:
            pulled = await pull(url, into, keep=keep, progress=progress, deadlines=deadlines, fold_at=None)
        except Exception as error:
            failures += 1
            pause = min(min(seconds, RETRY_SECONDS[0]) * 2 ** (failures - 1), RETRY_SECONDS[1])
            log.error("pull failed (%s); trying again in %.0f s", describe(error), pause)
            await asyncio.sleep(pause)
            continue
        pause = max(0.0, began + seconds - clock())
        if pulled.changed:
            log.info("pulled snapshot %s (%d files, %.1f MB in %.1f s); %s",
                     pulled.name, pulled.files, pulled.bytes / 1e6, pulled.seconds, pulled.where(into))
        else:  # a heartbeat: a sidecar's log shows it is alive and current
            log.info("snapshot %s is current; looking again in %.1f s", pulled.name, pause)
        if failures:
            log.info("pulling works again after %d failure(s) in a row", failures)
        failures = 0
        folding = await tend_fold(into, folding)
        warming = tend_warming(into, warming)
        await asyncio.sleep(pause)


def tend_warming(into: Path, warming: asyncio.Task[None] | None) -> asyncio.Task[None] | None:
    """A sidecar's kept state loaded in the background, once ``current`` names a snapshot it is not
    of (``changeset_index.StateCache.warm``): the first changeset of pages after a start, a
    snapshot pulled whole or a fold then costs the shards it changes, not a load of the snapshot
    too. A load that fails is logged in one line; a change of pages then loads the snapshot itself."""
    if warming is not None:
        if not warming.done():
            return warming
        if not warming.cancelled() and isinstance(error := warming.exception(), Exception):
            log.error("loading the snapshot ahead of the next change of pages failed (%s)", describe(error))
    current = current_name(into)
    if current is None or not INDEXED_STATE.cold(into / current):
        return None
    return asyncio.create_task(asyncio.to_thread(INDEXED_STATE.warm, into / current))


async def tend_fold(into: Path, folding: asyncio.Task[Folded | None] | None) -> asyncio.Task[Folded | None] | None:
    """A sidecar's folding, in the background while it goes on keeping changesets: start one once
    FOLD_CHANGESETS are kept; once one is done, point ``current`` at its product."""
    if folding is not None and folding.done():
        try:
            folded = folding.result()
        except Exception as error:
            log.error("folding the kept changesets failed (%s); trying again", describe(error))
        else:
            if folded is not None and finish_fold(into, folded):
                log.info("folded the changesets kept after %s in %.1f s: %s -> %s", folded.source, folded.seconds, into / CURRENT,
                         folded.last.product)
        folding = None
    if folding is None:
        current = current_name(into)
        kept = kept_chain(into, current) if current is not None else None
        if kept is not None and len(kept.changesets) >= FOLD_CHANGESETS:
            folding = asyncio.create_task(asyncio.to_thread(fold_kept, into))
    return folding


def describe(error: Exception) -> str:
    if isinstance(error, PullError | SnapshotError):
        return str(error)
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror or error}"
    return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
