"""File system calls made without letting go of the GIL, for a thread beside a busy event loop.

Python lets go of the GIL around every system call, and a thread that let go of it waits to get
it back from the thread holding it: up to ``sys.getswitchinterval()`` when that thread is a
worker's event loop serving requests. A call of a few microseconds then costs milliseconds. A
worker opening the search index of a changeset links each file of its shards
(``search.index_files.open_index``): thousands of calls, and as many again to remove the links.
Beside a thread shaped as a serving loop, opening that index with ``os``'s calls took many times
as long as with links made and removed by these, which hold the GIL for their microseconds
instead (ctypes' ``PyDLL`` calls C without letting go of it). The links are removed once the
index serves, off the changeset's way. A call that holds the GIL holds the event loop as long as
the file system takes, so the links are made in a memory file system where there is one
(``search.index_files.links_root``).
"""

from __future__ import annotations

import ctypes
import os

#: How long a thread holds the GIL while another waits for it (Python's default is 5 ms), in a
#: process whose event loop runs beside a thread of heavy work. At the default, a worker's cheap
#: requests waited as long behind a search or a long render, and a search thread that hands the
#: GIL over at each call into tantivy lost much of its time waiting to get it back; a sidecar's
#: pulls took ten times as long while its state loaded beside them.
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
