"""``docsrv snapshot diff OLD NEW``: complete (every reply whose body changes carries a key it
prints) and small (an object's own keys, a list's key only when its members or order move)."""

from __future__ import annotations

import json
import shutil

import pytest
from crawl import crawl
from snapshot_change import read, realistic_change, write

from conftest import DEMO, InProcessServer
from docsrv.config import Settings
from helpers import docsrv, sealed

PUBLIC = "https://api.example.org"


def diff(old, new, *extra):
    result = docsrv("snapshot", "diff", str(old), str(new), *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout


def changed_copy(tmp_path, change):
    """The demo snapshot as written by docsrv, and a copy changed by ``change(records)``."""
    old = sealed(tmp_path / "old", "old")
    new = tmp_path / "new"
    shutil.copytree(old, new, ignore=shutil.ignore_patterns("index"))
    records = {kind: read(new, kind) for kind in ("projects", "versions", "builds", "build_commands", "pages", "users")}
    change(records)
    for kind, items in records.items():
        write(new, kind, items)
    sealed_again = json.loads((new / "manifest.json").read_text())
    sealed_again["files"] = {}
    (new / "manifest.json").write_text(json.dumps(sealed_again))
    return old, new


def last_public(projects: list[dict]) -> dict:
    return [p for p in projects if p.get("privacy_level", "public") == "public"][-1]


def keys_of(output: str) -> set[str]:
    return set(output.split())


def test_identical_snapshots_print_nothing(tmp_path):
    old = sealed(tmp_path / "a", "a")
    assert diff(old, old) == ""
    assert json.loads(diff(old, old, "--json")) == {"changed": [], "added": [], "removed": [], "lists": []}


@pytest.mark.parametrize("bad", ["missing", "not-a-snapshot", "broken"])
def test_bad_input_is_one_line_and_exit_1(tmp_path, bad):
    (tmp_path / "not-a-snapshot").mkdir()
    broken = shutil.copytree(DEMO, tmp_path / "broken", ignore=shutil.ignore_patterns("index", ".*"))
    (broken / "versions.jsonl").write_text((broken / "versions.jsonl").read_text().replace('"project":', '"project":"x",', 1))
    result = docsrv("snapshot", "diff", str(DEMO), str(tmp_path / bad))
    assert result.returncode == 1 and result.stdout == "" and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"docsrv: snapshot diff: {tmp_path / bad}: snapshot {bad} has 1 problem(s): ")


def test_a_project_edited_names_the_project_and_no_list(tmp_path):
    def edit(records):
        records["projects"][0]["description"] = "Edited."

    old, new = changed_copy(tmp_path, edit)
    slug = read(old, "projects")[0]["slug"]
    grouped = json.loads(diff(old, new, "--json"))
    assert grouped["changed"][-1] == f"project-{slug}" or f"project-{slug}" in grouped["changed"]
    assert grouped["lists"] == [] and grouped["added"] == [] and grouped["removed"] == []
    assert "big-list-v2-project" in grouped["changed"]  # its pages that could not name it
    assert not any(key.startswith(("build-", "version-")) for key in grouped["changed"])


def test_a_project_added_and_one_removed_move_their_lists(tmp_path):
    def edit(records):
        gone = last_public(records["projects"])
        records["projects"].remove(gone)
        records["versions"] = [v for v in records["versions"] if v["project"] != gone["id"]]
        builds = {b["id"] for b in records["builds"] if b["project"] == gone["id"]}
        records["builds"] = [b for b in records["builds"] if b["id"] not in builds]
        records["build_commands"] = [c for c in records["build_commands"] if c["build"] not in builds]
        records["pages"] = [p for p in records["pages"] if p["project"] != gone["id"]]
        records["projects"].append({"id": 99, "name": "Fresh", "slug": "fresh", "pub_date": "2024-01-01T00:00:00Z",
                                    "modified_date": "2024-01-01T00:00:00Z"})

    old, new = changed_copy(tmp_path, edit)
    gone = last_public(read(old, "projects"))["slug"]
    grouped = json.loads(diff(old, new, "--json"))
    assert "project-fresh" in grouped["added"] and f"project-{gone}" in grouped["removed"]
    for key in ("list-v2-project", "list-v2-project-slug-fresh", f"list-v2-project-slug-{gone}", "list-v1-project",
                "list-v1-project-slug-fresh", f"list-v2-version-project-{gone}", f"list-v2-build-project-{gone}"):
        assert key in grouped["lists"], key


def test_a_build_whose_state_changed_names_it_not_its_lists(tmp_path):
    def edit(records):
        records["builds"][0]["state"] = "building"

    old, new = changed_copy(tmp_path, edit)
    build = read(old, "builds")[0]
    keys = keys_of(diff(old, new))
    assert f"build-{build['id']}" in keys
    assert "list-v2-build" not in keys and "big-list-v2-build" in keys
    assert f"big-list-v2-build-commit-{build['commit']}" in keys


def test_a_new_build_moves_every_list_it_is_in(tmp_path):
    def edit(records):
        first = records["builds"][0]
        records["builds"].append({**first, "id": 999, "date": "2030-01-01T00:00:00Z", "commit": "feedface"})

    old, new = changed_copy(tmp_path, edit)
    build = read(old, "builds")[0]
    slug = next(p["slug"] for p in read(old, "projects") if p["id"] == build["project"])
    grouped = json.loads(diff(old, new, "--json"))
    assert grouped["added"] == ["build-999"]
    assert set(grouped["lists"]) == {"list-v2-build", f"list-v2-build-project-{slug}", "list-v2-build-commit-feedface",
                                     f"list-v2-build-project-{slug}-commit-feedface", "list-v1-build", f"list-v1-build-project-{slug}"}


def test_commands_changed_name_their_build(tmp_path):
    def edit(records):
        records["build_commands"][0]["output"] = "different"

    old, new = changed_copy(tmp_path, edit)
    build = read(old, "build_commands")[0]["build"]
    assert f"build-{build}" in keys_of(diff(old, new))


def test_a_version_made_private_removes_it_and_its_builds_and_files(tmp_path):
    def edit(records):
        records["versions"][0]["privacy_level"] = "private"

    old, new = changed_copy(tmp_path, edit)
    version = read(old, "versions")[0]
    builds = [b["id"] for b in read(old, "builds") if b["version"] == version["id"]]
    grouped = json.loads(diff(old, new, "--json"))
    assert builds and {f"build-{b}" for b in builds} <= set(grouped["removed"])
    assert any(key.startswith("version-") and key.endswith(f"-{version['slug']}") for key in grouped["removed"])
    assert "list-v2-version" in grouped["lists"]


def test_a_page_changed_names_it_and_every_search(tmp_path):
    def edit(records):
        records["pages"][0]["text"] += " More words."

    old, new = changed_copy(tmp_path, edit)
    page = read(old, "pages")[0]
    keys = keys_of(diff(old, new))
    assert {f"file-{page['id']}", "search", "big-list-v1-file"} <= keys and "list-v1-file" not in keys


@pytest.fixture(scope="module")
def before_and_after(tmp_path_factory):
    """The demo and a realistic change of it, each served in this process with fixed links."""
    root = tmp_path_factory.mktemp("diff")
    old, new = root / "old", root / "new"
    shutil.copytree(DEMO, old, ignore=shutil.ignore_patterns("index"))
    realistic_change(old, new, "demo-changed")
    servers = InProcessServer(old, Settings(public_url=PUBLIC)), InProcessServer(new, Settings(public_url=PUBLIC))
    yield old, new, servers
    for server in servers:
        server.stop()


def test_every_reply_that_changes_carries_a_printed_key_and_unchanged_details_carry_none(before_and_after):
    old, new, (before, after) = before_and_after
    printed = keys_of(diff(old, new))
    changed = unchanged_named = 0
    for url in crawl(old, new):
        was, now = before.get(url), after.get(url)
        if was.status != 200:
            continue  # errors are never cached
        keys = set(was.headers["Surrogate-Key"].split())
        assert set(was.headers["Cache-Tag"].split(",")) == keys
        if (was.status, was.body) != (now.status, now.body):
            changed += 1
            assert keys & printed, f"{url} changed, but none of its keys is printed: {sorted(keys)[:8]}"
        elif keys & printed and "?" not in url and url.startswith("/api/v2/project/"):
            unchanged_named += 1
    assert changed > 100
    assert unchanged_named <= 2  # the edited projects' active_versions (a project field inside each)


def test_a_page_past_the_end_carries_its_list_s_key_which_a_new_member_prints(before_and_after):
    old, new, (before, after) = before_and_after
    count = before.json("/api/v2/build/")["count"]
    shifted = before.get(f"/api/v2/build/?offset={count}")
    assert shifted.json()["results"] == [] and shifted.headers["Surrogate-Key"] == "v2 list-v2-build"
    assert after.json(f"/api/v2/build/?offset={count}")["count"] != count
    assert "list-v2-build" in keys_of(diff(old, new))


def test_a_list_filtered_by_what_does_not_exist_yet_carries_its_key_which_the_diff_prints(before_and_after):
    old, new, (before, after) = before_and_after
    empty = before.get("/api/v2/project/?slug=brand-new-1")
    assert empty.json()["count"] == 0 and empty.headers["Surrogate-Key"] == "v2 list-v2-project-slug-brand-new-1"
    assert after.json("/api/v2/project/?slug=brand-new-1")["count"] == 1
    assert "list-v2-project-slug-brand-new-1" in keys_of(diff(old, new))


def test_a_line_longer_than_a_record_may_be_is_one_line_too_from_either_snapshot(tmp_path):
    """The build commands are read by the diff alone (not decoded first): a line without end is
    a problem named by file, whether this process reads it or the helper that reads the old
    snapshot does."""
    broken = shutil.copytree(DEMO, tmp_path / "long", ignore=shutil.ignore_patterns("index", ".*"))
    with open(broken / "build_commands.jsonl", "ab") as commands:
        commands.write(b'{"id": 1, "output": "' + b"x" * (5 << 20) + b'"}\n')
    for old, new in ((broken, DEMO), (DEMO, broken)):
        result = docsrv("snapshot", "diff", str(old), str(new))
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert "build_commands.jsonl" in result.stderr and "line is longer than 4 MiB" in result.stderr
