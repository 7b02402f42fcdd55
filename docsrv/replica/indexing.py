"""A snapshot a pull brings or a fold makes, loaded and checked as a server would, with its search
index: the one it came with when that was built from its records, the index of the snapshot it
was made from linked when it is the product's too, or built again from it, shard by shard
(``search/location.py``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..errors import PullError
from ..search.index_files import index_problem
from ..search.location import (
    FINGERPRINT_FILE,
    build_index_aside,
    current_index,
    fingerprint,
    index_directories,
    indexed_alike,
    rebuild_index_aside,
)
from ..snapshot.errors import SnapshotError
from ..snapshot.load import manifest_of
from ..snapshot.records import INDEX
from ..store.loaded import load_store, prepare
from ..utils.files import link_or_copy

log = logging.getLogger("docsrv")


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


def check_and_index(directory: Path, name: str, build_index: bool, previous: Path | None = None, earlier_index: Path | None = None) -> None:
    """Load the snapshot as a server would (every record checked), and build its search index
    unless it came with one built from these records: from ``earlier_index`` (that of a state
    between the two) or the index of ``previous`` (the snapshot it was made from) when there is
    one, building again only the shards whose pages changed (``search.location.rebuild_index_aside``)."""
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

