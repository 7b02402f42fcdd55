"""``docsrv snapshot follow``: the service's database followed by logical replication, against a
real Postgres (``source_db.py``) holding the service's tables, started as a separate process as
an operator starts it. What it publishes is read back as a replica would take it (each changeset
applied to the base by ``snapshot/changeset.apply``) and compared with ``import-dump`` of what
Django's ``dumpdata`` writes of the same rows."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import msgspec
import psycopg2
import pytest

from conftest import ROOT, free_port
from docsrv.snapshot.changeset import apply, read_listed
from docsrv.snapshot.origin import Head, PublishedChangeset
from docsrv.snapshot.records import KINDS
from docsrv.source import pgoutput
from helpers import Origin, docsrv, poll
from source_db import Cluster, dumpdata, load_dump, running_cluster

FIXTURE = ROOT / "tests" / "fixtures" / "rtd@2017.json"


@pytest.fixture(scope="module")
def cluster():
    with running_cluster(free_port()) as started:
        yield started


@pytest.fixture
def name(request) -> str:
    """A name of this test's own, for its database, slot and publication (slots are the cluster's)."""
    return f"t{uuid.uuid4().hex[:8]}_" + re.sub(r"\W", "_", request.node.name.lower())[:40]


@pytest.fixture
def service(cluster, name) -> str:
    """A database of the service's tables holding the fixture's rows: its DSN."""
    dsn = cluster.database(name)
    load_dump(dsn, FIXTURE)
    # Pages enough that the changesets of a test stay under a quarter of the base: none is
    # published whole for its size (which the tests of publishing cover).
    sql(dsn, "INSERT INTO projects_importedfile (project_id, version_id, name, slug, path, md5) "
             "SELECT 1, 1, 'page' || i, 'page' || i, 'guide/page-' || i || '.html', '' FROM generate_series(1, 5000) AS i")
    return dsn


def sql(dsn: str, *statements: str, fetch: bool = False):
    """Run ``statements`` in one transaction; the last one's rows with ``fetch``."""
    with contextlib.closing(psycopg2.connect(dsn)) as connection, connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
        found = cursor.fetchall() if fetch else None
        connection.commit()
    return found


class Follower:
    """``docsrv snapshot follow`` as a process of its own; ``wrapper``: Python run in the process
    before the follower starts (to stop it at a chosen point)."""

    def __init__(self, dsn: str, origin: Path, slot: str, log: Path) -> None:
        self.dsn, self.origin, self.slot, self.log_path = dsn, origin, slot, log
        self.process: subprocess.Popen | None = None

    def start(self, wrapper: str = "", *, file_bytes: int | None = None, options: tuple[str, ...] = ()) -> Follower:
        """Started; ``file_bytes``: no file it writes may grow past that many bytes (as on a full disk)."""
        arguments = ["snapshot", "follow", self.dsn, str(self.origin), "--slot", self.slot, "--publication", self.slot, "--window", "0.05",
                     *options]
        code = f"import sys; {wrapper}\nfrom docsrv.cli import main; sys.exit(main({arguments!r}))"

        def limited() -> None:
            if file_bytes is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))

        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=log, stderr=log, preexec_fn=limited)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def wait(self) -> int:
        assert self.process is not None
        return self.process.wait(60)

    @property
    def log(self) -> str:
        return self.log_path.read_text()


@pytest.fixture
def follower(service, tmp_path, name):
    found = Follower(service, tmp_path / "origin", name, tmp_path / "follow.log")
    yield found
    found.stop()
    # Its slot goes with it: the cluster's slots are few, and each holds WAL back.
    poll(lambda: not sql(service, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = "
                                  f"'{name}' AND NOT active", f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{name}'",
                         fetch=True), what=f"slot {name} dropped")


def head(origin: Path) -> dict | None:
    try:
        return json.loads((origin / "head.json").read_text())
    except FileNotFoundError:
        return None


def published(origin: Path, work: Path, now: dict | None = None) -> Path:
    """The snapshot the origin publishes now (or as its head ``now`` lists it), made as a replica
    makes it: its base with each changeset after it applied."""
    now = now if now is not None else head(origin)
    assert now is not None
    current = origin / "snapshots" / now["base"]
    for entry in now["changesets"]:
        path = origin / "changesets" / f"{entry['sequence']}.jsonl"
        changeset = read_listed(path.read_bytes(), msgspec.convert(entry, PublishedChangeset), str(path))
        product = work / f"{entry['sequence']}-{uuid.uuid4().hex[:6]}"
        product.mkdir(parents=True)
        apply(changeset, current, product)
        current = product
    return current


def records(snapshot: Path) -> dict[str, dict[int, dict]]:
    found: dict[str, dict[int, dict]] = {}
    for kind in KINDS:
        path = snapshot / f"{kind}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        found[kind] = {record["id"]: record for record in map(json.loads, lines)}
    return found


def imported(dsn: str, work: Path) -> dict[str, dict[int, dict]]:
    """The records ``import-dump`` makes of a ``dumpdata`` of the database as it is now."""
    tag = uuid.uuid4().hex[:6]
    dump = dumpdata(dsn, work / f"dump-{tag}.json")
    out = work / f"imported-{tag}"
    result = docsrv("snapshot", "import-dump", str(dump), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return records(out)


def serves_the_database(follower: Follower, work: Path, timeout: float = 30.0) -> dict:
    """Poll until what the origin publishes is what an import of the database's rows makes; those records."""
    expected = imported(follower.dsn, work)
    compared: set[bytes] = set()

    def equal() -> bool:
        """Whether the origin's files are those rows, read again only when its head changed (what it
        lists is never written again)."""
        try:
            listed = (follower.origin / "head.json").read_bytes()
        except FileNotFoundError:
            return False
        if listed in compared:
            return False
        compared.add(listed)
        return records(published(follower.origin, work, json.loads(listed))) == expected

    poll(equal, timeout, what=lambda: f"origin equal to an import of the database's rows; log:\n{follower.log}")
    return expected


def changesets(origin: Path) -> list[list[dict]]:
    """The change lines of every changeset the origin lists, in order."""
    now = head(origin)
    assert now is not None
    found = []
    for entry in [*now.get("leading", []), *now["changesets"]]:
        lines = (origin / "changesets" / f"{entry['sequence']}.jsonl").read_text().splitlines()
        found.append([json.loads(line) for line in lines[1:]])
    return found


# The decoder, on what a real server sends.


def test_pgoutput_messages_are_decoded_as_a_real_server_sends_them(cluster, name):
    dsn = cluster.database(name)
    big = "".join(uuid.UUID(int=i * 7919).hex for i in range(1000))  # 32 kB that compress poorly: stored out of line
    sql(dsn, f"CREATE PUBLICATION {name} FOR TABLE builds_build")
    sql(dsn, f"SELECT pg_create_logical_replication_slot('{name}', 'pgoutput')")
    sql(dsn, "INSERT INTO projects_project (id, pub_date, modified_date, name, slug, privacy_level) VALUES (7, now(), now(), 'P', 'p', 'public')",
        "INSERT INTO builds_version (id, project_id, slug, verbose_name) VALUES (8, 7, 'latest', 'latest')",
        f"INSERT INTO builds_build (id, project_id, version_id, state, date, success, output, error, length) "
        f"VALUES (9, 7, 8, 'triggered', '2026-01-02 03:04:05.678901+00', true, '{big}', 'it''s', NULL)")
    sql(dsn, "UPDATE builds_build SET state = 'finished' WHERE id = 9")
    sql(dsn, "DELETE FROM builds_build WHERE id = 9")
    sql(dsn, "TRUNCATE builds_build CASCADE")
    rows = sql(dsn, f"SELECT data FROM pg_logical_slot_get_binary_changes('{name}', NULL, NULL, 'proto_version', '1', "
                    f"'publication_names', '{name}')", fetch=True)
    messages = [pgoutput.decode(bytes(row[0])) for row in rows]
    assert [type(m).__name__ for m in messages] == [
        "Begin", "Relation", "Insert", "Commit", "Begin", "Update", "Commit", "Begin", "Delete", "Commit", "Begin", "Relation",
        "Truncate", "Commit"]
    relation = messages[1]
    assert (relation.namespace, relation.name, relation.replica_identity) == ("public", "builds_build", "d")
    columns = {column.name: column for column in relation.columns}
    assert [c.name for c in relation.columns if c.key] == ["id"]
    assert (columns["id"].type_oid, columns["output"].type_oid, columns["success"].type_oid, columns["date"].type_oid) == (23, 25, 16, 1184)
    at = {column.name: place for place, column in enumerate(relation.columns)}
    inserted = messages[2].new
    assert inserted[at["id"]] == "9" and inserted[at["state"]] == "triggered" and inserted[at["output"]] == big
    assert inserted[at["error"]] == "it's" and inserted[at["length"]] is None and inserted[at["success"]] == "t"
    assert inserted[at["date"]] == "2026-01-02 03:04:05.678901+00"
    updated = messages[5]
    assert updated.old is None and updated.new[at["state"]] == "finished"
    assert updated.new[at["output"]] is pgoutput.UNCHANGED  # the TOASTed value the update left as it was
    deleted = messages[8].old
    assert deleted[at["id"]] == "9" and all(value is None for place, value in enumerate(deleted) if place != at["id"])
    assert messages[12].relation_ids == (relation.relation_id,) and messages[12].cascade
    begin, commit = messages[0], messages[3]
    assert begin.final_lsn == commit.lsn and commit.end_lsn > commit.lsn and begin.committed_at == commit.committed_at
    assert pgoutput.lsn_of(pgoutput.lsn_text(commit.end_lsn)) == commit.end_lsn


@pytest.mark.parametrize("data, problem", [
    (b"", "an empty message"),
    (b"X", "not one protocol version 1 sends"),
    (b"I\x00\x00\x00\x01N\x00\x01t\x00\x00\x00\x09ab", "past its end"),
    (b"C\x00\x00", "cut short"),
    (b"I\x00\x00\x00\x01N\x00\x01b\x00\x00\x00\x01a", "kind 'b'"),
])
def test_a_message_that_is_not_pgoutput_is_refused_in_one_line(data, problem):
    with pytest.raises(pgoutput.DecodeError, match=re.escape(problem)):
        pgoutput.decode(data)


# The setup an operator runs.


def test_print_setup_makes_a_publication_of_mapped_columns_and_a_role_that_follows(cluster, name, tmp_path):
    dsn = cluster.database(name)
    load_dump(dsn, FIXTURE)
    result = docsrv("snapshot", "follow", dsn, "--print-setup", "--publication", name, "--slot", name)
    assert result.returncode == 0, result.stderr
    role = f"{name}_role"
    setup = result.stdout.replace('"docsrv_follower"', f'"{role}"').replace("choose-one", "secret")
    sql(dsn, f"DROP ROLE IF EXISTS {role}", setup)
    streamed = dict(sql(dsn, f"SELECT tablename, attnames FROM pg_publication_tables WHERE pubname = '{name}'", fetch=True))
    assert streamed["auth_user"] == ["id", "username", "first_name", "last_name", "email"]  # no password, no flags
    assert "latest_build_id" not in streamed["projects_project"] and "copyright" in streamed["projects_project"]
    role_dsn = f"{cluster.dsn(name)} user={role}"
    with pytest.raises(psycopg2.errors.InsufficientPrivilege):
        sql(role_dsn, "SELECT password FROM auth_user")
    following = Follower(role_dsn, tmp_path / "origin", name, tmp_path / "follow.log").start()
    try:
        poll(lambda: head(following.origin) is not None, what=lambda: f"a base; log:\n{following.log}")
        sql(dsn, "UPDATE auth_user SET username = 'renamed' WHERE id = 1")
        poll(lambda: records(published(following.origin, tmp_path))["users"][1]["username"] == "renamed",
             what=lambda: f"the rename; log:\n{following.log}")
        assert records(published(following.origin, tmp_path)) == imported(dsn, tmp_path)
    finally:
        following.stop()


def test_without_a_publication_or_the_right_to_make_one_the_follower_stops_pointing_to_the_setup(cluster, name, tmp_path):
    dsn = cluster.database(name)
    role = f"{name}_role"
    sql(dsn, f"DROP ROLE IF EXISTS {role}", f"CREATE ROLE {role} LOGIN REPLICATION", f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    following = Follower(f"{cluster.dsn(name)} user={role}", tmp_path / "origin", name, tmp_path / "follow.log").start()
    assert following.wait() == 1
    assert following.log.strip().splitlines()[-1] == (
        f"docsrv: publication {name} does not exist, and this role cannot make it (permission denied for database {name}): "
        "run the SQL that `docsrv snapshot follow --print-setup` prints")
    assert head(following.origin) is None


# The base, and each commit after it.


def test_the_base_is_what_an_import_of_a_dump_of_the_same_rows_makes(follower, tmp_path):
    follower.start()
    expected = serves_the_database(follower, tmp_path)
    assert len(expected["projects"]) == 4 and len(expected["builds"]) == 5  # the fixture's, as the import keeps them
    poll(lambda: "published base" in follower.log)
    assert "made publication" in follower.log
    assert head(follower.origin)["source_lsn"]


def test_each_commit_is_published_as_one_changeset_and_the_origin_serves_the_database(follower, tmp_path):
    follower.start()
    serves_the_database(follower, tmp_path)
    dsn = follower.dsn
    # A build through its states, with its commands.
    sql(dsn, "INSERT INTO builds_build (id, project_id, version_id, type, state, date, success, output, error, commit) "
             "VALUES (500, 1, 1, 'html', 'triggered', '2026-11-27 10:00:00.123456+00', true, '', '', 'abc')")
    sql(dsn, "UPDATE builds_build SET state = 'building' WHERE id = 500",
        "INSERT INTO builds_buildcommandresult (build_id, command, description, output, exit_code, start_time, end_time) "
        "VALUES (500, 'git clone', '', 'ok', 0, '2026-11-27 10:00:01+00', '2026-11-27 10:00:02+00')")
    sql(dsn, "UPDATE builds_build SET state = 'finished', length = 42 WHERE id = 500")
    expected = serves_the_database(follower, tmp_path)
    version = next(v["id"] for v in expected["versions"].values() if v["privacy_level"] == "public" and v["id"] != 1)
    before = len(changesets(follower.origin))
    # The service moves projects_project.latest_build_id on every build: nothing served changes.
    sql(dsn, "UPDATE projects_project SET latest_build_id = 500 WHERE id = 1")
    # A project edited, a version made private, a user renamed: one transaction, one changeset.
    sql(dsn, "UPDATE projects_project SET description = 'Edited.' WHERE id = 1",
        f"UPDATE builds_version SET privacy_level = 'private' WHERE id = {version}",
        "UPDATE auth_user SET username = 'someone-else' WHERE id = 1")
    expected = serves_the_database(follower, tmp_path)
    assert expected["projects"][1]["description"] == "Edited." and expected["users"][1]["username"] == "someone-else"
    assert len(changesets(follower.origin)) == before + 1
    assert sorted((line["kind"], line["record"]["id"]) for line in changesets(follower.origin)[-1]) == [
        ("projects", 1), ("users", 1), ("versions", version)]
    # A Django cascade: children row by row, then the parent, in one transaction.
    versions = "(SELECT id FROM builds_version WHERE project_id = 1)"
    sql(dsn, f"DELETE FROM builds_buildcommandresult WHERE build_id IN (SELECT id FROM builds_build WHERE project_id = 1 "
             f"OR version_id IN {versions})",
        f"DELETE FROM builds_build WHERE project_id = 1 OR version_id IN {versions}",
        f"DELETE FROM projects_importedfile WHERE project_id = 1 OR version_id IN {versions}",
        "DELETE FROM projects_projectrelationship WHERE parent_id = 1 OR child_id = 1",
        "DELETE FROM builds_version WHERE project_id = 1",
        "DELETE FROM projects_project_users WHERE project_id = 1",
        "DELETE FROM projects_project WHERE id = 1")
    expected = serves_the_database(follower, tmp_path)
    assert 1 not in expected["projects"]
    last = changesets(follower.origin)[-1]
    assert len(changesets(follower.origin)) == before + 2 and {"op": "delete", "kind": "projects", "id": 1} in last
    assert all(line["op"] == "delete" for line in last)
    now = head(follower.origin)
    last_entry = [*now.get("leading", []), *now["changesets"]][-1]  # published whole too, if it made the changesets too large
    header = json.loads((follower.origin / "changesets" / f"{last_entry['sequence']}.jsonl").read_text().splitlines()[0])
    assert header["source_lsn"] == head(follower.origin)["source_lsn"] and header["committed_at"].endswith("Z")
    assert "project-umbrella" in header["purge_keys"] and header["unmoved"] is True and "in_place" not in header  # it held pages


def test_a_commit_after_a_quiet_window_is_published_without_waiting_for_the_window(follower, tmp_path):
    """The window spaces changesets out; it does not hold back a commit that comes after a quiet
    one: with an hour's window, the first commit after the base is still published at once."""
    follower.start(options=("--window", "3600"))
    serves_the_database(follower, tmp_path)
    before = len(changesets(follower.origin))
    sql(follower.dsn, "UPDATE auth_user SET username = 'at-once' WHERE id = 1")
    poll(lambda: len(changesets(follower.origin)) == before + 1, what=lambda: f"the commit published; log:\n{follower.log}")
    assert [(line["kind"], line["record"]["username"]) for line in changesets(follower.origin)[-1]] == [("users", "at-once")]


def test_commits_within_a_window_of_the_last_changeset_share_the_next_one(follower, tmp_path):
    follower.start(options=("--window", "2"))
    serves_the_database(follower, tmp_path)
    before = len(changesets(follower.origin))
    sql(follower.dsn, "UPDATE auth_user SET username = 'first' WHERE id = 1")
    poll(lambda: len(changesets(follower.origin)) == before + 1, what=lambda: f"the first commit published; log:\n{follower.log}")
    sql(follower.dsn, "UPDATE auth_user SET username = 'second' WHERE id = 1")
    sql(follower.dsn, "UPDATE projects_project SET description = 'Second.' WHERE id = 1")
    expected = serves_the_database(follower, tmp_path)
    assert expected["users"][1]["username"] == "second" and expected["projects"][1]["description"] == "Second."
    assert len(changesets(follower.origin)) == before + 2
    assert sorted((line["kind"], line["record"]["id"]) for line in changesets(follower.origin)[-1]) == [("projects", 1), ("users", 1)]


def test_a_key_only_delete_of_a_projects_user_takes_the_user_out_of_its_project(follower, tmp_path):
    follower.start()
    expected = serves_the_database(follower, tmp_path)
    project, user = next((p["id"], p["users"][0]) for p in expected["projects"].values() if p["users"])
    sql(follower.dsn, f"DELETE FROM projects_project_users WHERE project_id = {project} AND user_id = {user}")
    expected = serves_the_database(follower, tmp_path)
    assert user not in expected["projects"][project]["users"]
    follower.stop()  # started again, it knows the rows of project users it kept
    follower.start()
    poll(lambda: follower.log.count("following slot") == 2, what=lambda: f"a second start; log:\n{follower.log}")
    sql(follower.dsn, f"INSERT INTO projects_project_users (project_id, user_id) VALUES ({project}, {user})")
    sql(follower.dsn, f"DELETE FROM projects_project_users WHERE project_id = {project} AND user_id = {user}")
    sql(follower.dsn, "UPDATE auth_user SET first_name = 'Changed' WHERE id = 1")
    serves_the_database(follower, tmp_path)


def test_an_update_that_leaves_a_toasted_value_unchanged_keeps_it(follower, tmp_path):
    big = "".join(uuid.UUID(int=i * 104729).hex for i in range(2000))
    sql(follower.dsn, f"UPDATE builds_build SET output = '{big}' WHERE id = 1")
    follower.start()
    serves_the_database(follower, tmp_path)
    sql(follower.dsn, "UPDATE builds_build SET state = 'building' WHERE id = 1")
    expected = serves_the_database(follower, tmp_path)
    assert expected["builds"][1]["output"] == big
    assert changesets(follower.origin)[-1][0]["record"]["output"] == big


def test_commands_of_a_build_moved_to_cold_storage_stay_served_and_go_with_their_build(follower, tmp_path):
    follower.start()
    expected = serves_the_database(follower, tmp_path)
    build = next(iter({c["build"] for c in expected["build_commands"].values()}))
    commands = {i for i, c in expected["build_commands"].items() if c["build"] == build}
    sql(follower.dsn, f"DELETE FROM builds_buildcommandresult WHERE build_id = {build}")
    sql(follower.dsn, "UPDATE auth_user SET last_name = 'After' WHERE id = 1")
    poll(lambda: records(published(follower.origin, tmp_path))["users"][1]["last_name"] == "After")
    assert commands <= set(records(published(follower.origin, tmp_path))["build_commands"])
    sql(follower.dsn, f"DELETE FROM builds_build WHERE id = {build}")
    serves_the_database(follower, tmp_path)


# Faults.


def test_a_mapped_column_dropped_stops_the_follower_in_one_line_that_names_it(follower, tmp_path):
    follower.start()
    serves_the_database(follower, tmp_path)
    sql(follower.dsn, "ALTER TABLE builds_build RENAME COLUMN length TO duration", "UPDATE builds_build SET state = 'building' WHERE id = 1")
    assert follower.wait() == 1
    assert follower.log.strip().splitlines()[-1] == (
        "docsrv: builds_build.length: the source database no longer streams this column (dropped or renamed?), and docsrv "
        "maps it: the follower stops")


@pytest.mark.parametrize("change, line", [
    ("ALTER TABLE builds_build ALTER COLUMN success TYPE integer USING success::int",
     "builds_build.success: the source database streams it as type 23 (pg_type oid), where docsrv maps a boolean column: "
     "the follower stops"),
    ("ALTER TABLE builds_build DROP COLUMN commit",
     "builds_build.commit: the source database no longer streams this column (dropped or renamed?), and docsrv maps it: "
     "the follower stops"),
], ids=["retyped", "dropped"])
def test_a_mapped_column_retyped_or_dropped_stops_the_follower_in_one_line(follower, tmp_path, name, change, line):
    # A publication of every column (an operator's own): those docsrv does not map are ignored,
    # and a column may be dropped or retyped under it.
    sql(follower.dsn, f"CREATE PUBLICATION {name} FOR ALL TABLES")
    follower.start()
    serves_the_database(follower, tmp_path)
    sql(follower.dsn, "UPDATE auth_user SET password = 'changed', last_name = 'Seen' WHERE id = 1")
    poll(lambda: records(published(follower.origin, tmp_path))["users"][1]["last_name"] == "Seen")
    sql(follower.dsn, change, "UPDATE builds_build SET state = 'building' WHERE id = 1")
    assert follower.wait() == 1
    assert follower.log.strip().splitlines()[-1] == f"docsrv: {line}"


def committed_once(follower: Follower, tmp_path: Path, build: int) -> None:
    """Build ``build``'s state moved once: published once, whatever the follower went through."""
    expected = serves_the_database(follower, tmp_path)
    assert expected["builds"][build]["state"] == "building"
    touched = [change for lines in changesets(follower.origin) for change in lines
               if change["kind"] == "builds" and change.get("record", {}).get("id") == build]
    assert len(touched) == 1, touched


KILL_BEFORE_WRITE = ("import os, signal, docsrv.source.follower as f\n"
                     "def killed(*args, **kwargs): os.kill(os.getpid(), signal.SIGKILL)\n"
                     "f.publish_changeset = killed")
KILL_BEFORE_FEEDBACK = ("import os, signal, docsrv.source.follower as f\n"
                        "publish = f.Follower.publish\n"
                        "def published_then_killed(self): publish(self); os.kill(os.getpid(), signal.SIGKILL)\n"
                        "f.Follower.publish = published_then_killed")


@pytest.mark.parametrize("wrapper", [KILL_BEFORE_WRITE, KILL_BEFORE_FEEDBACK], ids=["before-the-write", "after-write-before-feedback"])
def test_a_follower_killed_and_started_again_publishes_each_commit_once(follower, tmp_path, wrapper):
    follower.start()
    serves_the_database(follower, tmp_path)
    follower.stop()
    follower.start(wrapper)
    poll(lambda: follower.log.count("following slot") == 2)
    sql(follower.dsn, "UPDATE builds_build SET state = 'building' WHERE id = 1")
    assert follower.wait() == -signal.SIGKILL
    follower.start()
    committed_once(follower, tmp_path, 1)


def test_a_write_that_fails_stops_the_follower_in_one_line_and_the_commit_is_published_once_started_again(follower, tmp_path):
    follower.start(file_bytes=2 << 20)  # the base's files fit; a changeset of 20,000 pages does not
    serves_the_database(follower, tmp_path)
    before = head(follower.origin)
    sql(follower.dsn, "INSERT INTO projects_importedfile (project_id, version_id, name, slug, path, md5) "
                      "SELECT 1, 1, 'more' || i, 'more' || i, 'more/page-' || i || '.html', '' FROM generate_series(1, 20000) AS i")
    assert follower.wait() == 1
    last = follower.log.strip().splitlines()[-1]
    assert last.startswith(f"docsrv: {follower.origin}/") and last.endswith("File too large"), last
    assert head(follower.origin) == before  # what replicas follow is as it was
    assert not [p for p in follower.origin.rglob("*") if p.name.endswith(".partial") or p.name.startswith("whole-")]
    follower.start()
    expected = serves_the_database(follower, tmp_path)
    assert len([p for p in expected["pages"].values() if p["path"].startswith("more/")]) == 20_000


def test_postgres_restarted_under_the_follower_is_followed_again(follower, tmp_path, cluster: Cluster):
    follower.start()
    serves_the_database(follower, tmp_path)
    cluster.restart()
    sql(follower.dsn, "UPDATE builds_build SET state = 'building' WHERE id = 1")
    committed_once(follower, tmp_path, 1)
    assert "source database:" in follower.log and "trying again" in follower.log


def test_a_dropped_slot_leads_to_a_new_base_said_in_one_line(follower, tmp_path, name):
    follower.start()
    serves_the_database(follower, tmp_path)
    base = head(follower.origin)["base_sequence"]

    def dropped() -> bool:
        with contextlib.suppress(psycopg2.Error):
            sql(follower.dsn, f"SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '{name}' "
                              "AND active_pid IS NOT NULL")
            sql(follower.dsn, f"SELECT pg_drop_replication_slot('{name}')")
            return True
        return False

    poll(dropped, what="the slot dropped")
    sql(follower.dsn, "UPDATE builds_build SET state = 'building' WHERE id = 1")
    serves_the_database(follower, tmp_path)
    poll(lambda: head(follower.origin)["base_sequence"] > base, what=lambda: f"a new base; log:\n{follower.log}")
    assert f"taking a base: slot {name} does not exist (dropped?): a new base" in follower.log


def test_an_idle_publication_still_moves_the_slots_confirmed_position(follower, tmp_path, name):
    follower.start()
    serves_the_database(follower, tmp_path)
    sql(follower.dsn, "CREATE TABLE busy (id serial, note text)")

    def confirmed_past_the_writes() -> bool:
        written = sql(follower.dsn, "INSERT INTO busy (note) VALUES ('x')", "SELECT pg_current_wal_lsn()::text", fetch=True)[0][0]
        found = sql(follower.dsn, f"SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '{name}'",
                    fetch=True)[0][0]
        return pgoutput.lsn_of(found) >= pgoutput.lsn_of(written) - 1024 * 1024 and pgoutput.lsn_of(found) > first

    first = pgoutput.lsn_of(head(follower.origin)["source_lsn"])
    sql(follower.dsn, "INSERT INTO busy (note) SELECT 'filler' FROM generate_series(1, 20000)")
    mark = sql(follower.dsn, "SELECT pg_current_wal_lsn()::text", fetch=True)[0][0]
    poll(lambda: pgoutput.lsn_of(sql(follower.dsn, f"SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                                    f"WHERE slot_name = '{name}'", fetch=True)[0][0]) >= pgoutput.lsn_of(mark),
         timeout=60, what="the slot's confirmed_flush_lsn past the busy table's writes")
    assert confirmed_past_the_writes()
    assert head(follower.origin)["changesets"] == []  # the busy table's writes published nothing


def test_writes_committed_during_the_base_copy_each_appear_once(service, tmp_path, name):
    sql(service, "INSERT INTO projects_importedfile (project_id, version_id, name, slug, path, md5) "
                 "SELECT 1, 1, 'p' || i, 'p' || i, 'page-' || i || '.html', '' FROM generate_series(1, 200000) AS i")
    following = Follower(service, tmp_path / "origin", name, tmp_path / "follow.log")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, service], cwd=ROOT)
    try:
        following.start()
        poll(lambda: "made slot" in following.log, timeout=60)
        assert writer.wait(120) == 0
        expected = serves_the_database(following, tmp_path, timeout=120)
        assert len([b for b in expected["builds"] if b >= 10_000]) == 300
        base = records(tmp_path / "origin" / "snapshots" / head(following.origin)["base"])
        upserted = [line["record"]["id"] for lines in changesets(following.origin) for line in lines if line["kind"] == "builds"]
        appearances = [b for b in base["builds"] if b >= 10_000] + [b for b in upserted if b >= 10_000]
        assert sorted(appearances) == list(range(10_000, 10_300))  # each once: in the base or in a changeset
    finally:
        writer.kill()
        following.stop()


#: Commits a build every few milliseconds, 300 in all, while the follower takes its base.
WRITER = """
import sys, psycopg2
connection = psycopg2.connect(sys.argv[1])
for i in range(300):
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO builds_build (id, project_id, version_id, type, state, date, success, output, error) "
                       "VALUES (%s, 1, 1, 'html', 'finished', now(), true, '', '')", (10_000 + i,))
    connection.commit()
"""


def test_a_cascade_of_100000_rows_is_one_changeset_in_bounded_memory(service, tmp_path, name):
    sql(service, "INSERT INTO projects_importedfile (project_id, version_id, name, slug, path, md5) "
                 "SELECT 3, 3, 'p' || i, 'p' || i, 'page-' || i || '.html', '' FROM generate_series(1, 100000) AS i")
    following = Follower(service, tmp_path / "origin", name, tmp_path / "follow.log").start()
    try:
        serves_the_database(following, tmp_path, timeout=120)
        held = sql(service, "SELECT count(*) FROM projects_importedfile WHERE version_id = 3", fetch=True)[0][0]
        sql(service, "DELETE FROM projects_importedfile WHERE version_id = 3")
        expected = serves_the_database(following, tmp_path, timeout=120)
        assert not [p for p in expected["pages"].values() if p["version"] == 3]
        assert held > 100_000 and len(changesets(following.origin)[-1]) == held
        peak_kib = int(re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{following.process.pid}/status").read_text())[1])
        assert peak_kib < 400 * 1024, f"the follower's peak RSS was {peak_kib} KiB"
    finally:
        following.stop()


def test_print_setup_of_a_database_out_of_reach_says_so_in_one_line(tmp_path):
    result = docsrv("snapshot", "follow", f"host={tmp_path} port=1 dbname=none", "--print-setup")
    assert result.returncode == 1
    assert result.stderr.startswith("docsrv: source database: connection to server on socket") and result.stderr.count("\n") == 1


def test_snapshot_follow_help_names_its_options():
    result = docsrv("snapshot", "follow", "--help")
    assert result.returncode == 0
    for option in ("--public-url", "--slot", "--publication", "--print-setup", "--window", "--pages-from", "--metrics-port",
                   "--metrics-host"):
        assert option in result.stdout


@pytest.fixture(scope="module")
def sphinx_html(tmp_path_factory) -> Path:
    """The tests' Sphinx site, built as the service builds a version (the html builder)."""
    out = tmp_path_factory.mktemp("sphinx") / "html"
    subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", str(ROOT / "tests" / "sphinx_site"), str(out)],
                   check=True, capture_output=True, timeout=300)
    return out


def build_row(identity: int, version: int, state: str, success: bool = True) -> str:
    return ("INSERT INTO builds_build (id, project_id, version_id, type, state, date, success, output, error, commit) "
            f"VALUES ({identity}, 1, {version}, 'html', '{state}', '2026-11-27 10:00:00+00', {success}, '', '', 'c{identity}') "
            f"ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, success = EXCLUDED.success")


def test_with_pages_from_a_build_that_finishes_gives_its_version_the_pages_of_its_html(follower, tmp_path, sphinx_html):
    """With ``--pages-from DIR``, pages come from the service's storage of built HTML
    (``DIR/html/<project>/<version>/``), not from the page rows: when a build of a version finishes
    successfully, the version's pages are those ``import-sphinx`` reads of its HTML (text,
    sections, named entries, document names), in one changeset that replaces those it had. A build
    that fails, or whose HTML is not there, leaves them as they were (said in one line); page rows
    publish nothing."""
    storage = tmp_path / "storage"
    built = storage / "html" / "umbrella" / "latest"
    follower.start(options=("--pages-from", str(storage)))
    poll(lambda: head(follower.origin) is not None, what=lambda: f"the base; log:\n{follower.log}")
    assert records(published(follower.origin, tmp_path))["pages"] == {}  # the rows' pages are not read, and no build is there
    sql(follower.dsn, build_row(600, 1, "finished"))
    poll(lambda: "no HTML at" in follower.log, what=lambda: f"the missing build said; log:\n{follower.log}")
    assert f"no HTML at {built}: the pages of umbrella latest are as they were" in follower.log

    shutil.copytree(sphinx_html, built)
    sql(follower.dsn, build_row(601, 1, "building"))
    sql(follower.dsn, build_row(601, 1, "finished", success=False))
    sql(follower.dsn, build_row(601, 1, "finished"))
    poll(lambda: records(published(follower.origin, tmp_path))["pages"], what=lambda: f"the pages read; log:\n{follower.log}")
    imported = tmp_path / "imported"
    assert docsrv("snapshot", "import-dump", str(dumpdata(follower.dsn, tmp_path / "dump.json")), "--out", str(imported)).returncode == 0
    assert docsrv("snapshot", "import-sphinx", str(built), "--into", str(imported), "--project", "umbrella",
                  "--version", "latest").returncode == 0

    def pages_of_version(snapshot: Path) -> dict[str, dict]:
        return {page["path"]: {k: v for k, v in page.items() if k != "id"}
                for page in records(snapshot)["pages"].values() if page["version"] == 1}

    served = records(published(follower.origin, tmp_path))["pages"]
    assert pages_of_version(published(follower.origin, tmp_path)) == pages_of_version(imported) and len(served) > 5
    assert all(page["version"] == 1 for page in served.values())
    assert any(page["text"] and page["sections"] for page in served.values())
    last = changesets(follower.origin)[-1]
    assert {line["kind"] for line in last} == {"builds", "pages"}  # the build that finished, and its version's pages

    (built / "install.html").unlink()  # the next build has one page fewer
    sql(follower.dsn, build_row(602, 1, "finished"))
    poll(lambda: len(records(published(follower.origin, tmp_path))["pages"]) == len(served) - 1,
         what=lambda: f"the pages read again; log:\n{follower.log}")
    again = records(published(follower.origin, tmp_path))["pages"]
    assert not set(again) & set(served) and "install.html" not in {page["path"] for page in again.values()}
    # A build that finishes in a row that makes no build (a negative length) is not served, and reads nothing.
    sql(follower.dsn, build_row(604, 1, "finished"), "UPDATE builds_build SET length = -1 WHERE id = 604")
    poll(lambda: "builds_build 604 is not served" in follower.log, what=lambda: f"the row refused; log:\n{follower.log}")
    before = len(changesets(follower.origin))
    sql(follower.dsn, "INSERT INTO projects_importedfile (project_id, version_id, name, slug, path, md5) "
                      "VALUES (1, 1, 'row', 'row', 'row.html', '')", build_row(603, 1, "triggered"))
    poll(lambda: len(changesets(follower.origin)) == before + 1, what=lambda: f"the build published; log:\n{follower.log}")
    assert [line["kind"] for line in changesets(follower.origin)[-1]] == ["builds"]


def test_a_base_is_built_in_the_background_and_the_changesets_published_meanwhile_follow_it(follower, tmp_path):
    """Once the changesets after the base reach half of what a base may have after it (here 3),
    the follower writes its state as a new base in a child process while each commit goes on being
    published as its changeset; once laid, it is the origin's base (the changesets up to it lead to
    it, those after it follow it), and what the origin publishes is still the database. A follower
    started again follows on from it, and nothing of the child's work is left."""
    lower = "import docsrv.source.follower as f; f.BACKGROUND_CHANGESETS = 3"
    follower.start(lower)
    serves_the_database(follower, tmp_path)
    first = head(follower.origin)["base"]
    served = Origin(follower.origin)  # a replica that keeps up pulls the origin before each new base and after it
    replica = tmp_path / "replica"
    assert docsrv("snapshot", "pull", served.url, "--into", str(replica)).returncode == 0
    served.requests.clear()

    def sequence() -> int:
        now = head(follower.origin)
        return max(entry["sequence"] for entry in now["changesets"]) if now["changesets"] else now["base_sequence"]

    for build in range(700, 708):  # each its own changeset
        before = sequence()
        sql(follower.dsn, build_row(build, 1, "triggered"))
        poll(lambda: sequence() > before, what=lambda: f"build {build} published; log:\n{follower.log}")  # noqa: B023
        assert docsrv("snapshot", "pull", served.url, "--into", str(replica)).returncode == 0  # it keeps up
    poll(lambda: head(follower.origin)["base"] != first, what=lambda: f"a new base; log:\n{follower.log}")
    now = head(follower.origin)
    assert msgspec.convert(now, Head).problem() is None
    assert now["base"] == f"{follower.slot}-{now['base_sequence']}" and now["leading"][-1]["product"] == now["base"]
    assert re.search(rf"published base {now['base']} \(sequence {now['base_sequence']}\), built in the background", follower.log)
    assert "published snapshot" not in follower.log  # none was written inline
    serves_the_database(follower, tmp_path)
    pulled = docsrv("snapshot", "pull", served.url, "--into", str(replica))
    served.close()
    assert pulled.returncode == 0, pulled.stderr
    assert not [path for path, _headers in served.requests if path.startswith("snapshots/")]  # across new bases: by changesets

    def name(listed: dict) -> str:
        return listed["changesets"][-1]["product"] if listed["changesets"] else listed["base"]

    assert name(json.loads((replica / "head.json").read_text())) == name(head(follower.origin))
    follower.stop()
    follower.start(lower)
    sql(follower.dsn, build_row(720, 1, "finished"))
    expected = serves_the_database(follower, tmp_path)
    assert 720 in expected["builds"]
    poll(lambda: not list((follower.origin / ".follower").glob("base-*")), what="the child's work removed")


def test_a_background_base_that_fails_is_said_and_tried_again_while_changesets_go_on(follower, tmp_path):
    """A base written in the background that fails (here a full disk, while a file says so) is
    said in one line, the stream goes on publishing each commit, and the base is tried again after
    its pause (here half a second): once the disk has room, it is laid and made the base."""
    full = tmp_path / "disk-full"
    full.touch()
    follower.start("import os, docsrv.source.follower as f, docsrv.source.bases as b\n"
                   "f.BACKGROUND_CHANGESETS = 2; f.BASE_RETRY_SECONDS = 0.5\n"
                   "write = b.write_snapshot\n"
                   "def written(*args):\n"
                   f"    if os.path.exists({str(full)!r}): raise OSError(28, 'No space left on device')\n"
                   "    return write(*args)\n"
                   "b.write_snapshot = written")
    serves_the_database(follower, tmp_path)
    first = head(follower.origin)["base"]
    for build in range(800, 803):
        sql(follower.dsn, build_row(build, 1, "triggered"))
        poll(lambda: build in records(published(follower.origin, tmp_path))["builds"],  # noqa: B023
             what=lambda: f"build {build} published; log:\n{follower.log}")  # noqa: B023
    poll(lambda: "was not built: OSError: [Errno 28] No space left on device; the next is tried in 0 s" in follower.log,
         what=lambda: f"the failure said; log:\n{follower.log}")
    assert head(follower.origin)["base"] == first and not list((follower.origin / ".follower").glob("base-*"))
    full.unlink()
    sql(follower.dsn, build_row(803, 1, "triggered"))
    poll(lambda: head(follower.origin)["base"] != first, what=lambda: f"a new base; log:\n{follower.log}")
    assert msgspec.convert(head(follower.origin), Head).problem() is None
    assert 803 in serves_the_database(follower, tmp_path)["builds"]


def scraped(port: int) -> tuple[str, dict[str, float]]:
    """The follower's /metrics: its text, and each sample's value by its name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200 and reply.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = reply.read().decode()
    return text, {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if not line.startswith("#")}


def test_the_follower_serves_its_lag_retained_wal_and_what_it_published_as_metrics(follower, tmp_path):
    """With ``--metrics-port``, ``GET /metrics`` says, in Prometheus's text format (promtool finds
    nothing to say, when it is installed): the lag of the last changeset (from its last COMMIT to
    its publish), the WAL the slot retains (asked of the database), what was published (the base
    whole, then each changeset, with its records and transactions), and the process's own
    figures. The log says each changeset in a line."""
    port = free_port()
    follower.start(options=("--metrics-port", str(port)))
    serves_the_database(follower, tmp_path)
    _text, base = poll(lambda: (found := scraped(port)) and "docsrv_source_retained_wal_bytes" in found[1] and found,
                       what=lambda: f"the retained WAL in /metrics; log:\n{follower.log}")
    assert base['docsrv_source_published_total{kind="snapshot"}'] == 1 and base['docsrv_source_published_total{kind="changeset"}'] == 0
    assert base["docsrv_source_retained_wal_bytes"] >= 0 and "docsrv_source_lag_seconds" not in base
    sql(follower.dsn, "INSERT INTO builds_build (id, project_id, version_id, type, state, date, success, output, error, commit) "
                      "VALUES (500, 1, 1, 'html', 'triggered', '2026-11-27 10:00:00+00', true, '', '', 'abc')",
        "INSERT INTO builds_build (id, project_id, version_id, type, state, date, success, output, error, commit) "
        "VALUES (501, 1, 1, 'html', 'triggered', '2026-11-27 10:00:00+00', true, '', '', 'abd')")
    text, after = poll(lambda: (found := scraped(port)) and found[1]['docsrv_source_published_total{kind="changeset"}'] == 1 and found,
                       what=lambda: f"the changeset counted; log:\n{follower.log}")
    assert after["docsrv_source_records_total"] == base["docsrv_source_records_total"] + 2
    assert after["docsrv_source_transactions_total"] == 1 and after["docsrv_source_lag_seconds"] >= 0
    assert after["docsrv_source_last_published_timestamp_seconds"] >= base["docsrv_source_last_published_timestamp_seconds"]
    assert after["process_resident_memory_bytes"] > 0 and after["process_cpu_seconds_total"] > 0
    lsn = head(follower.origin)["source_lsn"]
    assert re.search(rf"published changeset 2: 2 records changed by 1 transaction\(s\) to {lsn}, \d+ ms after its last commit",
                     follower.log), follower.log
    with pytest.raises(urllib.error.HTTPError) as elsewhere:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
    assert elsewhere.value.code == 404
    promtool = shutil.which("promtool")
    if promtool is not None:
        checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0 and checked.stdout + checked.stderr == "", checked.stdout + checked.stderr


def test_a_metrics_port_taken_stops_the_follower_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = docsrv("snapshot", "follow", f"host={tmp_path} port=1 dbname=none", str(tmp_path / "origin"), "--metrics-port", str(port))
    assert result.returncode == 1 and result.stderr == f"docsrv: metrics on 127.0.0.1:{port}: Address already in use\n"


def test_changesets_published_faster_than_a_line_a_second_are_said_together(caplog):
    """The follower says each changeset in a line, or, when they come faster, one line a second
    that says together those published since the last (``source.watched.PublishLog``)."""
    from docsrv.source.watched import PublishLog

    now = [100.0]
    said = PublishLog(lambda: now[0])
    with caplog.at_level(logging.INFO, logger="docsrv"):
        said.published(2, 5, 1, "0/1A", 0.120)
        for sequence in range(3, 8):  # a tenth of a second apart
            now[0] += 0.1
            said.published(sequence, 10, 2, f"0/{sequence}B", 0.1 * sequence)
        said.say_if_due()
        now[0] += 0.6
        said.say_if_due()
        said.say_if_due()
        now[0] += 5
        said.published(8, 1, 1, "0/8C", 0.050)
    assert [record.getMessage() for record in caplog.records] == [
        "published changeset 2: 5 records changed by 1 transaction(s) to 0/1A, 120 ms after its last commit",
        "published changesets 3-7 (5): 50 records changed by 10 transaction(s) to 0/7B, 300-700 ms after their last commits",
        "published changeset 8: 1 records changed by 1 transaction(s) to 0/8C, 50 ms after its last commit",
    ]
