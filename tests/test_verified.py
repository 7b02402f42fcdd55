"""A record of an earlier check spares a later load of the same files the digests, the scan of
the build commands and the checks across records (issue 25); anything that does not match it
(a file written to since, a ranges file or record of other files, another manifest) is named
in the log and not used: the snapshot is checked whole again."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

from docsrv.snapshot.errors import SnapshotError
from docsrv.snapshot.verified import RANGES, RECORD
from docsrv.store import load_store
from helpers import docsrv, edit_record, sealed


@pytest.fixture
def snapshot(tmp_path):
    return sealed(tmp_path / "snap", "snap")


def commands_of_every_build(store):
    return {build: [c.id for c in store.commands_of(store.builds[build])] for build in store.builds}


def test_a_second_load_of_the_same_files_trusts_the_first_check(snapshot):
    first = load_store(snapshot, progress=False)
    assert not first.trusted and (snapshot / RECORD).exists() and (snapshot / RANGES).exists()
    second = load_store(snapshot, progress=False)
    assert second.trusted
    assert second.counts == first.counts
    assert commands_of_every_build(second) == commands_of_every_build(first)


def test_a_file_written_in_place_with_its_old_time_is_checked_again(snapshot, caplog):
    load_store(snapshot, progress=False)
    path = snapshot / "builds.jsonl"
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[data.index(b'"finished"') + 1] = ord("F")  # same size, a different byte
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # its modification time as it was
    with caplog.at_level(logging.INFO, logger="docsrv"), pytest.raises(SnapshotError) as raised:
        load_store(snapshot, progress=False)
    assert f"{RECORD} does not match builds.jsonl" in caplog.text
    assert "builds.jsonl: its SHA-256 differs from the one manifest.json records" in str(raised.value)


def test_a_ranges_file_that_does_not_match_is_named_and_not_used(snapshot, caplog):
    load_store(snapshot, progress=False)
    (snapshot / RANGES).write_bytes(b"\0" * 24)  # another file: its identity is not the recorded one
    with caplog.at_level(logging.INFO, logger="docsrv"):
        store = load_store(snapshot, progress=False)
    assert not store.trusted and f"{RECORD} does not match {RANGES}" in caplog.text
    assert load_store(snapshot, progress=False).trusted  # the whole check wrote them anew


def test_a_record_that_does_not_decode_is_named_and_not_used(snapshot, caplog):
    load_store(snapshot, progress=False)
    (snapshot / RECORD).write_text("{not json")
    with caplog.at_level(logging.INFO, logger="docsrv"):
        assert not load_store(snapshot, progress=False).trusted
    assert f"{RECORD}: not a record docsrv reads" in caplog.text


def test_records_changed_and_sealed_anew_are_checked_again_not_trusted(tmp_path, snapshot):
    load_store(snapshot, progress=False)
    changed = sealed(tmp_path / "changed", "snap", edit=lambda d: edit_record(d / "versions.jsonl", 3, project=404))
    for name in (RECORD, RANGES):  # the old record beside the new files: the manifest differs
        shutil.copy(snapshot / name, changed / name)
    with pytest.raises(SnapshotError) as raised:
        load_store(changed, progress=False)
    assert "versions.jsonl:3: version 3 names project 404, which does not exist" in str(raised.value)


def test_validate_checks_everything_whatever_was_checked_before(snapshot):
    load_store(snapshot, progress=False)
    path = snapshot / "users.jsonl"
    stat = path.stat()
    data = path.read_bytes().replace(b"@", b"#", 1)
    path.write_bytes(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    result = docsrv("snapshot", "validate", str(snapshot))
    assert result.returncode == 1 and "users.jsonl: its SHA-256 differs" in result.stderr


def test_a_snapshot_where_no_record_can_be_written_loads_and_keeps_none(snapshot):
    (snapshot / f"{RANGES}.partial").mkdir()  # the write fails, as on a read-only volume or a full disk
    assert not load_store(snapshot, progress=False).trusted
    assert not (snapshot / RECORD).exists()
    assert not load_store(snapshot, progress=False).trusted
