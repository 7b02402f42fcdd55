"""A snapshot on a read-only volume (``docker run -v ...:/snapshot:ro``, a Kubernetes volume, an
image layer, a read-only NFS export) is served whole: docsrv writes nothing into a snapshot, and
one prepared where it could be written starts trusted. The volume is a real read-only bind mount
(as root, as CI runs); where mounting is refused the tests are skipped, saying why."""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers import docsrv, sealed


def read_only_mount(source, target) -> None:
    target.mkdir()
    for args in (["mount", "--bind", str(source), str(target)], ["mount", "-o", "remount,ro,bind", str(target)]):
        result = subprocess.run(args, capture_output=True, text=True)
        if result.returncode != 0:
            subprocess.run(["umount", str(target)], capture_output=True)
            pytest.skip(f"a read-only bind mount is refused here ({' '.join(args[:2])}: {result.stderr.strip()})")


@pytest.fixture
def mounted(tmp_path):
    """Mount a snapshot read-only at ``tmp_path/ro``; unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root (CI runs as root)")
    made = []

    def mount(source):
        target = tmp_path / f"ro-{len(made)}"
        read_only_mount(source, target)
        made.append(target)
        assert subprocess.run(["touch", str(target / "probe")], capture_output=True).returncode != 0  # truly read-only
        return target

    yield mount
    for target in made:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_a_prepared_snapshot_on_a_read_only_mount_starts_trusted_and_answers(tmp_path, mounted, start_server):
    snapshot = sealed(tmp_path / "snap", "snap-ro")
    indexed = docsrv("index", str(snapshot))
    assert indexed.returncode == 0, indexed.stderr
    volume = mounted(snapshot)
    server = start_server("--snapshot", str(volume), "--workers", "2")
    ready = server.wait_for("serving snapshot snap-ro")
    assert "checked whole" not in ready and not any("is not prepared" in line for line in server.log)
    assert not any("search index" in line for line in server.log)  # the snapshot's own index, opened as it is
    assert [p["slug"] for p in server.json("/api/v2/project/?slug=pip")["results"]] == ["pip"]
    hits = server.json("/api/v1/file/search/?q=installer")["objects"]
    assert [hit["path"] for hit in hits][:1] == ["index.html"]
    assert server.json("/api/v2/build/101/")["commands"]


def test_an_unprepared_snapshot_on_a_read_only_mount_is_checked_and_says_so(tmp_path, mounted, start_server):
    snapshot = sealed(tmp_path / "snap", "snap-ro")
    volume = mounted(snapshot)
    server = start_server("--snapshot", str(volume), "--workers", "1")
    assert "checked whole: not prepared" in server.wait_for("serving snapshot snap-ro")
    named = [line for line in server.log if "is not prepared" in line]
    assert len(named) == 1 and f"`docsrv snapshot prepare {volume}` where it can be written" in named[0]
    assert [p["slug"] for p in server.json("/api/v2/project/?slug=pip")["results"]] == ["pip"]
    assert server.json("/api/v1/file/search/?q=installer")["objects"]
    assert sorted(path.name for path in volume.iterdir()) == sorted(path.name for path in snapshot.iterdir())


def test_prepare_on_a_read_only_snapshot_fails_in_one_line(tmp_path, mounted):
    volume = mounted(sealed(tmp_path / "snap", "snap-ro"))
    result = docsrv("snapshot", "prepare", str(volume))
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "Read-only file system" in result.stderr


def test_synth_into_a_read_only_directory_names_the_directory_asked_for(tmp_path, mounted):
    volume = mounted(sealed(tmp_path / "snap", "snap-ro"))
    result = docsrv("snapshot", "synth", "--scale", "demo", "--out", str(volume / "new"))
    assert result.returncode == 1
    assert result.stderr == f"docsrv: {volume / 'new'}: Read-only file system\n"


def test_an_index_named_by_a_relative_path_opens(tmp_path, monkeypatch):
    """The index is opened through links made elsewhere: they point at absolute paths, so a
    relative name of the index works too."""
    from pathlib import Path

    from docsrv.search.index_files import index_problem

    snapshot = sealed(tmp_path / "snap", "snap-relative")
    assert docsrv("index", str(snapshot)).returncode == 0
    monkeypatch.chdir(tmp_path)
    assert index_problem(Path("snap") / "index") is None
