"""A list's groupings and sorted orders kept as positions in it, so that a later load reads them back
instead of computing them again.

Grouping a million records by a key in Python touches every record and appends to a list per
record: at the large scale the store's groupings were a large part of a load. Kept as positions
(one array of 32-bit positions, grouped, and where each group ends), a grouping is read back as
it is: a group is the records at its positions, read there when a request asks for them
(``Groups``), never gathered into lists at the load. A sorted order answers a lookup by key
with a binary search, where a dict would have to be built at each load (millions of builds by
commit: time and memory).

Positions are 32-bit in the machine's byte order: they are a private cache of one directory, never
published (``snapshot/binary.py``).
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, chain
from typing import Any, Generic, TypeVar, overload

import msgspec

T = TypeVar("T")
K = TypeVar("K")
#: Positions are unsigned 32-bit integers (``array`` type code "I").
POSITION = "I"
POSITION_BYTES = array(POSITION).itemsize
#: The keys a grouping may have: an id, a slug, a flag, or one of these with a flag.
Key = int | str | bool | tuple[int | str, bool]


def positions(values: Sequence[int] | Any) -> bytes:
    return array(POSITION, values).tobytes()


def positions_of(data: bytes) -> array:
    found = array(POSITION)
    found.frombytes(data)
    return found


class Grouping(msgspec.Struct, array_like=True, frozen=True):
    """A list's positions grouped by a key, in the list's order within a group: the group of
    ``keys[i]`` is the positions ``order[ends[i - 1]:ends[i]]`` (``ends[-1]`` is the list's length)."""

    keys: list[Key]
    order: bytes
    ends: bytes

    @classmethod
    def of(cls, keys: Sequence[Hashable]) -> Grouping:
        """Group the positions of ``keys`` (the key of each item of a list, in its order)."""
        groups: dict[Any, list[int]] = defaultdict(list)
        for position, key in enumerate(keys):
            groups[key].append(position)
        return cls(list(groups), positions(chain.from_iterable(groups.values())), positions(accumulate(map(len, groups.values()))))

    def groups(self, items: Sequence[T]) -> Groups[Any, T]:
        """The items of each key, in the order of ``items`` (the list the grouping was made of)."""
        return Groups(Gathered(items, memoryview(positions_of(self.order))), self.keys, positions_of(self.ends))

    def sizes(self) -> dict[Any, int]:
        """How many items each key has."""
        ends = positions_of(self.ends)
        return dict(zip(self.keys, map(operator.sub, ends, chain((0,), ends)), strict=True))


class Gathered(Sequence[T]):
    """The items of a list in the order of ``positions`` in it (a view of a grouping's), read from
    the list when asked: a slice is a new list of those items, made in C."""

    __slots__ = ("items", "positions")

    def __init__(self, items: Sequence[T], positions: memoryview) -> None:
        self.items = items
        self.positions = positions

    def __iter__(self) -> Iterator[T]:
        return map(self.items.__getitem__, self.positions)

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return list(map(self.items.__getitem__, self.positions[index]))
        return self.items[self.positions[index]]


class Groups(Mapping[K, Sequence[T]]):
    """The groups of a ``Grouping`` by key, each read through the grouped positions: a short one
    as a ``Gathered`` view of them, a long one as a ``Chunked`` list whose pieces are (so that a
    changeset edits it as it edits any long list). A slice of a group reads only the items it
    holds.

    Gathering every group into lists at a load touched every record of the list once per
    grouping (seconds at the large scale, and a list of references per group, in each worker
    that reads it); a group read this way holds no reference to its items. A long group's pieces
    are made once, when it is first asked for; a short one's view costs less to make again than
    to keep."""

    __slots__ = ("_ends", "_gathered", "_index", "_long")

    def __init__(self, gathered: Gathered[T], keys: Sequence[K], ends: array) -> None:
        self._gathered = gathered
        self._ends = ends
        #: Each key's place among the groups.
        self._index = dict(zip(keys, range(len(keys)), strict=True))
        #: The long groups made so far, by place.
        self._long: dict[int, Chunked[T]] = {}

    def get(self, key: K, default: Any = None) -> Any:
        place = self._index.get(key)
        if place is None:
            return default
        found = self._long.get(place)
        if found is not None:
            return found
        gathered, start, end = self._gathered, self._ends[place - 1] if place else 0, self._ends[place]
        if end - start <= CHUNK:
            return Gathered(gathered.items, gathered.positions[start:end])
        found = self._long[place] = Chunked([(gathered, first, min(first + CHUNK, end)) for first in range(start, end, CHUNK)])
        return found

    def __getitem__(self, key: K) -> Sequence[T]:
        found = self.get(key, _MISSING)
        if found is _MISSING:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[K]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


class SortedOrder(Generic[T]):
    """Lookups by key in a list kept in another order: the list's positions sorted by the key (in
    the list's order among equal keys), searched by bisection."""

    def __init__(self, items: Sequence[T], key: Callable[[T], Any], order: bytes | None = None) -> None:
        """``order``: the positions as ``order`` gave them for these items; sorted now if None."""
        self.items = items
        if order is None:
            order = positions(sorted(range(len(items)), key=list(map(key, items)).__getitem__))
        self._positions = positions_of(order)
        self._key_at: Callable[[int], Any] = lambda position: key(items[position])

    @property
    def order(self) -> bytes:
        """The positions, as bytes to keep."""
        return self._positions.tobytes()

    def find(self, key: Any) -> list[T]:
        """The items of ``key``, in the list's order."""
        start = bisect_left(self._positions, key, key=self._key_at)
        end = bisect_right(self._positions, key, lo=start, key=self._key_at)
        return [self.items[position] for position in self._positions[start:end]]

    def first(self, key: Any) -> T | None:
        start = bisect_left(self._positions, key, key=self._key_at)
        if start < len(self._positions) and self._key_at(self._positions[start]) == key:
            return self.items[self._positions[start]]
        return None


class PatchedOrder(Generic[T]):
    """The lookups of a SortedOrder made before some items changed (changesets applied in memory):
    sorting the whole list again for each change would cost what the list costs, the patch
    costs what changed. Each item the base finds is taken as it is now (``current``, by id), if
    it still has the key; items that are new or whose key changed since are found by their ids
    in ``moved``. Found items are given highest ``rank`` first, the order of the list the base
    was made of."""

    def __init__(self, base: SortedOrder[T], current: Mapping[int, T], moved: dict[Any, tuple[int, ...]],
                 ident: Callable[[T], int], key: Callable[[T], Any], rank: Callable[[T], Any]) -> None:
        self.base = base
        self.current = current
        self.moved = moved
        self.ident = ident
        self.key = key
        self.rank = rank

    @classmethod
    def of(cls, found: SortedOrder[T] | PatchedOrder[T], current: Mapping[int, T], moved: list[T], ident: Callable[[T], int],
           key: Callable[[T], Any], rank: Callable[[T], Any]) -> PatchedOrder[T]:
        """``found`` once the items are ``current``, of which ``moved`` are new or have another key."""
        base, before = (found.base, found.moved) if isinstance(found, PatchedOrder) else (found, {})
        moved_by_key = dict(before)
        for item in moved:
            moved_by_key[key(item)] = (*moved_by_key.get(key(item), ()), ident(item))
        return cls(base, current, moved_by_key, ident, key, rank)

    def find(self, key: Any) -> list[T]:
        current, ident, key_of = self.current, self.ident, self.key
        found: dict[int, T] = {}
        for identity in (*map(ident, self.base.find(key)), *self.moved.get(key, ())):
            item = current.get(identity)
            if item is not None and key_of(item) == key:
                found[identity] = item
        items = list(found.values())
        if len(items) > 1:
            items.sort(key=self.rank, reverse=True)
        return items

    def first(self, key: Any) -> T | None:
        found = self.find(key)
        return found[0] if found else None


_MISSING: Any = object()


class Overlay(Mapping[K, T]):
    """A dictionary (by id, or by a group's key) with some keys changed or removed since it was
    made (changesets applied in memory): a read looks at the changes first. Copying a dictionary
    of two million builds for each changeset took a tenth of a second and touched every build
    (taking their pages out of the workers' copy-on-write sharing); the overlay costs what changed."""

    __slots__ = ("_base_top", "_length", "base", "changes")

    def __init__(self, base: Mapping[K, T], changes: dict[K, T | None], length: int, base_top: Any = _MISSING) -> None:
        self.base = base
        #: By key: the item now, or None where it was removed.
        self.changes = changes
        self._length = length
        #: The largest key of ``base`` once read (``base_top``), kept by the overlays made of this one.
        self._base_top = base_top

    @classmethod
    def of(cls, found: Mapping[K, T], changes: dict[K, T | None]) -> Overlay[K, T]:
        """``found`` (a dictionary, or an overlay of one) with ``changes`` made."""
        length = len(found) + sum((value is not None) - (key in found) for key, value in changes.items())
        if isinstance(found, Overlay):
            return cls(found.base, {**found.changes, **changes}, length, found._base_top)
        return cls(found, changes, length)

    @property
    def base_top(self) -> Any:
        """The largest key of ``base`` (None when it has none), read once for it and every overlay
        made of this one (the base never changes)."""
        if self._base_top is _MISSING:
            keys: Iterable[Any] = self.base
            self._base_top = max(keys, default=None)
        return self._base_top

    def get(self, key: K, default: Any = None) -> Any:
        found = self.changes.get(key, _MISSING)
        if found is _MISSING:
            return self.base.get(key, default)
        return default if found is None else found

    def __getitem__(self, key: K) -> T:
        found = self.get(key, _MISSING)
        if found is _MISSING:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        found = self.changes.get(key, _MISSING)  # type: ignore[arg-type]
        return key in self.base if found is _MISSING else found is not None

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[K]:
        changes = self.changes
        yield from (key for key in self.base if changes.get(key, _MISSING) is not None)
        yield from (key for key, value in changes.items() if value is not None and key not in self.base)


class ById(Mapping[int, T]):
    """Records by id, found by bisection in their ids (ascending, in an array) and read at the
    position beside it in their list: for a list of records decoded when first read
    (``snapshot.binary.Undecoded``), whose dictionary by id would decode them all, and whose
    dictionary of positions would make an integer of each id and each position at the load."""

    __slots__ = ("ids", "places", "records")

    def __init__(self, records: Sequence[T], ids: array, places: array) -> None:
        self.records = records
        self.ids = ids
        #: Where the record of each id (at the same index in ``ids``) is in ``records``.
        self.places = places

    def get(self, key: int, default: Any = None) -> Any:
        ids = self.ids
        at = bisect_left(ids, key)
        return self.records[self.places[at]] if at < len(ids) and ids[at] == key else default

    def __getitem__(self, key: int) -> T:
        found = self.get(key, _MISSING)
        if found is _MISSING:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        ids = self.ids
        at = bisect_left(ids, key)
        return at < len(ids) and ids[at] == key

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids)


def largest_key(found: Mapping[Any, object]) -> Any:
    """The largest key of ``found`` (None when it has none): of a dictionary, taken in C; of an
    ``Overlay``, its base's (read once for the base: ``Overlay.base_top``; unless a change removed
    it: then every key is read) against the keys its changes hold (an overlay's own keys are
    iterated in Python, a key at a time)."""
    if not isinstance(found, Overlay):
        return max(found, default=None)
    changes = found.changes
    top = found.base_top
    if top is not None and top in changes and changes[top] is None:
        return max(found, default=None)
    added = [key for key, value in changes.items() if value is not None]
    return max(added if top is None else [top, *added], default=None)


class Replaced(Sequence[T]):
    """A list with the items at some positions replaced (changesets applied in memory: a build
    whose state changed stands where it stood). Copying the list of two million builds for each
    changeset touched every build; this costs what changed. A page of it is a slice of the list
    with the replaced items put in."""

    __slots__ = ("at", "base")

    def __init__(self, base: Sequence[T], at: dict[int, T]) -> None:
        #: A list, or a list in chunks (``Chunked``).
        self.base = base
        #: By position: the item that stands there now.
        self.at = at

    @classmethod
    def of(cls, found: Sequence[T], at: dict[int, T]) -> Replaced[T]:
        """``found`` (a list, or one with replacements) with the items at positions ``at`` replaced."""
        if isinstance(found, Replaced):
            return cls(found.base, {**found.at, **at})
        return cls(found, at)

    def __len__(self) -> int:
        return len(self.base)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        at = self.at
        if isinstance(index, slice):
            sliced = self.base[index]  # a new list, from a list or a ``Chunked``: not copied again
            items = sliced if isinstance(sliced, list) else list(sliced)
            for place, position in enumerate(range(*index.indices(len(self.base)))):
                found = at.get(position)
                if found is not None:
                    items[place] = found
            return items
        if index < 0:
            index += len(self.base)
        found = at.get(index)
        return self.base[index] if found is None else found


#: Items per piece of a ``Chunked`` list as the store loads it; a list longer than this is kept in pieces.
CHUNK = 512
#: A piece shorter than this is copied into a neighbour as short (``Chunked.edited``): no two
#: short pieces stand side by side, so a list of n items keeps fewer than 2n / SHORT + 1 pieces.
SHORT = 32
#: A piece of a ``Chunked`` list: the items ``items[start:stop]`` of a list no one changes (or of
#: the positions of a grouping: ``Gathered``, whose slices are lists too).
Piece = tuple[Sequence[Any], int, int]


class Chunked(Sequence[T]):
    """A long list kept as pieces of lists that no one changes (changesets applied in memory).

    A record that joins, leaves or moves in a list copied the list: at the large scale, one
    version made private copied lists of nearly a million versions. Copying only the chunks it
    touched still increments the count of references of every item a copy holds, writing to the
    page of memory each one is in: a worker's first changeset took much of the records out of the
    copy-on-write sharing with its peers, and its apply took longer than the next one's. Edited
    (``edited``), a list in pieces copies no item it keeps: the piece an edit falls in is cut into
    views of the same list around a short list of what the edit put in; only a piece left
    shorter than SHORT is copied, into its short neighbour. Every piece an edit does
    not touch is shared with the list it was made from."""

    __slots__ = ("pieces", "starts")

    def __init__(self, pieces: list[Piece]) -> None:
        #: No piece is empty.
        self.pieces = pieces
        #: Where each piece starts in the list, and (last) the list's length.
        self.starts = [0, *accumulate(stop - start for _items, start, stop in pieces)]

    @classmethod
    def of(cls, items: Sequence[T]) -> Chunked[T]:
        """``items`` in pieces of CHUNK; ``items`` is shared, and no one may change it after."""
        return cls([(items, start, min(start + CHUNK, len(items))) for start in range(0, len(items), CHUNK)])

    def __len__(self) -> int:
        return self.starts[-1]

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        starts = self.starts
        if isinstance(index, slice):
            start, stop, step = index.indices(starts[-1])
            if step != 1:
                return list(self)[index]
            found: list[T] = []
            piece = bisect_right(starts, start) - 1
            while start < stop:
                items, first, _stop = self.pieces[piece]
                base = starts[piece]
                found += items[first + start - base : first + min(stop, starts[piece + 1]) - base]
                start = starts[piece + 1]
                piece += 1
            return found
        if index < 0:
            index += starts[-1]
        if not 0 <= index < starts[-1]:
            raise IndexError("chunked list index out of range")
        piece = bisect_right(starts, index) - 1
        items, first, _stop = self.pieces[piece]
        return items[first + index - starts[piece]]

    def __iter__(self) -> Iterator[T]:
        return chain.from_iterable(items[start:stop] for items, start, stop in self.pieces)

    def bisect_left(self, value: Any, key: Callable[[T], Any]) -> int:
        """Where ``value`` would go in the list (sorted by ``key``): the piece by its first item,
        then the place in the piece (``bisect.bisect_left`` would look each item up through
        ``__getitem__``)."""
        pieces = self.pieces
        low, high = 0, len(pieces)
        while low < high:  # the first piece whose first item is not below ``value``
            middle = (low + high) // 2
            items, start, _stop = pieces[middle]
            if key(items[start]) < value:
                low = middle + 1
            else:
                high = middle
        if low == 0:
            return 0
        items, start, stop = pieces[low - 1]
        return self.starts[low - 1] + bisect_left(items, value, start, stop, key=key) - start

    def edited(self, edits: Sequence[Edit]) -> Chunked[T]:
        """The list with ``edits`` made (as ``assembled`` makes them): each piece they touch cut
        around them (``cut``), every other one shared. A position at the list's end is in the
        last piece; one at a piece's start, in that piece."""
        pieces, starts = self.pieces, self.starts
        if not pieces:
            return Chunked.of(assembled([], edits))
        last = len(pieces) - 1
        by_piece: dict[int, list[Edit]] = {}
        for position, what, item in edits:
            piece = bisect_right(starts, position) - 1 if position < starts[-1] else last
            by_piece.setdefault(piece, []).append((position - starts[piece], what, item))
        made: list[Piece] = []
        done = 0
        for piece, local in sorted(by_piece.items()):
            if done < piece:  # the pieces untouched before it: only the first may meet a short one
                put(made, pieces[done])
                made += pieces[done + 1 : piece]
            for part in cut(pieces[piece], local):
                put(made, part)
            done = piece + 1
        if done <= last:
            put(made, pieces[done])
            made += pieces[done + 1 :]
        return Chunked(made)


def cut(piece: Piece, edits: Sequence[Edit]) -> list[Piece]:
    """``piece`` with ``edits`` made (positions in it, in order, as ``assembled`` takes them): views
    of its list between them, and lists of the items they put in."""
    items, start, stop = piece
    parts: list[Piece] = []
    fresh: list[Any] = []
    kept = start  # the first item of the piece not yet placed
    for position, what, item in edits:
        at = start + position
        if at > kept:
            if fresh:
                parts.append((fresh, 0, len(fresh)))
                fresh = []
            parts.append((items, kept, at))
        if item is not None and what != LEAVE_OUT:
            fresh.append(item)
        kept = at if what == PUT_IN else at + 1
    if kept < stop:
        if fresh:
            parts.append((fresh, 0, len(fresh)))
            fresh = []
        parts.append((items, kept, stop))
    if fresh:
        parts.append((fresh, 0, len(fresh)))
    return parts


def put(made: list[Piece], piece: Piece) -> None:
    """Add ``piece`` after ``made``: copied into the last piece when both are shorter than SHORT."""
    items, start, stop = piece
    if made and stop - start < SHORT:
        before, first, end = made[-1]
        if end - first < SHORT:
            joined = [*before[first:end], *items[start:stop]]
            made[-1] = (joined, 0, len(joined))
            return
    made.append(piece)


def chunked(items: Sequence[T]) -> Sequence[T]:
    """``items``, in pieces when it is longer than one (``Chunked``): a changeset applied in memory
    then cuts the pieces it changes, not the list."""
    return Chunked.of(items) if len(items) > CHUNK else items


#: What an edit of a list does at a position: put an item in before the one there, replace the
#: one there, or leave it out (in this order at one position).
PUT_IN, REPLACE, LEAVE_OUT = 0, 1, 2
#: An edit of a list: (position, what, the item put in or replacing; None to leave one out).
Edit = tuple[int, int, Any]


def assembled(items: Sequence[T], edits: Sequence[Edit]) -> list[T]:
    """A new list of ``items`` with ``edits`` made (in order of position, then of what they do),
    assembled from the slices between them: one copy however many edits (editing a list in place
    moves its tail once an edit, a thousand times for a thousand edits)."""
    result: list[T] = []
    start = 0
    for position, what, item in edits:
        result += items[start:position]
        if item is not None and what != LEAVE_OUT:
            result.append(item)
        start = position if what == PUT_IN else position + 1
    result += items[start:]
    return result
