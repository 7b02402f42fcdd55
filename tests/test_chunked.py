"""A long list kept in chunks (``utils/positions.Chunked``), as the store keeps its long lists for
changesets applied in memory: every read a handler makes of it, and every edit, gives what the
same read and edit of a plain list give."""

from __future__ import annotations

import random
from bisect import bisect_left

import pytest

from docsrv.utils import positions
from docsrv.utils.positions import LEAVE_OUT, PUT_IN, REPLACE, Chunked, assembled


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(positions, "CHUNK", 4)


def random_edits(length: int, rng: random.Random) -> list:
    """Edits as ``store_changes.rearranged`` makes them: at most one replacement or leaving out
    per position, any number of items put in, in order of position and of what they do."""
    edits = []
    for position in rng.sample(range(length), rng.randrange(0, min(length, 12) + 1)):
        edits.append((position, rng.choice((REPLACE, LEAVE_OUT)), None))
    edits = [(position, what, f"r{position}" if what == REPLACE else None) for position, what, _ in edits]
    edits += [(rng.randrange(length + 1), PUT_IN, f"n{number}") for number in range(rng.randrange(0, 30))]
    edits.sort(key=lambda edit: edit[:2])
    return edits


@pytest.mark.parametrize("seed", range(30))
def test_a_chunked_list_reads_and_edits_as_a_plain_list(seed):
    rng = random.Random(seed)
    plain = [f"i{number}" for number in range(rng.randrange(0, 60))]
    chunked = Chunked.of(plain)
    for _round in range(6):
        assert len(chunked) == len(plain) and list(chunked) == plain
        assert all(chunk and len(chunk) <= 2 * positions.CHUNK for chunk in chunked.chunks)
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


def test_an_edit_copies_only_the_chunks_it_touches():
    """What a change of a list of a million versions costs is what it changes."""
    plain = list(range(40))
    chunked = Chunked.of(plain)
    edited = chunked.edited([(9, REPLACE, -9), (10, PUT_IN, -10)])
    assert list(edited) == [*plain[:9], -9, -10, *plain[10:]]
    shared = [chunk for chunk in edited.chunks if any(chunk is before for before in chunked.chunks)]
    assert len(shared) == len(chunked.chunks) - 1
    assert list(chunked) == plain  # the list it was made from is unchanged: requests in flight read it
