"""Where a snapshot's search index lives, and how it is made current.

The index lives in ``<snapshot>/index/``, where ``docsrv index`` (or a pull) builds it, and
records a fingerprint of the content it was built from. A server writes nothing into a snapshot:
when the snapshot has no index of its content, or one that cannot serve (``index_problem``), it
builds one in the temporary directory, beside the one in place, and swaps it in with renames, so
an interrupted build leaves the previous index whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ..snapshot.changeset import page_owners, places
from ..snapshot.load import manifest_of, record_file
from ..snapshot.records import INDEX
from ..snapshot.write import built_aside
from ..store.loaded import Store
from .build import build_index
from .index_files import SCHEMA_VERSION, index_problem
from .rebuild import plan_rebuild, rebuild_index

log = logging.getLogger("docsrv")


FINGERPRINT_FILE = "docsrv-index.json"


def fingerprint(snapshot: Path) -> str:
    """A digest of everything the index is made from: the project, version and page files (by the
    digests the manifest records, when it does: the load then checks the files against them) and
    the index's schema version."""
    listed: dict = {}
    with contextlib.suppress(OSError, msgspec.DecodeError):
        listed = manifest_of(snapshot).files
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"schema {SCHEMA_VERSION}".encode())
    for kind in ("projects", "versions", "pages"):
        for path in record_file(snapshot, kind):
            digest.update(path.name.encode())
            if path.name in listed:
                digest.update(listed[path.name].sha256.encode())
            else:
                with open(path, "rb") as data:
                    digest.update(hashlib.file_digest(data, "blake2b").digest())
    return digest.hexdigest()


def indexed_alike(previous: Path, product: Path) -> bool:
    """Whether the search index of ``previous`` is that of ``product`` too, though their
    fingerprints differ: the same page files (by the digests their manifests record), and every
    project and version that holds a page in the same place (slug, project, privacy). What
    changed of projects and versions then is what no index holds, as when a fold's changesets
    are those a server applied in memory."""
    sealed = [manifest_of(directory).files for directory in (previous, product)]
    names = [[path.name for path in record_file(directory, "pages")] for directory in (previous, product)]
    if names[0] != names[1] or any(name not in sealed[0] or sealed[0][name] != sealed[1].get(name) for name in names[0]):
        return False
    owners = page_owners(previous)
    return all(places(previous, kind, ids) == places(product, kind, ids) for kind, ids in owners.items())


def write_marker(directory: Path, digest: str, store: Store) -> None:
    """Record what the index in ``directory`` was built from."""
    marker = {"fingerprint": digest, "schema_version": SCHEMA_VERSION, "snapshot": store.name, "pages": len(store.pages)}
    (directory / FINGERPRINT_FILE).write_text(json.dumps(marker))


def index_directories(snapshot: Path, digest: str) -> tuple[Path, Path]:
    """Where the index of a snapshot lives: in it, or (when it cannot be written to) in a temporary directory."""
    return snapshot / INDEX, Path(tempfile.gettempdir()) / f"docsrv-index-{digest}"


def current_index(snapshot: Path, digest: str, *, check: bool = False, own: bool = False) -> Path | None:
    """The directory of an index built from content with this ``digest``, if there is one (with
    ``own``, only in the snapshot). With ``check``, only one that opens and answers a search as a
    server's will (``index_problem``): one that does not is named in the log (``not_serving``)
    and passed over."""
    for directory in current_indexes(snapshot, digest, own=own):
        problem = index_problem(directory) if check else None
        if problem is None:
            return directory
        not_serving(directory, problem)
    return None


def current_indexes(snapshot: Path, digest: str, *, own: bool = False) -> list[Path]:
    """The directories of the indexes built from content with this ``digest`` (by their markers),
    the snapshot's own first (with ``own``, it alone)."""
    found = []
    for directory in index_directories(snapshot, digest)[: 1 if own else 2]:
        try:
            if json.loads((directory / FINGERPRINT_FILE).read_text()).get("fingerprint") == digest:
                found.append(directory)
        except (OSError, ValueError):
            continue
    return found


def not_serving(directory: Path, problem: str) -> None:
    """Say, in one line, that the index in ``directory`` is not used, and why."""
    log.warning("%s: the search index cannot serve (%s); not used", directory, " ".join(problem.split())[:300])


def build_private_index(store: Store, digest: str) -> Path:
    """Build the index of ``store``'s content (whose fingerprint is ``digest``) in the temporary
    directory, where a server may write: for a snapshot that came without a usable one."""
    assert store.path is not None
    directory = index_directories(store.path, digest)[1]
    log.warning("%s has no usable search index of its content: building one at %s (`docsrv index %s` builds it into the snapshot)",
                store.path, directory, store.path)
    seconds = build_index_aside(store, directory, digest)
    log.info("built the search index of %s pages in %.1f s at %s", len(store.pages), seconds, directory)
    return directory


def build_index_aside(store: Store, directory: Path, digest: str, print_progress: bool | None = None) -> float:
    """Build the index beside ``directory`` and swap it in, as snapshots are (``built_aside``):
    until then the index in place, if any, is whole and current for what it was built from;
    workers that opened the old one keep their open files. Return the seconds taken."""
    with built_aside(directory, replace=True) as partial:
        seconds = build_index(store, partial, print_progress)
        write_marker(partial, digest, store)
    return seconds


@dataclass(frozen=True)
class Rebuilt:
    """An index built again from an earlier one: the seconds it took, the shards built, of how many."""

    seconds: float
    built: int
    shards: int


def rebuild_index_aside(store: Store, previous: Path, directory: Path, digest: str) -> Rebuilt | None:
    """Build the index of ``store`` (loaded without its pages' text) from the index of an earlier
    snapshot in ``previous``, beside ``directory`` and swapped in as ``build_index_aside`` does:
    the shards whose pages changed are built again, the others linked (``rebuild.py``). None,
    and nothing written, when every shard must be built (``build_index``)."""
    plan = plan_rebuild(store, previous)
    if plan is None:
        return None
    with built_aside(directory, replace=True) as partial:
        seconds = rebuild_index(store, plan, partial)
        write_marker(partial, digest, store)
    return Rebuilt(seconds, len(plan.changed), len(plan.digests))

