"""Free memory given back to the system: ``malloc_trim(3)`` of every arena of glibc's allocator.

A load decodes and checks far more than it keeps (pieces of MessagePack, the lists a check
builds, the records a page's text is dropped from), and glibc's allocator keeps what is freed:
only free memory at the top of a heap goes back by itself, the rest stays resident in holes
between the objects kept. A generation that forks its workers with those holes hands each of
them the pages, and a worker's first allocations write into them, copying them.
``malloc_trim(0)`` gives back the whole free pages of every arena, holes included (``madvise``):
the addresses stay, the pages are the system's until written again.

Not after each changeset a worker applies: what it gives back then the requests that follow take
again (``bench/memory.py``), and it holds each arena's lock while it walks the free lists.
Where the C library has no ``malloc_trim`` (musl, macOS), nothing happens.
"""

from __future__ import annotations

import ctypes

_malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
if _malloc_trim is not None:
    _malloc_trim.argtypes = [ctypes.c_size_t]
    _malloc_trim.restype = ctypes.c_int


def give_back_free_memory() -> bool:
    """Give the allocator's whole free pages back to the system; whether any went back."""
    return bool(_malloc_trim(0)) if _malloc_trim is not None else False
