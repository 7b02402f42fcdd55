"""File system calls made without letting go of the GIL, for a thread beside a busy event loop.

Python lets go of the GIL around every system call, and a thread that let go of it waits to get
it back from the thread holding it: up to ``sys.getswitchinterval()`` (5 ms) when that thread is a
worker's event loop serving requests. A call of a few microseconds then costs milliseconds. A
worker opening the search index of a changeset links each file of its shards
(``search.open_index``): for the 76 shards of an index of the medium scale, about 1,800 calls,
and as many again to remove the links. Beside a thread shaped as a serving loop (50 µs of Python
between two small system calls), opening that index took 42 s with ``os``'s calls and 7.2 s with
links made and removed by these, which hold the GIL for their microseconds instead (ctypes'
``PyDLL`` calls C without letting go of it); 0.3 s alone. The links are removed once the index
serves, off the changeset's way. A call that holds the GIL holds the event loop as long as the
file system takes: a link took 0.44 ms in an ext4 ``/tmp``, 8 µs in ``/dev/shm``, where the links
are made (``search.links_root``).
"""

from __future__ import annotations

import ctypes
import os

#: How long a thread holds the GIL while another waits for it (Python's default is 5 ms), in a
#: process whose event loop runs beside a thread of heavy work. At 5 ms, a worker's cheap
#: requests waited as long behind a search or a long render, and a search thread that hands the
#: GIL over at each call into tantivy lost a third of its time waiting to get it back; a sidecar's
#: pulls took 0.5-1.1 s each, not 0.05 s, while its state loaded beside them.
GIL_SWITCH_SECONDS = 0.0005

_libc = ctypes.PyDLL(None, use_errno=True)
_libc.symlink.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_libc.unlink.argtypes = [ctypes.c_char_p]


def _checked(result: int, path: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)


def symlink(target: str, link: str) -> None:
    """``os.symlink``, the GIL held."""
    _checked(_libc.symlink(os.fsencode(target), os.fsencode(link)), link)


def unlink(path: str) -> None:
    """``os.unlink``, the GIL held."""
    _checked(_libc.unlink(os.fsencode(path)), path)
