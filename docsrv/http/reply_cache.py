"""The cache of encoded replies: bounded in bytes, every byte it holds counted, S3-FIFO eviction.

A replica behind a CDN sees the requests the CDN could not answer, and an attacker can make
every one of them new (``?x=<random>``). Two things keep such a flood from costing memory or
the hot replies:

- **Every byte is counted**: the key, the reply with its headers and compressed variants, the
  entry and its slot in the dictionary and queue, and the ghost keys (below). The cache never
  holds more than ``max_bytes`` by that count.
- **S3-FIFO** (Yang et al., SOSP 2023): a new entry enters a small FIFO queue (a tenth of the
  bytes); when it reaches the head, it moves to the main queue if it was asked for again, and
  is evicted otherwise, its key's hash kept a while in a ghost queue so that a key asked for
  again soon goes straight to main. The main queue is a CLOCK: an entry asked for since it was
  last passed goes round again. A flood of one-off keys churns the small queue and never
  reaches the main one, where the hot replies are. A hit costs a dictionary lookup and setting
  one flag.

Changesets: a server applying a changeset in memory (``api/state.py``, ``ApiState.following``)
moves the cache on to the new state with ``advance``: the purge keys the change touches are
noted with its sequence, and nothing is scanned. A reply is checked when it is next found: one
that shows a key touched after the state it was made from is dropped (a miss: it is made anew);
any other is still true, and takes the new snapshot's name and date in its headers. A dropped
reply's entry stays where it stands in its queue, vacant (its key, counted), and the reply made
anew fills it: a worker that applies changeset after changeset holds what a fresh one would
after the same requests, not a trail of entries left in the queues. A hot reply
costs one check per changeset; a cold one none. The touched keys are bounded: past
MAX_TOUCHED, the cache is emptied and they are forgotten.

Aliases: a request whose path and query are not in canonical form (unknown parameters, another
order, another spelling) is looked up under its canonical key; its own key is then kept as an
alias, a small entry that names the canonical one, so that the next identical request is a
single lookup. An alias is charged its own bytes and evicted like any entry.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from sys import getsizeof

from .reply import Reply

#: A cache key: the request's path and query, or (host, path and query) when links are built
#: from the request's own host (``hits.cache_key``).
Key = str | tuple[str, str]

#: What one dictionary slot and one queue slot cost beyond the objects they point to: a
#: dict keeps 8 bytes of index and 24 of entry per slot at a load of at most 2/3, and grows
#: by doubling; a deque slot is a pointer.
SLOT_BYTES = 112
#: A ghost key: an int hash in a dictionary slot.
GHOST_BYTES = SLOT_BYTES + 32
#: Share of the bytes for the small queue, and for ghost keys (S3-FIFO's 10 % and about as
#: many ghosts as the main queue holds entries).
SMALL_SHARE = 0.10
GHOST_SHARE = 0.02
#: Purge keys remembered as touched by changesets, at most (about 100 bytes each).
MAX_TOUCHED = 200_000


class Entry:
    __slots__ = ("dead", "key", "main", "nbytes", "reply", "target", "vacant", "visited")

    def __init__(self, key: Key, reply: Reply | None, target: Key | None) -> None:
        self.key = key
        #: The reply (an owner), or None for an alias of ``target``.
        self.reply = reply
        self.target = target
        self.visited = False
        self.main = False
        #: Dropped by a changeset, its reply to be made anew (``ReplyCache._vacant``).
        self.vacant = False
        #: Out of the cache, its queue slot left until its queue reaches it.
        self.dead = False
        self.nbytes = self.held_bytes()

    def own_bytes(self) -> int:
        """What the entry costs without what it holds: itself, its key and its slots."""
        return getsizeof(self) + SLOT_BYTES + key_bytes(self.key)

    def held_bytes(self) -> int:
        """What the entry costs with its reply (as made: ``ReplyCache.add_variant`` charges
        variants) or its target."""
        if self.reply is not None:
            return self.own_bytes() + self.reply.nbytes()
        return self.own_bytes() + (key_bytes(self.target) if self.target is not None else 0)


def key_bytes(key: Key) -> int:
    if isinstance(key, str):
        return getsizeof(key)
    return getsizeof(key) + sum(getsizeof(part) for part in key)


class ReplyCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._small_target = int(max_bytes * SMALL_SHARE)
        self._ghost_limit = max(16, int(max_bytes * GHOST_SHARE) // GHOST_BYTES)
        self._entries: dict[Key, Entry] = {}
        #: Entries whose reply a changeset dropped, by key, where they stand in their queues.
        self._vacant: dict[Key, Entry] = {}
        self._small: deque[Entry] = deque()
        self._main: deque[Entry] = deque()
        self._ghost: dict[int, None] = {}
        self._small_bytes = 0
        self._main_bytes = 0
        #: Entries evicted to make room, since start.
        self.evictions = 0
        #: The sequence of the state served, the headers that name it, and when each purge key
        #: was last touched by a changeset (``advance``).
        self.stamp = 0
        self._stamp_values: dict[str, str] = {}
        self._touched: dict[str, int] = {}

    @property
    def nbytes(self) -> int:
        """Bytes held, by the count described above."""
        return self._small_bytes + self._main_bytes + len(self._ghost) * GHOST_BYTES

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Key) -> Reply | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        entry.visited = True
        reply = entry.reply
        if reply is None:  # an alias
            entry = self._entries.get(entry.target)  # type: ignore[arg-type]
            if entry is None or entry.reply is None:
                return None
            entry.visited = True
            reply = entry.reply
        if reply.stamp != self.stamp and not self._brought_on(entry, reply):
            return None
        return reply

    def advance(self, stamp: int, touched: Iterable[str], values: dict[str, str]) -> None:
        """Move on to the state of sequence ``stamp``, which a changeset made: the replies that show
        a key in ``touched`` are gone; every other takes the header ``values`` (above)."""
        for key in touched:
            self._touched[key] = stamp
        self.stamp = stamp
        self._stamp_values = values
        if len(self._touched) > MAX_TOUCHED:
            self.clear()

    def clear(self) -> None:
        """Hold nothing (and forget the touched keys)."""
        for entry in (*self._entries.values(), *self._vacant.values()):
            self._release(entry)
        self._entries.clear()
        self._vacant.clear()
        self._small.clear()
        self._main.clear()
        self._ghost.clear()
        self._touched.clear()
        self._small_bytes = self._main_bytes = 0

    def _brought_on(self, entry: Entry, reply: Reply) -> bool:
        """Whether a reply made from an earlier state is still true (then it takes this state's
        header values); one that is not is dropped."""
        touched = self._touched
        made = reply.stamp
        if any(touched.get(key, -1) > made for key in reply.headers.get("Surrogate-Key", "").split()):
            del self._entries[entry.key]
            reply.entry = entry.reply = None
            entry.vacant = True
            self._vacant[entry.key] = entry
            self._resize(entry, entry.own_bytes())
            return False
        before = reply.nbytes()
        reply.restamp(self._stamp_values, self.stamp)
        self._resize(entry, entry.nbytes + reply.nbytes() - before)
        return True

    def put(self, key: Key, reply: Reply) -> None:
        """Keep ``reply`` under its canonical ``key``."""
        self._keep(key, reply, None)

    def alias(self, key: Key, target: Key) -> None:
        """Answer ``key`` with whatever is cached under ``target``."""
        self._keep(key, None, target)

    def _keep(self, key: Key, reply: Reply | None, target: Key | None) -> None:
        """Keep ``reply`` or ``target`` under ``key``: in the entry the key has (held or vacant),
        where it stands in its queue, else in a new one."""
        entry = self._entries.get(key) or self._vacant.pop(key, None)
        if entry is None:
            entry = Entry(key, reply, target)
            if self._insert(entry) and reply is not None:
                reply.entry = entry
            return
        if entry.reply is not None:
            entry.reply.entry = None
        entry.reply, entry.target, entry.vacant = reply, target, False
        self._entries[key] = entry
        size = entry.held_bytes()
        if size > self._small_target:  # as ``_insert``: it would only push everything else out
            del self._entries[key]
            self._forget(entry)
            return
        if reply is not None:
            reply.entry = entry
        self._resize(entry, size)
        self._make_room()

    def add_variant(self, reply: Reply, coding: str, variant: Reply) -> None:
        """Keep a compressed variant on a reply, charging the entry that owns it."""
        if coding in reply.variants:
            return
        reply.variants[coding] = variant
        entry = reply.entry
        if isinstance(entry, Entry) and not entry.dead:
            self._resize(entry, entry.nbytes + variant.nbytes() + SLOT_BYTES)
            self._make_room()

    # Keeping the bound.

    def _insert(self, entry: Entry) -> bool:
        """Put a new entry in the small queue (in main when its key is a ghost's)."""
        if entry.nbytes > self._small_target:
            return False  # larger than the small queue: it would only push everything else out
        self._entries[entry.key] = entry
        ghost = self._ghost
        hashed = hash(entry.key)
        if hashed in ghost:
            del ghost[hashed]
            entry.main = True
            self._main.append(entry)
            self._main_bytes += entry.nbytes
        else:
            self._small.append(entry)
            self._small_bytes += entry.nbytes
        self._make_room()
        return True

    def _make_room(self) -> None:
        while self.nbytes > self.max_bytes and (self._small or self._main):
            if self._small_bytes > self._small_target or not self._main:
                self._evict_small()
            else:
                self._evict_main()

    def _evict_small(self) -> None:
        entry = self._small.popleft()
        if entry.dead or entry.vacant:
            self._small_bytes -= entry.nbytes
            self._bury(entry)
            return
        self._small_bytes -= entry.nbytes
        if entry.visited:
            entry.visited = False
            entry.main = True
            self._main.append(entry)
            self._main_bytes += entry.nbytes
            return
        self._remove(entry)
        ghost = self._ghost
        ghost[hash(entry.key)] = None
        if len(ghost) > self._ghost_limit:
            del ghost[next(iter(ghost))]

    def _evict_main(self) -> None:
        entry = self._main.popleft()
        if entry.dead or entry.vacant:
            self._main_bytes -= entry.nbytes
            self._bury(entry)
            return
        if entry.visited:
            entry.visited = False
            self._main.append(entry)
            return
        self._main_bytes -= entry.nbytes
        self._remove(entry)

    def _remove(self, entry: Entry) -> None:
        del self._entries[entry.key]
        self._release(entry)
        self.evictions += 1

    def _bury(self, entry: Entry) -> None:
        """An entry its queue let go of: a vacant one leaves the cache."""
        if entry.vacant:
            del self._vacant[entry.key]
            entry.vacant = False
            entry.dead = True

    def _forget(self, entry: Entry) -> None:
        """An entry out of the cache before its queue reached it: what it holds goes now; itself,
        its key and its queue slot then, and are counted until then."""
        self._release(entry)
        self._resize(entry, entry.own_bytes())

    def _resize(self, entry: Entry, size: int) -> None:
        """Count ``size`` bytes for ``entry``, in its queue."""
        grown = size - entry.nbytes
        entry.nbytes = size
        if entry.main:
            self._main_bytes += grown
        else:
            self._small_bytes += grown

    @staticmethod
    def _release(entry: Entry) -> None:
        entry.dead = True
        entry.target = None
        if entry.reply is not None:
            entry.reply.entry = None
            entry.reply = None
