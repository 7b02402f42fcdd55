"""How a server takes a snapshot: the directory resolved once, the store loaded, the search
index made current and opened (``search/location.py``), and what the files were when they were
read.

Everything a worker reads is opened here, in the master, before the fork: the records are in
memory, the build commands' file is open, the index and highlight files are mapped. A
``current`` symlink flipped, an index directory removed or a file copied over after this point
cannot mix another snapshot into what the workers serve. A file changed in place is what is
left; the ``signature`` of the files read lets the master notice it (``supervisors/reloads.py``),
and the build commands' file checks itself on every read (``snapshot/commands.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..search.location import build_private_index, current_indexes, fingerprint, not_serving
from ..search.query import SearchIndex
from ..snapshot.errors import Problem, SnapshotError
from ..snapshot.load import record_files
from ..store.loaded import Store, load_store

#: What a snapshot's files were when they were read: (name, inode, size, mtime, ctime) of each.
#: ctime changes with any write, even one that puts the old modification time back.
Signature = tuple[tuple[str, int, int, int, int], ...]


@dataclass(frozen=True)
class Served:
    store: Store
    search: SearchIndex
    #: The directory the snapshot was read from, every symlink resolved.
    directory: Path
    signature: Signature


class Handover:
    """A generation's ``Served``, handed to each worker it forks. A forked worker's stack still
    holds the frames of the generation that forked it: were the state an argument or a local
    there, the worker would keep the loaded state for as long as it runs, and with it every
    record, ordered list and index shard the changesets it applies have since replaced (the
    generation's shared pages, which stay in the worker's memory). The worker ``take``s it
    instead, and what it moves on from is let go of."""

    def __init__(self, served: Served) -> None:
        self._served: Served | None = served

    def peek(self) -> Served:
        """The state, left in place (the generation's own reads, between forks)."""
        if self._served is None:
            raise RuntimeError("the state was taken: a worker takes it once")
        return self._served

    def take(self) -> Served:
        """The state, no longer held here (a worker, once)."""
        served = self.peek()
        self._served = None
        return served


def resolve(snapshot: str | Path) -> Path:
    """The real directory of a snapshot path, read once: a ``current`` link swapped later changes nothing."""
    return Path(os.path.realpath(snapshot))


def signature(directory: Path) -> Signature:
    """The identity of the manifest and of every record file in ``directory``, now."""
    found = []
    for path in [directory / "manifest.json", *record_files(directory)]:
        try:
            stat = path.stat()
        except OSError:
            continue
        found.append((path.name, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns))
    return tuple(found)


def load_served(snapshot: str | Path, *, progress: bool | None = None) -> Served:
    """A snapshot as a server keeps it, with its index open. When a current index holds the pages'
    text, the store is loaded without it (most of a large snapshot's memory is that text);
    otherwise the whole snapshot is loaded and the index built from it first."""
    directory = resolve(snapshot)
    before = signature(directory)
    digest = fingerprint(directory)
    store = search = None
    for found in current_indexes(directory, digest):
        if store is None:
            store = load_store(directory, progress=progress, page_text=False)
        try:
            search = SearchIndex.open(store, found, check=True)  # checked as it opens: ``index_problem``'s check
            break
        except (OSError, ValueError) as problem:
            not_serving(found, str(problem))
    if store is None or search is None:  # no index, or none that serves: the whole snapshot, to build one
        store = load_store(directory, progress=progress)
        search = SearchIndex.open(store, build_private_index(store, digest))
    if signature(directory) != before:
        raise SnapshotError(str(directory), [Problem(directory.name, None, "files changed while they were being read")])
    return Served(store, search, directory, before)

