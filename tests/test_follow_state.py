"""The follower's state without a database: rows taken a transaction at a time keep, commit after
commit, exactly the records an import keeps of the same rows (``keep_what_can_be_served``, which
the base uses), whatever order they came in; and a changeset of what changed says what
``snapshot publish`` says of it."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import pytest

from docsrv.edge.keys import MAX_CHANGE_KEYS
from docsrv.source.changesets import changeset_of
from docsrv.source.state import KIND_OF_TABLE, SourceState, coalesced
from docsrv.source.tables import PROJECT_USERS

TABLE_OF_KIND = {kind: table for table, kind in KIND_OF_TABLE.items()}
DATE = "2026-11-27T10:00:00.123Z"


def random_row(rng: random.Random) -> tuple[str, int, dict | None]:
    """A row of a small world, where names clash, references dangle, and fields may not map."""
    kind = rng.choice([*KIND_OF_TABLE.values(), "links"])
    identity = rng.randint(1, 9)
    if rng.random() < 0.2:
        return (PROJECT_USERS if kind == "links" else TABLE_OF_KIND[kind]), identity, None
    fields: dict
    if kind == "links":
        return PROJECT_USERS, identity, {"id": identity, "project": rng.randint(1, 6), "user": rng.randint(1, 6)}
    if kind == "users":
        fields = {"username": rng.choice(["ana", "bo", "cy", "bad/name"]), "email": "", "first_name": "", "last_name": ""}
    elif kind == "projects":
        fields = {"name": "P", "slug": rng.choice(["p", "q", "r", "s"]), "pub_date": DATE, "modified_date": DATE,
                  "documentation_type": rng.choice(["sphinx", "sphinx_htmldir"]), "privacy_level": rng.choice(["public", "private"])}
    elif kind == "relationships":
        fields = {"parent": rng.randint(1, 6), "child": rng.randint(1, 6), "alias": None}
    elif kind == "versions":
        fields = {"project": rng.randint(1, 6), "slug": rng.choice(["latest", "stable", "1.0"]), "verbose_name": "v",
                  "privacy_level": rng.choice(["public", "private"]), "active": True}
    elif kind == "builds":
        fields = {"project": rng.randint(1, 6), "version": rng.randint(1, 10), "date": DATE, "state": rng.choice(["finished", "building"])}
    elif kind == "build_commands":
        fields = {"build": rng.randint(1, 10), "command": "ls", "start_time": DATE, "end_time": DATE}
    else:
        fields = {"project": rng.randint(1, 6), "version": rng.randint(1, 10), "path": rng.choice(["index.html", "a/index.html"]),
                  "name": "n"}
    return TABLE_OF_KIND[kind], identity, {"id": identity, **fields}


@pytest.mark.parametrize("seed", range(40))
def test_rows_taken_commit_after_commit_keep_what_an_import_of_them_keeps(seed):
    rng = random.Random(seed)
    state = SourceState()
    kept_before = {kind: {} for kind in state.kept}
    for _ in range(60):
        for _ in range(rng.randint(1, 6)):
            table, identity, fields = random_row(rng)
            state.row(table, identity, fields)
        changes = state.commit()
        fresh = SourceState.of_candidates({kind: found.values() for kind, found in state.candidates.items()}, state.links)
        assert state.kept == fresh.kept
        # What the commit says it changed is exactly the difference of the kept records.
        for change in changes:
            identity = (change.after or change.before).id
            assert kept_before[change.kind].get(identity) == change.before
            assert state.kept[change.kind].get(identity) == change.after
        changed = {(c.kind, (c.after or c.before).id) for c in changes}
        for kind, found in state.kept.items():
            for identity in found.keys() | kept_before[kind].keys():
                if (kind, identity) not in changed:
                    assert found.get(identity) == kept_before[kind].get(identity)
        kept_before = {kind: dict(found) for kind, found in state.kept.items()}


def test_a_command_whose_row_goes_while_its_build_stays_is_kept_until_its_build_goes():
    state = SourceState()
    state.row("projects_project", 1, {"id": 1, "name": "P", "slug": "p", "pub_date": DATE, "modified_date": DATE})
    state.row("builds_version", 2, {"id": 2, "project": 1, "slug": "latest", "verbose_name": "latest"})
    state.row("builds_build", 3, {"id": 3, "project": 1, "version": 2, "date": DATE})
    state.row("builds_buildcommandresult", 4, {"id": 4, "build": 3, "command": "ls", "start_time": DATE, "end_time": DATE})
    state.commit()
    state.row("builds_buildcommandresult", 4, None)  # moved to cold storage
    assert state.commit() == [] and 4 in state.kept["build_commands"]
    state.row("builds_buildcommandresult", 4, None)
    state.row("builds_build", 3, None)
    assert sorted((c.kind, c.after is None) for c in state.commit()) == [("build_commands", True), ("builds", True)]


def test_changes_of_several_commits_are_coalesced_per_record():
    state = SourceState()
    state.row("auth_user", 1, {"id": 1, "username": "ana"})
    first = state.commit()
    state.row("auth_user", 1, {"id": 1, "username": "bo"})
    second = state.commit()
    state.row("auth_user", 1, None)
    third = state.commit()
    assert coalesced([first, second, third]) == []  # came and went: nothing to publish
    (change,) = coalesced([second, third])
    assert change.before.username == "ana" and change.after is None


def project_with_versions(versions: int) -> SourceState:
    state = SourceState()
    state.row("projects_project", 1, {"id": 1, "name": "P", "slug": "popular", "pub_date": DATE, "modified_date": DATE})
    for identity in range(1, versions + 1):
        state.row("builds_version", identity, {"id": identity, "project": 1, "slug": f"v{identity}", "verbose_name": f"v{identity}"})
    state.commit()
    return state


def test_a_changeset_names_the_purge_keys_of_what_it_changes_and_every_reply_past_a_bound():
    def header_keys(state: SourceState) -> list[str]:
        state.row("projects_project", 1, {"id": 1, "name": "P", "slug": "popular", "pub_date": DATE, "modified_date": DATE,
                                          "description": "edited"})
        now = datetime.now(UTC)
        data = changeset_of(state, state.commit(), sequence=2, follows="a", product="b", created_at=now,
                            public_url="https://docs.example.org", source_lsn="0/1", committed_at=now)
        return json.loads(data.splitlines()[0])["purge_keys"]

    few = header_keys(project_with_versions(3))
    assert "project-popular" in few and "big-list-v2-version-project-popular" in few and "v2" not in few
    assert header_keys(project_with_versions(MAX_CHANGE_KEYS // 8 + 1)) == ["search", "v1", "v2"]


def test_the_journal_of_project_users_is_read_up_to_the_position_taken_and_a_line_cut_short_is_left(tmp_path):
    from docsrv.source.follower import LINKS, PRIVATE, append_links, read_links, write_links

    write_links(tmp_path, {1: (10, 100), 2: (10, 200)})
    append_links(tmp_path, [b"[50,3,11,100]\n", b"[60,1]\n", b"[70,4,12,300]\n"])
    with open(tmp_path / PRIVATE / LINKS, "ab") as journal:
        journal.write(b"[80,5,1")  # a crash in the middle of a line: its transaction is sent again
    assert read_links(tmp_path, 60) == {2: (10, 200), 3: (11, 100)}
    assert read_links(tmp_path, 100) == {2: (10, 200), 3: (11, 100), 4: (12, 300)}
    append_links(tmp_path, [b"[90,0]\n"])  # the table truncated
    assert read_links(tmp_path, 100) == {}
