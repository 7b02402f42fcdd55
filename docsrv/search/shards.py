"""Which shard of the search index holds each version's pages (``Layout``).

The index is kept in shards (``search/build.py``), and each shard is searched on its own, scored
by its own statistics (``search/query.py``): a search of a version's pages goes to its shard alone. The
layout is a function of the snapshot alone, never of the index's history, so that an index built
again after a change and one built whole of the same pages hold the same shards, each with the
same pages in the same order, and answer alike.

A version with more than VERSION_PAGES pages is a shard alone; the others are in shards of blocks
of consecutive version ids, as many ids to a block as cut the ids into SHARD_BLOCKS to twice as
many blocks (a power of two, which changes when the last version's id crosses one: then every
shard is built again, ``search.rebuild.read_shards``).

A block of more than RANGED_PAGES pages has its pages and sections indexes cut into segments by
the same rule (``segment_of``): SEGMENTS ranges of its ids, each a tantivy segment built apart
(``search/build.py``), so that a version made private or built again costs building the segment
of its range, not its block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..utils.sequences import largest_key
from .highlight import MAX_SHARD_KEY

if TYPE_CHECKING:
    from ..store.loaded import Store

#: The blocks of version ids the index is cut into, at least (at most twice as many): what a
#: change of one version's pages costs building, against what opening the index and a search of
#: every page (v1's, which visits every shard) cost. A search of one version visits its shard
#: alone, whatever their number. Of the counts measured at the large scale (docs/operations.md),
#: this one's shards cost a change of pages a fraction of the fewest's, and the search of every
#: page little more.
SHARD_BLOCKS = 256
#: A version with more pages than this is a shard alone: its changes build it alone, and a
#: change of another costs no building of it. A slot numbers a page of a block within its
#: version in ``search.highlight.VERSION_BITS`` bits, which hold this many.
VERSION_PAGES = 2048
#: The ranges of version ids the pages and sections indexes of a block of more than RANGED_PAGES
#: pages are cut into, each a segment of its own: what a change of one version's pages costs
#: building (a range), against what a search of a version costs visiting every segment of its
#: block, and opening them; and what each segment built costs (a writer, a commit), which a
#: block of a few pages does not repay. Most blocks of a snapshot of a few hundred thousand
#: pages hold a few hundred: a version made private in one built it all again, as many pages as
#: a range of a block ten times larger (docs/operations.md).
SEGMENTS = 8
RANGED_PAGES = 256


def segment_of(shard: int, width: int, pages: int, version: int) -> int:
    """Which segment of ``shard`` (a key of ``Layout``, of blocks ``width`` ids wide, holding
    ``pages`` pages) holds the pages of ``version``: the range of its ids, in order; a block of
    RANGED_PAGES pages or fewer, a version alone and the shard of the keys a slot cannot hold are
    one segment."""
    if shard & 1 or shard == MAX_SHARD_KEY or pages <= RANGED_PAGES:
        return 0
    return min((version - shard // 2) // max(1, width // SEGMENTS), SEGMENTS - 1)


def block_width(last: int) -> int:
    """How many consecutive version ids a block of an index whose last version is ``last``
    holds: the power of two that cuts the ids into SHARD_BLOCKS to twice as many blocks."""
    return 1 << max(0, (last // SHARD_BLOCKS).bit_length() - 1)


@dataclass(frozen=True)
class Layout:
    """Which shard holds each version's pages (``shard_of``): a function of the version, its
    number of pages and the block width, so that an index built again and one built whole of the
    same pages hold the same shards. A shard's key says which: ``2 * version + 1`` for a version
    alone, ``2 * (first id of its block)`` for a block; the keys a slot cannot hold
    (``search.highlight.MAX_SHARD_KEY``) are one shard."""

    width: int
    #: How many public pages each version holds.
    counts: Mapping[int, int]

    @classmethod
    def of(cls, store: Store) -> Layout:
        """The layout of ``store``'s index: its blocks as wide as its last public version's id
        makes them (with pages or not, so that a version that gains its first page, loses its
        last or is made private moves no block's bounds, unless it is the last of all)."""
        return cls(block_width(largest_key(store.versions) or 0), store.versions_with_pages)

    def shard_of(self, version: int) -> int:
        return self.alone(version) if self.counts.get(version, 0) > VERSION_PAGES else self.block(version)

    def alone(self, version: int) -> int:
        return min(2 * version + 1, MAX_SHARD_KEY)

    def block(self, version: int) -> int:
        return min(2 * (version - version % self.width), MAX_SHARD_KEY)

    def versions_of(self, shard: int) -> tuple[int, int | None]:
        """The first version id that may be in ``shard``, and the one after the last (None: no end)."""
        if shard == MAX_SHARD_KEY:
            return MAX_SHARD_KEY // 2 - self.width, None
        first = shard // 2
        return first, first + (1 if shard % 2 else self.width)
