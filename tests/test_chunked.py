"""A long list kept in pieces (``utils.sequences.Chunked``), as the store keeps its long lists for
changesets applied in memory: every read a handler makes of it, and every edit, gives what the
same read and edit of a plain list give, and an edit copies none of the items it keeps."""

from __future__ import annotations

import random
from bisect import bisect_left
from itertools import pairwise

import pytest

from docsrv.utils import sequences as positions
from docsrv.utils.sequences import LEAVE_OUT, PUT_IN, REPLACE, Chunked, Grouping, assembled


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch):
    monkeypatch.setattr(positions, "CHUNK", 4)
    monkeypatch.setattr(positions, "SHORT", 3)


def random_edits(length: int, rng: random.Random) -> list:
    """Edits as ``store.changes.rearranged`` makes them: at most one replacement or leaving out
    per position, any number of items put in, in order of position and of what they do."""
    edits = []
    for position in rng.sample(range(length), rng.randrange(0, min(length, 12) + 1)):
        edits.append((position, rng.choice((REPLACE, LEAVE_OUT)), None))
    edits = [(position, what, f"r{position}" if what == REPLACE else None) for position, what, _ in edits]
    edits += [(rng.randrange(length + 1), PUT_IN, f"n{number}") for number in range(rng.randrange(0, 30))]
    edits.sort(key=lambda edit: edit[:2])
    return edits


def group_of(plain: list, rng: random.Random) -> Chunked:
    """``plain`` as a store's long group is: the group of one key of a ``Grouping`` of a list where
    other keys' items stand between its items (pieces that are views of the grouping's positions)."""
    items, keys = [], []
    for item in plain:
        for _other in range(rng.randrange(3)):
            items.append("other")
            keys.append(rng.choice(("a", "b")))
        items.append(item)
        keys.append("mine")
    found = Grouping.of(keys).groups(items).get("mine", [])
    return found if isinstance(found, Chunked) else Chunked.of(list(found))


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("grouped", [False, True])
def test_a_chunked_list_reads_and_edits_as_a_plain_list(seed, grouped):
    rng = random.Random(seed)
    plain = [f"i{number}" for number in range(rng.randrange(0, 60))]
    chunked = group_of(plain, rng) if grouped else Chunked.of(plain)
    for _round in range(6):
        assert len(chunked) == len(plain) and list(chunked) == plain
        lengths = [stop - start for _items, start, stop in chunked.pieces]
        assert all(lengths) and not any(a < positions.SHORT and b < positions.SHORT for a, b in pairwise(lengths)), lengths
        for start in range(-2, len(plain) + 3):
            for stop in (start, start + 1, start + 5, start + 20, len(plain) + 4):
                assert chunked[start:stop] == plain[start:stop], (start, stop)
        assert [chunked[index] for index in range(-len(plain), len(plain))] == plain[-len(plain):] + plain
        with pytest.raises(IndexError):
            chunked[len(plain)]
        edits = random_edits(len(plain), rng)
        plain, chunked = assembled(plain, edits), chunked.edited(edits)
    assert list(chunked) == plain


def test_bisection_finds_where_a_plain_list_puts_an_item():
    rng = random.Random(5)
    plain = sorted(rng.randrange(100) for _ in range(57))
    chunked = Chunked.of(plain)
    for value in range(-1, 102):
        assert chunked.bisect_left(value, key=int) == bisect_left(plain, value), value


def test_an_edit_copies_none_of_the_items_it_keeps(monkeypatch):
    """What a change of a list of a million versions costs is what it changes: the items it keeps
    stay in the lists they were in (a copy would write to each one's memory, taking it out of the
    workers' copy-on-write sharing), and so does every piece it does not touch."""
    monkeypatch.setattr(positions, "CHUNK", 10)
    plain = [f"i{number}" for number in range(40)]
    chunked = Chunked.of(plain)
    edited = chunked.edited([(15, REPLACE, "r15"), (16, PUT_IN, "n16"), (25, LEAVE_OUT, None)])
    assert list(edited) == [*plain[:15], "r15", "n16", *plain[16:25], *plain[26:]]
    assert [(start, stop) for items, start, stop in edited.pieces if items is plain] == [(0, 10), (10, 15), (16, 20), (20, 25), (26, 30),
                                                                                          (30, 40)]
    assert [items[start:stop] for items, start, stop in edited.pieces if items is not plain] == [["r15", "n16"]]
    assert list(chunked) == plain  # the list it was made from is unchanged: requests in flight read it


def test_short_pieces_beside_an_edit_are_copied_into_one():
    """Edits at the same places again and again leave a piece for about every SHORT items they put
    in, not a few for each edit."""
    plain = list(range(100))
    chunked = Chunked.of(plain)
    for number in range(50):
        chunked = chunked.edited([(41, REPLACE, -number), (42, PUT_IN, -number)])
        plain = assembled(plain, [(41, REPLACE, -number), (42, PUT_IN, -number)])
    assert list(chunked) == plain
    assert len(chunked.pieces) <= len(Chunked.of(plain).pieces) + 50 // (positions.SHORT - 1)
