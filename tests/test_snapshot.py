"""Snapshots on disk: validate, info, compression, and bad snapshots named by file and line."""

import gzip
import json
import shutil
import subprocess
import sys

import pytest
import zstandard

from conftest import DEMO, ROOT


def docsrv(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "docsrv", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.fixture
def snapshot(tmp_path):
    """A copy of the demo snapshot to spoil."""
    copy = tmp_path / "snap"
    shutil.copytree(DEMO, copy)
    return copy


def edit_line(path, number, change):
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[number - 1] = change(lines[number - 1])
    path.write_text("".join(lines), encoding="utf-8")


def edit_record(path, number, **fields):
    def change(line):
        record = json.loads(line)
        record.update(fields)
        return json.dumps(record, ensure_ascii=False) + "\n"

    edit_line(path, number, change)


def test_validate_good_snapshot_prints_a_summary(snapshot):
    result = docsrv("snapshot", "validate", str(snapshot))
    assert result.returncode == 0, result.stderr
    assert "snapshot demo is good" in result.stdout
    assert "12 projects" in result.stdout


def test_info_prints_the_manifest(snapshot):
    result = docsrv("snapshot", "info", str(snapshot))
    assert result.returncode == 0
    manifest = json.loads(result.stdout)
    assert manifest["name"] == "demo" and manifest["counts"]["projects"] == 13


@pytest.mark.parametrize("compress", ["gz", "zst"])
def test_compressed_record_files_load(snapshot, compress, start_server):
    for path in list(snapshot.glob("*.jsonl")):
        data = path.read_bytes()
        packed = gzip.compress(data) if compress == "gz" else zstandard.ZstdCompressor().compress(data)
        path.with_name(path.name + "." + compress).write_bytes(packed)
        path.unlink()
    assert docsrv("snapshot", "validate", str(snapshot)).returncode == 0
    server = start_server("--snapshot", str(snapshot))
    assert server.json("/api/v2/project/1/")["slug"] == "pip"


BROKEN = {
    "invalid JSON": (lambda s: edit_line(s / "versions.jsonl", 5, lambda line: line[:-10] + "\n"), "versions.jsonl:5: invalid JSON"),
    "wrong type": (lambda s: edit_record(s / "projects.jsonl", 3, id="three"), "projects.jsonl:3: Expected `int`, got `str` - at `$.id`"),
    "naive datetime": (lambda s: edit_record(s / "builds.jsonl", 2, date="2023-01-01T00:00:00"), "builds.jsonl:2:"),
    "unknown field": (lambda s: edit_record(s / "users.jsonl", 4, pasword="x"), "users.jsonl:4: Object contains unknown field `pasword`"),
    "bad enum": (lambda s: edit_record(s / "builds.jsonl", 7, state="exploded"), "builds.jsonl:7: Invalid enum value 'exploded'"),
    "duplicate id": (lambda s: edit_record(s / "versions.jsonl", 9, id=1), "versions.jsonl:9: duplicate id 1 (first on line 1)"),
    "duplicate slug": (lambda s: edit_record(s / "projects.jsonl", 2, slug="pip"), "projects.jsonl:2: duplicate project slug 'pip' (first on line 1)"),
    "missing project": (lambda s: edit_record(s / "versions.jsonl", 3, project=404), "versions.jsonl:3: version 3 names project 404, which does not exist"),
    "missing user": (lambda s: edit_record(s / "projects.jsonl", 1, users=[2, 77]), "projects.jsonl:1: project 1 names user 77"),
    "build of another project's version": (lambda s: edit_record(s / "builds.jsonl", 1, project=2), "builds.jsonl:1: build 101 names project 2, but its version"),
    "command of a missing build": (lambda s: edit_record(s / "build_commands.jsonl", 10, build=1), "build_commands.jsonl:10: command"),
    "commands of a build apart": (
        lambda s: (s / "build_commands.jsonl").write_text(
            "".join((lines := (s / "build_commands.jsonl").read_text().splitlines(keepends=True))[1:]) + lines[0]
        ),
        "build_commands.jsonl:687: command 1001 of build 101 is not next to the other commands of that build",
    ),
    "command ending before it starts": (
        lambda s: edit_record(s / "build_commands.jsonl", 4, end_time="2000-01-01T00:00:00Z"),
        "build_commands.jsonl:4: command 1004 ends before it starts",
    ),
    "blank line": (lambda s: edit_line(s / "users.jsonl", 2, lambda line: line + "\n"), "users.jsonl:3: blank line"),
    "truncated file": (lambda s: (s / "builds.jsonl").write_bytes((s / "builds.jsonl").read_bytes()[:-300]), "builds.jsonl:"),
    "count mismatch": (lambda s: edit_line(s / "users.jsonl", 12, lambda line: ""), "users.jsonl: holds 11 records but manifest.json counts 12"),
    "missing file": (lambda s: (s / "pages.jsonl").unlink(), "pages.jsonl: missing"),
    "missing manifest": (lambda s: (s / "manifest.json").unlink(), "manifest.json: cannot be read"),
    "manifest not JSON": (lambda s: (s / "manifest.json").write_text('{\n  "format": "docsrv-snapshot",\n  oops\n}'), "manifest.json:3: invalid JSON"),
    "wrong format version": (
        lambda s: (s / "manifest.json").write_text((s / "manifest.json").read_text().replace('"format_version": 1', '"format_version": 7')),
        "manifest.json: format_version 7 is not supported (this docsrv reads 1)",
    ),
    "10 MB line": (lambda s: edit_record(s / "pages.jsonl", 2, text="x" * (10 << 20)), "pages.jsonl:2: line is longer than 4 MiB"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_snapshot_is_refused_naming_file_and_line(snapshot, case):
    spoil, message = BROKEN[case]
    spoil(snapshot)
    result = docsrv("snapshot", "validate", str(snapshot))
    assert result.returncode == 1
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_empty_snapshot_is_refused(snapshot):
    for path in snapshot.glob("*.jsonl"):
        path.write_text("")
    manifest = json.loads((snapshot / "manifest.json").read_text())
    manifest["counts"] = {kind: 0 for kind in manifest["counts"]}
    (snapshot / "manifest.json").write_text(json.dumps(manifest))
    result = docsrv("snapshot", "validate", str(snapshot))
    assert result.returncode == 1
    assert "projects.jsonl: holds no projects" in result.stderr


def test_serve_refuses_a_broken_snapshot_and_exits_non_zero(snapshot):
    edit_record(snapshot / "versions.jsonl", 3, project=404)
    result = docsrv("serve", "--snapshot", str(snapshot), "--port", "0")
    assert result.returncode == 1
    assert "versions.jsonl:3: version 3 names project 404" in result.stderr


def test_an_index_built_from_other_content_is_rebuilt(snapshot, start_server):
    server = start_server("--snapshot", str(snapshot), "--workers", "1")
    query = "/api/v2/docsearch/?project=pip&version=latest&q=zanzibar"
    assert server.json(query)["results"]["hits"]["total"] == 0
    server.stop()
    marker = json.loads((snapshot / "index" / "docsrv-index.json").read_text())
    edit_record(snapshot / "pages.jsonl", 1, text="Zanzibar is where the new text lives.")
    again = start_server("--snapshot", str(snapshot), "--workers", "1")
    assert any("built the search index" in line for line in again.log)
    assert json.loads((snapshot / "index" / "docsrv-index.json").read_text())["fingerprint"] != marker["fingerprint"]
    hits = again.json(query)["results"]["hits"]
    assert hits["total"] == 1 and hits["hits"][0]["fields"]["path"] == ["index.html"]
    third = start_server("--snapshot", str(snapshot), "--workers", "1")
    assert not any("built the search index" in line for line in third.log)  # the index now matches: opened as it is
