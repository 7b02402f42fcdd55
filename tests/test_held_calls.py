"""File system calls made holding the GIL (``utils/held_calls.py``): they do what ``os``'s do,
and fail as they do, with the errno and the path."""

from __future__ import annotations

import os

import pytest

from docsrv.utils import held_calls


def test_a_link_made_and_removed_holding_the_gil_is_os_symlink_and_unlink(tmp_path):
    target = tmp_path / "segment.idx"
    target.write_bytes(b"postings")
    link = tmp_path / "links" / "segment.idx"
    link.parent.mkdir()
    held_calls.symlink(str(target), str(link))
    assert link.is_symlink() and os.readlink(link) == str(target) and link.read_bytes() == b"postings"
    with pytest.raises(FileExistsError) as raised:
        held_calls.symlink(str(target), str(link))
    assert raised.value.filename == str(link)
    held_calls.unlink(str(link))
    assert not link.exists() and not link.is_symlink() and target.read_bytes() == b"postings"
    with pytest.raises(FileNotFoundError) as missing:
        held_calls.unlink(str(link))
    assert missing.value.filename == str(link)
