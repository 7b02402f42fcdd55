"""Files from an origin: a head or a manifest, small and bounded; a snapshot's or a changeset's
file streamed to disk without blocking the event loop, resumed where an earlier pull left it
(a Range request where the origin allows), its size and SHA-256 checked as it arrives. Every
failure of the origin is a ``PullError`` of one line."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiofiles
import aiohttp
import msgspec

from ..config import Deadlines
from ..errors import PullError
from ..snapshot.errors import DECODE_ERRORS, SnapshotError
from ..snapshot.origin import HEAD, Head, decode_head
from ..snapshot.records import FileDigest, Manifest

if TYPE_CHECKING:
    from tqdm import tqdm

#: The size of a read, and the longest a manifest or a head may be.
CHUNK = 256 << 10
MAX_MANIFEST_BYTES = 4 << 20
#: Redirects followed from one URL (each to http or https only).
MAX_REDIRECTS = 5

#: What an origin's failure raises (aiohttp's errors; a URL it cannot take is also a ValueError).
NETWORK_ERRORS = (aiohttp.ClientError, TimeoutError, ValueError)


class PullState(msgspec.Struct):
    """What the last pull saw of the manifest, for a conditional request."""

    etag: str | None = None
    last_modified: str | None = None
    name: str | None = None
    #: The history of the origin followed (``snapshot/origin.History``), when it says one.
    history: str = ""


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


def head_of(raw: bytes, base: str) -> Head:
    try:
        return decode_head(raw)
    except ValueError as error:
        raise PullError(f"{base}/{HEAD}: {error}") from None


def decode_manifest(raw: bytes, base: str) -> Manifest:
    try:
        manifest = msgspec.json.decode(raw, type=Manifest)
    except DECODE_ERRORS as error:
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
    ``sealed_by`` records). What is there is never trusted: a whole file whose digest differs is
    fetched anew, and so is a resumed one whose digest then differs (its first bytes were not
    these: a file refused before, left by a pull of another changeset of the same sequence)."""
    digest = hashlib.sha256()
    have = path.stat().st_size if path.exists() else 0
    if 0 < have <= entry.size:
        async with aiofiles.open(path, "rb") as existing:
            while chunk := await existing.read(CHUNK):
                digest.update(chunk)
        if have == entry.size and digest.hexdigest() == entry.sha256:
            if bar is not None:
                bar.update(have)
            return
    if have >= entry.size:  # not these bytes (a file refused before, or another's): from the start
        path.unlink(missing_ok=True)
        digest, have = hashlib.sha256(), 0
    resumed = have > 0
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
        if resumed:  # the bytes kept from before were not these: once more, from the start
            await fetch_file(session, url, path, entry, bar, deadlines, sealed_by)
            return
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


def network_failure(error: Exception) -> str:
    """One line for what aiohttp raised (its messages can be empty, or name a whole request)."""
    if isinstance(error, aiohttp.TooManyRedirects):
        return f"more than {MAX_REDIRECTS} redirects"
    if isinstance(error, aiohttp.NonHttpUrlRedirectClientError):
        return f"redirected to {str(error)[:200]!r}, which is not an http(s) URL"
    text = " ".join(str(error).split())[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def describe(error: Exception) -> str:
    if isinstance(error, PullError | SnapshotError):
        return str(error)
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror or error}"
    return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"

