"""Free memory given back to the system (``utils/heap.py``): what the allocator keeps of what a
load let go, in holes between objects still alive, is resident until given back."""

from __future__ import annotations

import subprocess
import sys

import pytest

from docsrv.utils import heap

#: In a process of its own: 40 MB of objects the allocator places one after another (too large
#: for Python's own small-object allocator), every twentieth kept, so that what is freed lies in
#: holes between them and no heap can shrink from its top.
FRAGMENTED = """
from docsrv.utils.heap import give_back_free_memory

def anonymous_kb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:"))

before = anonymous_kb()
made = [bytes(2000 + at % 500) for at in range(20000)]
kept = made[::20]
del made
freed = anonymous_kb()
gave_back = give_back_free_memory()
print(before, freed, anonymous_kb(), gave_back, len(kept))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or heap._malloc_trim is None, reason="glibc's malloc_trim")
def test_memory_freed_between_live_objects_goes_back_to_the_system():
    out = subprocess.run([sys.executable, "-c", FRAGMENTED], capture_output=True, text=True, check=True).stdout.split()
    before, freed, after, gave_back, kept = (int(value) if value.isdigit() else value for value in out)
    assert kept == 1000
    assert freed - before > 30_000  # freed, yet resident: the holes stay the process's
    assert gave_back == "True"
    assert freed - after > 30_000 and after - before < 10_000  # given back: no more than what is kept stays
