"""Snapshots on disk: validate, info, compression, and bad snapshots named by file and line."""

import gzip
import json
import shutil

import pytest
import zstandard

from conftest import DEMO
from helpers import BROKEN, docsrv, edit_record


@pytest.fixture
def snapshot(tmp_path):
    """A copy of the demo snapshot to spoil."""
    copy = tmp_path / "snap"
    shutil.copytree(DEMO, copy)
    return copy


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
    assert docsrv("index", str(snapshot)).returncode == 0  # the snapshot's own index, as a publisher leaves it
    server = start_server("--snapshot", str(snapshot), "--workers", "1")
    query = "/api/v2/docsearch/?project=pip&version=latest&q=zanzibar"
    assert server.json(query)["results"]["hits"]["total"] == 0
    server.stop()
    marker = json.loads((snapshot / "index" / "docsrv-index.json").read_text())
    edit_record(snapshot / "pages.jsonl", 1, text="Zanzibar is where the new text lives.")
    again = start_server("--snapshot", str(snapshot), "--workers", "1")
    # A server writes nothing into the snapshot: it built its own index in the temporary directory.
    assert json.loads((snapshot / "index" / "docsrv-index.json").read_text()) == marker
    hits = again.json(query)["results"]["hits"]
    assert hits["total"] == 1 and hits["hits"][0]["fields"]["path"] == ["index"]
    third = start_server("--snapshot", str(snapshot), "--workers", "1")
    assert not any("built the search index" in line for line in third.log)  # the index now matches: opened as it is
