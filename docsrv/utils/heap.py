"""Free memory given back to the system: ``malloc_trim(3)`` of every arena of glibc's allocator.

A worker that applies a changeset makes the pieces of a new state beside the old one, then lets
the old go. glibc's allocator keeps what is freed: only free memory at the top of a heap goes
back by itself, so the pages the old state held stay resident in holes between live objects,
and the next changeset's pieces rarely fit them exactly. Over hundreds of changesets a worker's
resident memory creeps above that of a worker started fresh on the same state
(``bench/memory.py``). ``malloc_trim(0)`` gives back the whole free pages of every arena, holes
included (``madvise``): the addresses stay, the pages are the system's until written again.

It walks the allocator's free lists, so it runs in the heavy-work thread: ctypes lets go of the
GIL for the call. Where the C library has no ``malloc_trim`` (musl, macOS), nothing happens.
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
