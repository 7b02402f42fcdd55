"""A record of an earlier check spares a later load of the same files the digests, the scan of
the build commands and the checks across records (issue 25); anything that does not match it
(a file written to since, a ranges file or record of other files, another manifest) is named
in the log and not used: the snapshot is checked whole again. The same goes for the records kept
in MessagePack for the next load."""

from __future__ import annotations

import logging
import os
import shutil
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from docsrv.snapshot.errors import SnapshotError
from docsrv.snapshot.verified import RANGES, RECORD
from docsrv.store.loaded import load_store
from helpers import docsrv, edit_record, sealed


@pytest.fixture
def snapshot(tmp_path):
    return sealed(tmp_path / "snap", "snap")


def read_kept(path, cls):
    """A kind's MessagePack file as this docsrv writes it, its pieces decoded (lists of ``cls``;
    of a kind decoded when read, one piece of every record)."""
    from array import array
    from itertools import pairwise

    import msgspec

    from docsrv.snapshot.binary import START, ServedRecords

    served = msgspec.msgpack.decode(path.read_bytes(), type=ServedRecords[bytes])
    if served.starts:
        starts = array(START, served.starts)
        records = [[msgspec.msgpack.decode(served.records[0][start:end], type=cls) for start, end in pairwise(starts)]]
    else:
        records = [msgspec.msgpack.decode(piece, type=list[cls]) for piece in served.records]
    return msgspec.structs.replace(served, records=records)


def write_kept(path, served) -> None:
    """Write ``served`` (pieces as lists of records) as this docsrv writes a kind's file."""
    import msgspec

    from docsrv.snapshot.binary import one_by_one

    if served.starts:
        written = one_by_one([record for piece in served.records for record in piece], served.derived, msgspec.msgpack.Encoder())
    else:
        written = msgspec.structs.replace(served, records=[msgspec.msgpack.encode(piece) for piece in served.records])
    path.write_bytes(msgspec.msgpack.encode(written))


def earlier_file(layout, records, derived) -> bytes:
    """A kind's file as an earlier docsrv wrote it: three items, and what was derived without counts."""
    import msgspec

    return msgspec.msgpack.encode([layout, records, [derived.groupings, derived.orders]])


def commands_of_every_build(store):
    return {build: [c.id for c in store.commands_of(store.builds[build])] for build in store.builds}


def test_a_second_load_of_the_same_files_trusts_the_first_check(snapshot):
    first = load_store(snapshot, progress=False, keep=True)
    assert not first.trusted and (snapshot / RECORD).exists() and (snapshot / RANGES).exists()
    second = load_store(snapshot, progress=False, keep=True)
    assert second.trusted
    assert second.counts == first.counts
    assert commands_of_every_build(second) == commands_of_every_build(first)


def test_a_file_written_in_place_with_its_old_time_is_checked_again(snapshot, caplog):
    load_store(snapshot, progress=False, keep=True)
    path = snapshot / "builds.jsonl"
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[data.index(b'"finished"') + 1] = ord("F")  # same size, a different byte
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # its modification time as it was
    with caplog.at_level(logging.INFO, logger="docsrv"), pytest.raises(SnapshotError) as raised:
        load_store(snapshot, progress=False, keep=True)
    assert f"{RECORD} does not match builds.jsonl" in caplog.text
    assert "builds.jsonl: its SHA-256 differs from the one manifest.json records" in str(raised.value)


def test_a_ranges_file_that_does_not_match_is_named_and_not_used(snapshot, caplog):
    load_store(snapshot, progress=False, keep=True)
    (snapshot / RANGES).write_bytes(b"\0" * 24)  # another file: its identity is not the recorded one
    with caplog.at_level(logging.INFO, logger="docsrv"):
        store = load_store(snapshot, progress=False, keep=True)
    assert not store.trusted and f"{RECORD} does not match {RANGES}" in caplog.text
    assert load_store(snapshot, progress=False, keep=True).trusted  # the whole check wrote them anew


def test_a_record_that_does_not_decode_is_named_and_not_used(snapshot, caplog):
    load_store(snapshot, progress=False, keep=True)
    (snapshot / RECORD).write_text("{not json")
    with caplog.at_level(logging.INFO, logger="docsrv"):
        assert not load_store(snapshot, progress=False, keep=True).trusted
    assert f"{RECORD}: not a record docsrv reads" in caplog.text


def test_records_changed_and_sealed_anew_are_checked_again_not_trusted(tmp_path, snapshot):
    load_store(snapshot, progress=False, keep=True)
    changed = sealed(tmp_path / "changed", "snap", edit=lambda d: edit_record(d / "versions.jsonl", 3, project=404))
    for name in (RECORD, RANGES):  # the old record beside the new files: the manifest differs
        shutil.copy(snapshot / name, changed / name)
    with pytest.raises(SnapshotError) as raised:
        load_store(changed, progress=False, keep=True)
    assert "versions.jsonl:3: version 3 names project 404, which does not exist" in str(raised.value)


def test_validate_checks_everything_whatever_was_checked_before(snapshot):
    load_store(snapshot, progress=False, keep=True)
    path = snapshot / "users.jsonl"
    stat = path.stat()
    data = path.read_bytes().replace(b"@", b"#", 1)
    path.write_bytes(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    result = docsrv("snapshot", "validate", str(snapshot))
    assert result.returncode == 1 and "users.jsonl: its SHA-256 differs" in result.stderr


def test_a_snapshot_where_no_record_can_be_written_keeps_none_and_prepare_says_so(snapshot):
    (snapshot / f"{RANGES}.partial").mkdir()  # the write fails, as on a read-only volume or a full disk
    with pytest.raises(OSError):
        load_store(snapshot, progress=False, keep=True)
    assert not (snapshot / RECORD).exists()
    assert not load_store(snapshot, progress=False).trusted  # a server's load still serves it, checked whole
    result = docsrv("snapshot", "prepare", str(snapshot))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and f"{RANGES}.partial" in result.stderr


def served_records(store):
    """Everything a store serves, as msgspec compares it: every list, grouping and lookup."""
    lookups = {
        "version_of": [store.version_of(v.project, v.slug) for v in store.versions_ordered],
        "builds_of_commit": [store.builds_where(commit=b.commit) for b in store.builds_ordered],
        "builds_of_project_commit": [store.builds_where(projects=[store.projects[b.project]], commit=b.commit) for b in store.builds_ordered],
        "unknown": (store.version_of(1, "no-such-version"), store.builds_where(commit="0" * 40)),
    }
    groupings = [{key: list(group) for key, group in grouping.items()}
                 for grouping in (store.versions_of_project, store.versions_by_active, store.versions_of_project_active,
                                  store.versions_by_slug, store.versions_by_slug_active, store.builds_of_project)]
    by_id = [dict(store.users), dict(store.projects), dict(store.versions), dict(store.builds), dict(store.pages)]
    return (list(store.users_ordered), list(store.projects_ordered), store.subprojects, list(store.versions_ordered),
            list(store.builds_ordered), list(store.pages_ordered), store.counts, groupings, lookups, by_id)


def seal_messagepack_as_it_is(snapshot):
    """A record of a check that lists the MessagePack files as they now are (as if another
    docsrv's bug had written them)."""
    from docsrv.snapshot.load import read_snapshot
    from docsrv.snapshot.verified import record_check
    from helpers import binary_paths

    raw = read_snapshot(snapshot, progress=False, page_text=False, trust=False)
    record_check(snapshot, raw.manifest_bytes, raw.identities, binary_paths(snapshot), raw.commands.ranges, raw.commands.total)


def test_records_known_right_are_kept_in_messagepack_and_decoded_from_there(snapshot):
    """Issue 25: a load without page text (a server whose index is current) keeps the records it
    knows are right in MessagePack; the next load of the same files decodes them, and serves
    exactly what the JSON Lines say."""
    from docsrv.snapshot.load import read_snapshot
    from helpers import binary_paths

    from_json = load_store(snapshot, progress=False, keep=True, page_text=False)
    assert all(path.exists() for path in binary_paths(snapshot))
    assert read_snapshot(snapshot, progress=False, page_text=False).binary
    again = load_store(snapshot, progress=False, keep=True, page_text=False)
    assert again.trusted and served_records(again) == served_records(from_json)
    # A load that wants the page text reads the JSON Lines: the MessagePack pages have none.
    assert not read_snapshot(snapshot, progress=False).binary


def test_records_are_kept_in_pieces_and_read_back_whole(snapshot, monkeypatch, caplog):
    """Each kind's records decoded at the load are written in pieces of DECODE_PIECE, decoded one
    at a time (a load's longest hold of the GIL, beside a sidecar's loop), and read back as the
    JSON Lines say."""

    from docsrv.snapshot import binary
    from docsrv.snapshot.records import Project

    monkeypatch.setattr(binary, "DECODE_PIECE", 3)
    from_json = load_store(snapshot, progress=False, keep=True, page_text=False)
    pieces = read_kept(binary.binary_path(snapshot, "projects"), Project).records
    assert [len(piece) for piece in pieces[:-1]] == [3] * (len(pieces) - 1) and 1 <= len(pieces[-1]) <= 3
    assert [project for piece in pieces for project in piece] == list(from_json.projects_ordered)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        again = load_store(snapshot, progress=False, page_text=False)
    assert again.trusted and served_records(again) == served_records(from_json) and not caplog.records


@pytest.mark.parametrize("piece", [3, 16384])
def test_messagepack_records_an_earlier_docsrv_wrote_in_one_array_are_read(snapshot, monkeypatch, caplog, piece):
    """The files of a layout before (each kind's records in one array) are still decoded, a
    piece at a time, not read again from the JSON Lines."""

    from docsrv.snapshot import binary

    expected = served_records(load_store(snapshot, progress=False, keep=True, page_text=False))
    for kind, cls in binary.BINARY_KINDS.items():
        path = binary.binary_path(snapshot, kind)
        served = read_kept(path, cls)
        flat = [record for records in served.records for record in records]
        path.write_bytes(earlier_file(binary.ONE_ARRAY_LAYOUT, flat, served.derived))
    seal_messagepack_as_it_is(snapshot)
    monkeypatch.setattr(binary, "DECODE_PIECE", piece)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        store = load_store(snapshot, progress=False, page_text=False)
    assert store.trusted and served_records(store) == expected and not caplog.records
    assert_written_again_by_a_prepare(snapshot, expected)


def test_messagepack_records_an_earlier_docsrv_wrote_as_arrays_of_pieces_are_read(snapshot, caplog):
    """The files of the layout before (each piece an array within the file's, walked through to
    find where the next begins): decoded as they are, not read again from the JSON Lines, and
    written again by a prepare."""

    from docsrv.snapshot import binary

    expected = served_records(load_store(snapshot, progress=False, keep=True, page_text=False))
    for kind, cls in binary.BINARY_KINDS.items():
        path = binary.binary_path(snapshot, kind)
        served = read_kept(path, cls)
        path.write_bytes(earlier_file(binary.PIECES_AS_ARRAYS_LAYOUT, served.records, served.derived))
    seal_messagepack_as_it_is(snapshot)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        store = load_store(snapshot, progress=False, page_text=False)
    assert store.trusted and served_records(store) == expected and not caplog.records
    assert_written_again_by_a_prepare(snapshot, expected)


def test_messagepack_records_an_earlier_docsrv_wrote_as_byte_pieces_are_read(snapshot, caplog):
    """The files of the layout before builds were decoded when read (every kind's pieces byte
    strings, decoded at the load; no count of the builds' commands): decoded as they are, not
    read again from the JSON Lines, and written again by a prepare."""
    import msgspec

    from docsrv.snapshot import binary

    expected = served_records(load_store(snapshot, progress=False, keep=True, page_text=False))
    for kind, cls in binary.BINARY_KINDS.items():
        path = binary.binary_path(snapshot, kind)
        served = read_kept(path, cls)
        pieces = [msgspec.msgpack.encode(piece) for piece in served.records]
        path.write_bytes(earlier_file(binary.BYTE_PIECES_LAYOUT, pieces, served.derived))
    seal_messagepack_as_it_is(snapshot)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        store = load_store(snapshot, progress=False, page_text=False)
    assert store.trusted and served_records(store) == expected and not caplog.records
    assert isinstance(store.versions, dict) and isinstance(store.builds, dict)  # decoded at the load, as the files were written for
    assert_written_again_by_a_prepare(snapshot, expected)


@pytest.mark.parametrize("kind", ["versions", "builds"])
def test_versions_and_builds_are_decoded_when_first_read_and_kept(snapshot, kind):
    """A trusted load decodes no version and no build: one is decoded when a request first reads
    it (by id, or in a list), then the same record is served from memory."""
    prepared = load_store(snapshot, progress=False, keep=True, page_text=False)
    store = load_store(snapshot, progress=False, page_text=False)
    by_id, expected = getattr(store, kind), getattr(prepared, kind)
    ordered, listed = getattr(store, f"{kind}_ordered"), list(getattr(prepared, f"{kind}_ordered"))
    decoded = by_id.records.decoded
    assert store.trusted and len(decoded) == len(expected) > 2 and decoded.count(1) == 0
    first, *rest = list(expected)
    assert by_id[first] == expected[first] and decoded.count(1) == 1
    assert by_id[first] is by_id.get(first) is ordered[listed.index(expected[first])]
    assert decoded.count(1) == 1
    assert [by_id.get(identity) for identity in rest] == [expected[identity] for identity in rest]
    assert decoded.count(1) == len(decoded)
    missing = max(expected) + 1
    assert missing not in by_id and by_id.get(missing) is None and 0 not in by_id
    with pytest.raises(KeyError):
        by_id[missing]


@pytest.mark.parametrize(("tamper", "why"), [
    ("starts out of order", "where its records start does not rise"),
    ("starts past the end", "where its records start is not where they are"),
    ("ids out of order", "its ids are not of its records"),
    ("place out of bounds", "its ids are not of its records"),
])
def test_builds_kept_with_starts_or_ids_that_do_not_fit_are_named_and_the_json_lines_read(snapshot, caplog, tamper, why):
    """Where each build starts, and the ids with their places, are checked at the load: one that
    does not fit its records would answer 500 (or another build) when that build is read. (The
    versions' file is read by the same code.)"""
    from array import array

    import msgspec

    from docsrv.snapshot.binary import ID, START, ServedRecords, binary_path
    from docsrv.utils.sequences import positions_of

    expected = served_records(load_store(snapshot, progress=False, keep=True, page_text=False))
    path = binary_path(snapshot, "builds")
    served = msgspec.msgpack.decode(path.read_bytes(), type=ServedRecords[bytes])
    starts, ids, places = array(START, served.starts), array(ID, served.ids), positions_of(served.places)
    if tamper == "starts out of order":
        starts[1], starts[2] = starts[2], starts[1]
    elif tamper == "starts past the end":
        starts[-1] += 1
    elif tamper == "ids out of order":
        ids[0], ids[1] = ids[1], ids[0]
    else:
        places[0] = len(places)
    path.write_bytes(msgspec.msgpack.encode(msgspec.structs.replace(
        served, starts=starts.tobytes(), ids=ids.tobytes(), places=places.tobytes())))
    seal_messagepack_as_it_is(snapshot)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        store = load_store(snapshot, progress=False, page_text=False)
    assert f"{path.name}: not the records docsrv wrote ({why}); reading the JSON Lines" in caplog.text
    assert served_records(store) == expected


def test_messagepack_records_without_the_pages_groupings_are_read_and_counted(snapshot, caplog):
    """The files of the layout before the pages' groupings by project and version: the store
    counts each one's pages itself, and a prepare writes the files again with them."""
    import msgspec

    from docsrv.snapshot import binary

    prepared = load_store(snapshot, progress=False, keep=True, page_text=False)
    expected, counts = served_records(prepared), (dict(prepared.projects_with_pages), dict(prepared.versions_with_pages))
    assert counts[0] and counts[1]
    for kind, cls in binary.BINARY_KINDS.items():
        path = binary.binary_path(snapshot, kind)
        served = read_kept(path, cls)
        groupings = {name: grouping for name, grouping in served.derived.groupings.items() if kind != "pages"}
        assert kind != "pages" or set(served.derived.groupings) == {"project", "version"}
        derived = binary.Derived(groupings, served.derived.orders)
        path.write_bytes(earlier_file(binary.UNGROUPED_PAGES_LAYOUT, served.records, derived))
    seal_messagepack_as_it_is(snapshot)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        store = load_store(snapshot, progress=False, page_text=False)
    assert store.trusted and served_records(store) == expected and not caplog.records
    assert (dict(store.projects_with_pages), dict(store.versions_with_pages)) == counts
    assert_written_again_by_a_prepare(snapshot, expected)
    pages = msgspec.msgpack.decode(binary.binary_path(snapshot, "pages").read_bytes(), type=binary.ServedRecords[msgspec.Raw])
    assert set(pages.derived.groupings) == {"project", "version"}


def assert_written_again_by_a_prepare(snapshot, expected) -> None:
    """A prepare writes the records in this docsrv's layout, and seals them anew."""
    import msgspec

    from docsrv.snapshot import binary

    prepared = load_store(snapshot, progress=False, page_text=False, keep=True)
    assert prepared.trusted and served_records(prepared) == expected
    for kind in binary.BINARY_KINDS:
        found = msgspec.msgpack.decode(binary.binary_path(snapshot, kind).read_bytes(), type=binary.ServedRecords[msgspec.Raw])
        assert found.layout_version == binary.LAYOUT_VERSION
    assert load_store(snapshot, progress=False, page_text=False).trusted


def test_messagepack_records_of_another_layout_are_named_and_the_json_lines_read(snapshot, caplog):
    import msgspec

    from docsrv.snapshot import binary
    from docsrv.snapshot.records import Project

    expected = served_records(load_store(snapshot, progress=False, keep=True, page_text=False))
    path = binary.binary_path(snapshot, "projects")
    write_kept(path, msgspec.structs.replace(read_kept(path, Project), layout_version=1))
    seal_messagepack_as_it_is(snapshot)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        store = load_store(snapshot, progress=False, page_text=False)
    assert f"{path.name}: not the records docsrv wrote (layout version 1, not {binary.LAYOUT_VERSION}); reading the JSON Lines" in caplog.text
    assert served_records(store) == expected


def test_a_messagepack_file_changed_since_the_check_is_named_and_not_used(snapshot, caplog):
    from docsrv.snapshot.binary import binary_path
    from docsrv.snapshot.load import read_snapshot

    load_store(snapshot, progress=False, keep=True, page_text=False)
    builds = binary_path(snapshot, "builds")
    builds.write_bytes(builds.read_bytes())  # the same bytes, but written since the check
    with caplog.at_level(logging.INFO, logger="docsrv"):
        store = load_store(snapshot, progress=False, keep=True, page_text=False)
    assert not store.trusted and f"{RECORD} does not match {builds.name}" in caplog.text
    assert read_snapshot(snapshot, progress=False, page_text=False).binary  # checked whole, written anew


def test_a_messagepack_file_that_does_not_decode_is_named_and_the_json_lines_read(snapshot, caplog):
    """As if another docsrv's bug had written it and listed it: never served from, and replaced."""
    from docsrv.snapshot.binary import binary_path
    from docsrv.snapshot.load import read_snapshot

    expected = served_records(load_store(snapshot, progress=False, keep=True, page_text=False))
    versions = binary_path(snapshot, "versions")
    versions.write_bytes(b"\x92\x01\x02")  # MessagePack, but two numbers, not versions
    seal_messagepack_as_it_is(snapshot)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        store = load_store(snapshot, progress=False, keep=True, page_text=False)
    assert f"{versions.name}: not the records docsrv wrote" in caplog.text
    assert store.trusted and served_records(store) == expected
    assert read_snapshot(snapshot, progress=False, page_text=False).binary  # written anew


def test_a_grouping_that_does_not_fit_its_records_is_named_and_not_used(snapshot, caplog):
    """Positions of another number of records (as if written for other files and sealed): the
    file is named, and the records are read from the JSON Lines and grouped anew."""
    import msgspec

    from docsrv.snapshot.binary import binary_path
    from docsrv.snapshot.records import Version

    expected = served_records(load_store(snapshot, progress=False, keep=True, page_text=False))
    path = binary_path(snapshot, "versions")
    served = read_kept(path, Version)
    grouping = served.derived.groupings["project"]
    served.derived.groupings["project"] = msgspec.structs.replace(grouping, order=grouping.order[:-4])
    write_kept(path, served)
    seal_messagepack_as_it_is(snapshot)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        store = load_store(snapshot, progress=False, keep=True, page_text=False)
    assert f"{path.name}: not the records docsrv wrote (its grouping 'project' is of other records)" in caplog.text
    assert store.trusted and served_records(store) == expected


def test_messagepack_records_of_older_files_are_never_used(tmp_path, snapshot):
    """Records changed and sealed anew: the old MessagePack beside them is not read."""
    load_store(snapshot, progress=False, keep=True, page_text=False)
    changed = sealed(tmp_path / "changed", "snap", edit=lambda d: edit_record(d / "projects.jsonl", 1, name="Renamed"))
    for path in snapshot.glob(".docsrv-*"):
        shutil.copy(path, changed / path.name)
    store = load_store(changed, progress=False, keep=True, page_text=False)
    assert not store.trusted and store.projects[1].name == "Renamed"
    assert load_store(changed, progress=False, keep=True, page_text=False).projects[1].name == "Renamed"


def test_a_snapshot_where_no_messagepack_can_be_written_loads_from_json_lines(snapshot):
    """A full disk or a read-only volume: the records are not kept in MessagePack, the record of
    the check lists none, and every load reads the JSON Lines and serves the same."""
    from docsrv.snapshot.binary import binary_path
    from docsrv.snapshot.load import read_snapshot

    binary_path(snapshot, "builds").with_name(binary_path(snapshot, "builds").name + ".partial").mkdir()  # the write fails
    with pytest.raises(OSError):
        load_store(snapshot, progress=False, keep=True, page_text=False)
    assert not binary_path(snapshot, "builds").exists() and not (snapshot / RECORD).exists()
    first = load_store(snapshot, progress=False, page_text=False)
    assert not read_snapshot(snapshot, progress=False, page_text=False).binary
    again = load_store(snapshot, progress=False, page_text=False)
    assert not again.trusted and served_records(again) == served_records(first)


@given(keys=st.lists(st.sampled_from([1, 2, 3, "a", "b", True, (1, False), ("a", True)]), max_size=40))
def test_groupings_and_sorted_orders_read_back_give_each_key_its_items_in_order(keys):
    """What the store keeps as positions (utils/sequences.py), written and read back in
    MessagePack, gives what grouping the items in order would: each key's items, in their order."""
    import msgspec

    from docsrv.utils import sequences as positions_module
    from docsrv.utils.sequences import Grouping, SortedOrder

    items = [(key, position) for position, key in enumerate(keys)]
    expected: dict = {}
    for item in items:
        expected.setdefault(item[0], []).append(item)
    grouping = msgspec.msgpack.decode(msgspec.msgpack.encode(Grouping.of(keys)), type=Grouping)
    assert grouping.sizes() == {key: len(group) for key, group in expected.items()}
    for chunk in (positions_module.CHUNK, 2):  # a long group in pieces that are views of the positions
        with mock.patch.object(positions_module, "CHUNK", chunk):
            groups = grouping.groups(items)
            assert len(groups) == len(expected) and list(groups) == list(expected)
            assert {key: list(group) for key, group in groups.items()} == expected
            assert all(groups[key][1:] == expected[key][1:] and groups[key][-1] == expected[key][-1] for key in expected)
        assert "c" not in groups and groups.get("c", ()) == ()
    comparable = [key for key in expected if isinstance(key, str)]
    texts = [item for item in items if isinstance(item[0], str)]
    order = SortedOrder(texts, lambda item: item[0])
    again = SortedOrder(texts, lambda item: item[0], order.order)
    for key in [*comparable, "", "c"]:
        assert again.find(key) == expected.get(key, [])
        assert again.first(key) == (expected[key][0] if key in expected else None)


@pytest.fixture
def indexed(snapshot):
    """The snapshot as a publisher leaves it: `docsrv index` built and sealed its index, and the
    private records of that load's check removed (as a pull or a copy would not have them)."""
    result = docsrv("index", str(snapshot))
    assert result.returncode == 0, result.stderr
    for path in snapshot.glob(".docsrv-*"):
        path.unlink()
    return snapshot


def scans(monkeypatch):
    """Count the scans of the build commands a load makes."""
    import docsrv.snapshot.load as load

    made = []
    scan = load.index_commands
    monkeypatch.setattr(load, "index_commands", lambda *args, **kwargs: made.append(1) or scan(*args, **kwargs))
    return made


def test_a_first_load_uses_the_command_ranges_the_publisher_sealed(indexed, monkeypatch):
    """Issue 25: `docsrv index` publishes its scan of the build commands; a first load (digests
    checked, no record of its own) does not scan them again, and serves every build's commands."""
    import json

    from docsrv.snapshot.published import PUBLISHED_RANGES

    assert PUBLISHED_RANGES in json.loads((indexed / "manifest.json").read_text())["index"]
    made = scans(monkeypatch)
    store = load_store(indexed, progress=False, keep=True)
    assert made == [] and not store.trusted
    rescanned = load_store(indexed, progress=False, keep=True, trust=False)  # `snapshot validate`: everything
    assert made == [1]
    assert commands_of_every_build(store) == commands_of_every_build(rescanned)
    assert store.counts["build_commands"] == rescanned.counts["build_commands"] > 0


def test_published_ranges_of_other_records_are_named_and_the_commands_scanned(indexed, monkeypatch, caplog):
    """Builds changed and the manifest sealed anew, the index not rebuilt: the ranges name the old
    builds' digest, so they are not used."""
    import msgspec

    from docsrv.snapshot.records import Manifest
    from docsrv.snapshot.write import write_manifest

    edit_record(indexed / "builds.jsonl", 1, success=False)
    write_manifest(indexed, msgspec.json.decode((indexed / "manifest.json").read_bytes(), type=Manifest))
    made = scans(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        load_store(indexed, progress=False, keep=True)
    assert made == [1]
    assert "index/command-ranges: made from other build_commands.jsonl or builds.jsonl; scanning build_commands.jsonl" in caplog.text


def test_published_ranges_that_differ_from_their_digest_are_named_and_not_used(indexed, monkeypatch, caplog):
    from docsrv.snapshot.published import PUBLISHED_RANGES

    path = indexed / "index" / PUBLISHED_RANGES
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    made = scans(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        load_store(indexed, progress=False, keep=True)
    assert made == [1]
    assert "index/command-ranges: its SHA-256 differs from the one manifest.json records; scanning" in caplog.text


def rewrite_in_place(path, old: bytes, new: bytes) -> None:
    """Change a file's bytes without changing its size or its inode (a write into the file)."""
    assert len(old) == len(new)
    with open(path, "r+b") as file:
        data = file.read()
        file.seek(data.index(old))
        file.write(new)


def test_a_file_rewritten_while_it_is_checked_gets_no_record(snapshot, monkeypatch):
    """Hardening round four, finding 1: a write that lands after the check read the file (here
    between the MessagePack write and the record, where it was found) leaves no record, so the
    next load checks the file whole and finds the change, instead of trusting it."""
    import docsrv.store.loaded

    write_binary = docsrv.store.loaded.write_binary

    def racing_write(*args, **kwargs):
        written = write_binary(*args, **kwargs)
        rewrite_in_place(snapshot / "build_commands.jsonl", b'"exit_code":0', b'"exit_code":7')
        return written

    monkeypatch.setattr(docsrv.store.loaded, "write_binary", racing_write)
    with pytest.raises(SnapshotError) as raised:
        load_store(snapshot, progress=False, keep=True, page_text=False)
    assert "build_commands.jsonl: changed while it was being checked: no record of the check is kept" in str(raised.value)
    assert not (snapshot / RECORD).exists()
    with pytest.raises(SnapshotError) as raised:
        load_store(snapshot, progress=False, page_text=False)
    assert "build_commands.jsonl: its SHA-256 differs from the one manifest.json records" in str(raised.value)


def test_a_server_load_writes_nothing_and_says_how_to_prepare(snapshot, caplog):
    """A server only reads a snapshot: without a record of a check it checks it whole, names the
    command that prepares it, and leaves the directory as it was."""
    before = sorted(path.name for path in snapshot.iterdir())
    with caplog.at_level(logging.INFO, logger="docsrv"):
        store = load_store(snapshot, progress=False, page_text=False)
    assert not store.trusted and sorted(path.name for path in snapshot.iterdir()) == before
    assert f"{snapshot} is not prepared (no record of a check of these files): checked whole in " in caplog.text
    assert f"`docsrv snapshot prepare {snapshot}` where it can be written spares that at every start" in caplog.text
    result = docsrv("snapshot", "prepare", str(snapshot))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"prepared {snapshot} for serving (checked whole; ")
    assert load_store(snapshot, progress=False, page_text=False).trusted
    again = docsrv("snapshot", "prepare", str(snapshot))
    assert again.stdout.startswith(f"prepared {snapshot} for serving (a record of an earlier check stands; ")


def test_synth_then_index_leaves_a_snapshot_a_server_trusts(tmp_path):
    """`docsrv index` rewrites manifest.json (it lists the index): the record of its check, and
    the records in MessagePack, are left valid for the manifest it wrote."""
    from docsrv.snapshot.load import read_snapshot

    snapshot = tmp_path / "fresh"
    assert docsrv("snapshot", "synth", "--scale", "demo", "--out", str(snapshot)).returncode == 0
    result = docsrv("index", str(snapshot))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith(f"prepared {snapshot} for serving (a record of an earlier check stands; ")
    raw = read_snapshot(snapshot, progress=False, page_text=False)
    assert raw.trusted and raw.binary


def published_table(indexed):
    import msgspec

    from docsrv.snapshot.published import PUBLISHED_RANGES, PublishedRanges

    path = indexed / "index" / PUBLISHED_RANGES
    return path, msgspec.msgpack.decode(path.read_bytes(), type=PublishedRanges)


def reseal_ranges(indexed, published, table) -> None:
    """Publish other ranges, sealed as the publisher seals them (the manifest's digest matches)."""
    from array import array

    import msgspec

    from docsrv.snapshot.write import seal_index

    path, _ = published_table(indexed)
    path.write_bytes(msgspec.msgpack.encode(msgspec.structs.replace(published, table=array("q", table).tobytes())))
    seal_index(indexed, indexed / "index")


def test_published_ranges_pointed_at_another_build_never_serve_its_commands(indexed):
    """Finding 5: an origin re-points a public build's range at another build's lines, and seals
    it anew. Lines of another build are never served as the build's."""
    from array import array

    from docsrv.snapshot.commands import CommandRanges

    clean = load_store(indexed, progress=False, trust=False)
    _path, published = published_table(indexed)
    table = array("q", published.table)
    ranges = CommandRanges(table)
    public, other = clean.builds_ordered[0].id, clean.builds_ordered[1].id
    row, other_row = 4 * ranges._ids.index(public), 4 * ranges._ids.index(other)
    table[row + 1 : row + 4] = table[other_row + 1 : other_row + 4]
    reseal_ranges(indexed, published, table)
    store = load_store(indexed, progress=False)
    assert store.commands_of(store.builds[public]) == []
    assert [c.id for c in store.commands_of(store.builds[other])] == [c.id for c in clean.commands_of(clean.builds[other])]


@pytest.mark.parametrize(("damage", "why"), [
    (lambda row, size: (row[1] + 5, row[1]), "a range runs backwards or past the end of build_commands.jsonl ({size} bytes)"),
    (lambda row, size: (row[0], size + 100), "a range runs backwards or past the end of build_commands.jsonl ({size} bytes)"),
    (lambda row, size: (row[0] + 3, row[1]), "a range starts or ends inside a line of build_commands.jsonl"),
    (lambda row, size: (row[0], row[1] - 2), "a range starts or ends inside a line of build_commands.jsonl"),
])
def test_published_ranges_out_of_their_file_are_named_and_the_commands_scanned(indexed, monkeypatch, caplog, damage, why):
    """Finding 5: ranges that run backwards, past the file, or start or end mid-line answered 500;
    they are checked at load, named, and the commands scanned."""
    from array import array

    clean = load_store(indexed, progress=False, trust=False)
    _path, published = published_table(indexed)
    table = array("q", published.table)
    row = 4  # the second build's
    size = (indexed / "build_commands.jsonl").stat().st_size
    table[row + 1], table[row + 2] = damage((table[row + 1], table[row + 2]), size)
    reseal_ranges(indexed, published, table)
    made = scans(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        store = load_store(indexed, progress=False)
    assert made == [1]
    assert f"index/command-ranges: {why.format(size=size)}; scanning build_commands.jsonl" in caplog.text
    assert commands_of_every_build(store) == commands_of_every_build(clean)


@pytest.mark.parametrize("tamper", ["out of bounds", "ends out of order"])
def test_messagepack_positions_out_of_bounds_are_named_and_the_json_lines_read(snapshot, caplog, tamper):
    """Finding 8: positions in the MessagePack files are scanned at load; out of bounds, the files
    are named and the JSON Lines read (and nothing answers 500)."""
    import msgspec

    from docsrv.snapshot.binary import binary_path
    from docsrv.snapshot.records import Build
    from docsrv.utils.sequences import positions, positions_of

    expected = served_records(load_store(snapshot, progress=False, keep=True, page_text=False))
    path = binary_path(snapshot, "builds")
    served = read_kept(path, Build)
    grouping = served.derived.groupings["project"]
    if tamper == "out of bounds":
        order = positions_of(grouping.order)
        order[0] = sum(map(len, served.records)) + 1000
        grouping = msgspec.structs.replace(grouping, order=order.tobytes())
    else:
        ends = list(positions_of(grouping.ends))
        ends[0], ends[1] = ends[1], ends[0]
        grouping = msgspec.structs.replace(grouping, ends=positions(ends))
    served.derived.groupings["project"] = grouping
    write_kept(path, served)
    seal_messagepack_as_it_is(snapshot)
    with caplog.at_level(logging.WARNING, logger="docsrv"):
        store = load_store(snapshot, progress=False, page_text=False)
    assert f"{path.name}: not the records docsrv wrote (its grouping 'project' has positions out of bounds); reading the JSON Lines" in caplog.text
    assert served_records(store) == expected
