"""Snapshots pulled from an origin (a real HTTP server on loopback): a fleet's path from a
published snapshot to a replica serving it, and every failure leaving the old one serving."""

import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading

import pytest

from conftest import ROOT
from helpers import Hammer, Origin, docsrv, poll, sealed


@pytest.fixture
def origin(tmp_path):
    running = Origin(tmp_path / "origin")
    yield running
    running.close()


def current_of(into):
    return os.readlink(into / "current")


def test_pull_serve_publish_again_and_the_server_follows_with_no_failed_request(tmp_path, origin, start_server):
    origin.publish(sealed(tmp_path / "a", "snap-a", "pip (a)"))
    into = tmp_path / "replica"
    first = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("pulled snapshot snap-a (6 files") and current_of(into) == "snap-a"
    assert (into / "snap-a" / "index" / "docsrv-index.json").exists()  # indexed before it became current
    server = start_server("--snapshot", str(into / "current"), "--watch", "--watch-interval", "0.2", "--workers", "2")
    assert not any("built the search index" in line for line in server.log)
    hammer = Hammer(server.port)
    hammer.start()
    poll(lambda: len(hammer.results) > 20, what="requests before the swap")
    origin.publish(sealed(tmp_path / "b", "snap-b", "pip (b)"))
    second = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert second.returncode == 0, second.stderr and current_of(into) == "snap-b"
    # The same pages as the snapshot served: its index's shards are linked, none built again.
    assert "snap-b: built 0 of the" in second.stderr, second.stderr
    shard = next((into / "snap-a" / "index" / "shards").iterdir()) / "highlight" / "text"
    assert shard.stat().st_ino == (into / "snap-b" / "index" / "shards" / shard.parent.parent.name / "highlight" / "text").stat().st_ino
    server.wait_for("reloaded: serving snapshot snap-b")
    poll(lambda: hammer.results and hammer.results[-1][2] == "snap-b", what="answers from snap-b")
    hammer.running = False
    hammer.join(timeout=30)
    assert hammer.failures == [] and all(status == 200 for _, status, _, _ in hammer.results)
    assert {(s, n) for _, _, s, n in hammer.results} == {("snap-a", "pip (a)"), ("snap-b", "pip (b)")}
    # An unchanged snapshot costs two small requests: no head.json (a snapshot published by hand),
    # then its manifest, conditionally.
    before = len(origin.requests)
    third = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert third.returncode == 0 and third.stdout.strip() == "snapshot snap-b is current; nothing to pull"
    assert [name for name, _ in origin.requests[before:]] == ["head.json", "manifest.json"]
    assert "If-None-Match" in origin.requests[-1][1]


def spoil_versions(directory):
    lines = (directory / "versions.jsonl").read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace('"project":4,', '"project":999,', 1)
    (directory / "versions.jsonl").write_text("".join(lines))


@pytest.mark.parametrize(("fault", "message"), [
    ({"manifest.json": "404"}, "manifest.json: HTTP 404 Not Found"),
    ({"pages.jsonl": "404"}, "pages.jsonl: HTTP 404 Not Found"),
    ({"builds.jsonl": "short"}, "builds.jsonl: 39442 bytes, but manifest.json records 78884 (truncated)"),
    ({"projects.jsonl": "corrupt"}, "projects.jsonl: its SHA-256 differs from the one manifest.json records (corrupt)"),
    ({"build_commands.jsonl": "drop"}, "build_commands.jsonl: transfer failed after"),
    ({"manifest.json": "close"}, "manifest.json: ServerDisconnectedError: Server disconnected"),
    ({"manifest.json": "loop"}, "manifest.json: more than 5 redirects"),
    ({"manifest.json": "file"}, "manifest.json: redirected to 'file:///etc/passwd', which is not an http(s) URL"),
    ({"users.jsonl": "close"}, "users.jsonl: transfer failed after 0 of"),
    ({"manifest.json": "drip"}, "manifest.json: not received within 1 s (--manifest-timeout)"),
    ({"projects.jsonl": "drip"}, "projects.jsonl: fewer than 1 KiB arrived in 1 s (--min-kib, --rate-window) after"),
    ("invalid", "snapshot snap-b has 6 problem(s): versions.jsonl:1: version 1 names project 999, which does not exist"),
])
def test_every_failure_leaves_current_where_it_was_and_says_what_failed(tmp_path, origin, fault, message):
    origin.publish(sealed(tmp_path / "a", "snap-a"))
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    origin.publish(sealed(tmp_path / "b", "snap-b", edit=spoil_versions if fault == "invalid" else None))
    if isinstance(fault, dict):
        origin.faults.update(fault)
    result = docsrv("snapshot", "pull", origin.url, "--into", str(into), "--manifest-timeout", "1", "--min-kib", "1", "--rate-window", "1")
    assert result.returncode == 1
    assert result.stderr.startswith("docsrv: pull failed: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr, result.stderr
    assert current_of(into) == "snap-a" and not (into / "snap-b").exists()
    if isinstance(fault, dict):  # once the origin is right again, the pull completes (resuming what it has)
        origin.faults.clear()
        again = docsrv("snapshot", "pull", origin.url, "--into", str(into))
        assert again.returncode == 0, again.stderr
        assert current_of(into) == "snap-b"


def test_an_interrupted_transfer_resumes_with_a_range_request(tmp_path, origin):
    origin.publish(sealed(tmp_path / "a", "snap-a"))
    origin.faults["build_commands.jsonl"] = "drop"
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 1
    origin.faults.clear()
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    ranged = [headers.get("Range") for name, headers in origin.requests if name == "build_commands.jsonl"]
    assert ranged[0] is None and ranged[-1] is not None and int(ranged[-1][len("bytes="):-1]) > 0, ranged
    assert json.loads((into / "snap-a" / "manifest.json").read_text())["name"] == "snap-a"


def test_a_full_disk_leaves_current_where_it_was(tmp_path, origin):
    origin.publish(sealed(tmp_path / "a", "snap-a"))
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    origin.publish(sealed(tmp_path / "b", "snap-b"))

    def small_files() -> None:  # as a full disk would: every write past 16 KB fails
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 10, 16 << 10))

    result = docsrv("snapshot", "pull", origin.url, "--into", str(into), preexec_fn=small_files)
    assert result.returncode == 1 and "File too large" in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert current_of(into) == "snap-a"


def test_keep_removes_older_snapshots_but_never_the_current_one(tmp_path, origin):
    into = tmp_path / "replica"
    for name in ("snap-1", "snap-2", "snap-3"):
        origin.publish(sealed(tmp_path / name, name))
        assert docsrv("snapshot", "pull", origin.url, "--into", str(into), "--keep", "2").returncode == 0
    assert sorted(p.name for p in into.iterdir() if not p.name.startswith(".")) == ["current", "snap-2", "snap-3"]
    assert current_of(into) == "snap-3"


def test_every_pulls_as_a_sidecar_until_stopped(tmp_path, origin):
    origin.publish(sealed(tmp_path / "a", "snap-a"))
    into = tmp_path / "replica"
    sidecar = subprocess.Popen([sys.executable, "-m", "docsrv", "snapshot", "pull", origin.url, "--into", str(into), "--every", "0.2"],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(sidecar.stderr), daemon=True)
    reader.start()
    try:
        poll(lambda: (into / "current").is_symlink() and current_of(into) == "snap-a", what="the first pull")
        origin.publish(sealed(tmp_path / "b", "snap-b"))
        poll(lambda: current_of(into) == "snap-b", what="the next pull")
        # The link is swapped inside the pull; the sidecar says so once the pull has returned.
        poll(lambda: any("pulled snapshot snap-b" in line for line in said), what="the sidecar's line on the next pull")
    finally:
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(timeout=30)
        reader.join(timeout=5)


def test_every_looks_again_at_once_after_a_look_longer_than_its_interval(tmp_path, origin):
    """``--every`` is a cadence from each look's start: a look that took longer (a slow origin
    here; a changeset whose index the sidecar built, in a live replica) is followed by the next at
    once, not after another pause, which a changeset published meanwhile would wait too."""
    origin.publish(sealed(tmp_path / "a", "snap-a"))
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    origin.faults["manifest.json"] = "slow"  # each look takes a second
    sidecar = subprocess.Popen([sys.executable, "-m", "docsrv", "snapshot", "pull", origin.url, "--into", str(into), "--every", "0.5"],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(iter(sidecar.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        poll(lambda: sum("snapshot snap-a is current; looking again in" in line for line in said) >= 2, what="two looks")
        assert all(line.rstrip().endswith("looking again in 0.0 s") for line in said if "is current" in line), said
        origin.faults.clear()  # a look takes milliseconds again: the next waits out the rest of the interval
        poll(lambda: any(re.search(r"looking again in 0\.[1-5] s$", line.rstrip()) for line in said), what="a pause")
    finally:
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(timeout=30)
        reader.join(timeout=5)


@pytest.mark.parametrize(("name", "files", "message"), [
    ("current", None, "the snapshot is named 'current', the name of the link a pull points"),
    (".pull-state.json", None, "not a snapshot manifest: Expected `str` matching regex"),
    ("..", None, "not a snapshot manifest: Expected `str` matching regex"),
    ("snap-b", {"a\u0000b": {"size": 1, "sha256": "0" * 64}}, "not a snapshot manifest: Expected `str` matching regex"),
    ("snap-b", {"../escape": {"size": 1, "sha256": "0" * 64}}, "not a snapshot manifest: Expected `str` matching regex"),
    ("snap-b", {".hidden": {"size": 1, "sha256": "0" * 64}}, "not a snapshot manifest: Expected `str` matching regex"),
])
def test_a_manifest_whose_names_would_collide_with_the_pull_s_own_is_refused(tmp_path, origin, name, files, message):
    """A snapshot's name is its directory under DIR: it can never be the current link, the pull's
    state file, or anything else the pull keeps there (issue 28), nor can a file name leave it."""
    origin.publish(sealed(tmp_path / "a", "snap-a"))
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    before = sorted(p.name for p in into.iterdir())
    origin.publish(sealed(tmp_path / "b", "snap-b"))
    manifest = json.loads((origin.root / "manifest.json").read_text())
    manifest["name"] = name
    if files is not None:
        manifest["files"] = files
    (origin.root / "manifest.json").write_text(json.dumps(manifest))
    result = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert current_of(into) == "snap-a" and (into / "current").is_symlink()
    assert sorted(p.name for p in into.iterdir()) == before
    # The replica is whole: the next good snapshot is pulled as ever.
    origin.publish(sealed(tmp_path / "c", "snap-c"))
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0 and current_of(into) == "snap-c"


def test_the_sidecar_outlives_every_kind_of_origin_failure(tmp_path, origin):
    """``--every`` logs each failure in one line and tries again: a disconnect, a redirect loop,
    a redirect off http(s), a manifest it cannot read; then the origin mends and it pulls."""
    origin.publish(sealed(tmp_path / "a", "snap-a"))
    into = tmp_path / "replica"
    sidecar = subprocess.Popen([sys.executable, "-m", "docsrv", "snapshot", "pull", origin.url, "--into", str(into), "--every", "0.2",
                                "--manifest-timeout", "1"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(sidecar.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        poll(lambda: (into / "current").is_symlink(), what="the first pull")
        for fault in ("close", "loop", "file", "drip"):
            origin.faults["manifest.json"] = fault
            seen = len(lines)
            poll(lambda seen=seen: any("pull failed" in line for line in lines[seen:]), what=f"a failure logged ({fault})")
            assert sidecar.poll() is None, "".join(lines)
        origin.faults.clear()
        origin.publish(sealed(tmp_path / "b", "snap-b"))
        poll(lambda: current_of(into) == "snap-b", what="the pull after the origin mended")
    finally:
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(timeout=30)
    failures = [line for line in lines if "pull failed" in line]
    assert failures and not any("Traceback" in line for line in lines), "".join(lines)


def index_files(snapshot):
    return sorted(str(p.relative_to(snapshot / "index")) for p in (snapshot / "index").rglob("*") if p.is_file() and not p.name.startswith("."))


def test_a_snapshot_indexed_by_its_publisher_is_pulled_with_its_index_and_builds_none(tmp_path, origin):
    """Issue 25: the index is built once, where the snapshot is made, and travels with it."""
    published = sealed(tmp_path / "a", "snap-a")
    indexed = docsrv("index", str(published))
    assert indexed.returncode == 0, indexed.stderr
    assert "manifest.json lists the index's" in indexed.stdout
    manifest = json.loads((published / "manifest.json").read_text())
    assert set(manifest["index"]) == set(index_files(published)) and "docsrv-index.json" in manifest["index"]
    assert "command-ranges" in manifest["index"]  # the scan of the build commands, done once (published.py)
    origin.publish(published)
    into = tmp_path / "replica"
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0, pulled.stderr
    replica = into / "snap-a"
    # The very files the publisher built (tantivy names each segment anew when it builds one).
    assert index_files(replica) == index_files(published)
    assert all((replica / "index" / name).read_bytes() == (published / "index" / name).read_bytes() for name in manifest["index"])
    assert any(name.startswith("index/") for name, _headers in origin.requests)
    # Checked as a server loads it, so the server's first load trusts the check and decodes the
    # records from the MessagePack the pull left (snapshot/binary.py).
    from docsrv.serve.served import load_served
    from docsrv.snapshot.load import read_snapshot

    assert read_snapshot(replica, progress=False, page_text=False).binary
    assert load_served(replica, progress=False).store.trusted


def test_an_older_snapshot_without_an_index_is_pulled_and_indexed(tmp_path, origin):
    origin.publish(sealed(tmp_path / "a", "snap-a"))
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    assert "docsrv-index.json" in index_files(into / "snap-a")
    assert not any(name.startswith("index/") for name, _headers in origin.requests)


def test_an_index_of_other_records_is_not_used_but_built_anew(tmp_path, origin):
    published = sealed(tmp_path / "a", "snap-a")
    assert docsrv("index", str(published)).returncode == 0
    marker = published / "index" / "docsrv-index.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "fingerprint": "0" * 32}))
    from docsrv.snapshot.write import seal_index

    seal_index(published, published / "index")  # sealed as it is: the transfer checks out, the content does not
    origin.publish(published)
    into = tmp_path / "replica"
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0, pulled.stderr
    assert "snap-a: the index it came with was built from other content, or cannot serve; building it anew" in pulled.stderr
    rebuilt = json.loads((into / "snap-a" / "index" / "docsrv-index.json").read_text())
    assert rebuilt["fingerprint"] != "0" * 32


@pytest.mark.parametrize("path", ["../escape", "entries/../../x", "/etc/passwd", "Entries/x", ".managed.json", "a/b/c/d/e",
                                  "shards/07/.hidden"])
def test_an_index_file_that_would_leave_the_index_directory_is_refused(tmp_path, origin, path):
    """The index a manifest lists is written under the pulled snapshot's index/: a name can hold
    up to three directories of the index (``shards/07/highlight/``), never a way out of it (issue 25)."""
    published = sealed(tmp_path / "a", "snap-a")
    assert docsrv("index", str(published)).returncode == 0
    origin.publish(published)
    manifest = json.loads((origin.root / "manifest.json").read_text())
    manifest["index"] = {**manifest["index"], path: {"size": 1, "sha256": "0" * 64}}
    (origin.root / "manifest.json").write_text(json.dumps(manifest))
    into = tmp_path / "replica"
    result = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "not a snapshot manifest: Expected `str` matching regex" in result.stderr and "$.index" in result.stderr
    assert not (tmp_path / "escape").exists() and not (into / "current").exists()


def break_meta(index):
    (index / "shards" / "00" / "pages" / "meta.json").write_text("{not json")


def drop_segment(index):
    segment = next(index.glob("shards/*/pages/*.idx"))
    for path in segment.parent.glob(f"{segment.stem}.*"):
        path.unlink()


def truncate_idx(index):
    path = next(index.glob("shards/*/pages/*.idx"))
    path.write_bytes(path.read_bytes()[:-20])


def truncate_highlights(index):
    path = next(path for path in sorted(index.glob("shards/*/highlight/text")) if path.stat().st_size > 7)  # a shard's with pages
    path.write_bytes(path.read_bytes()[:-7])


BROKEN_INDEXES = {
    "meta.json that does not parse": break_meta,
    "a segment listed but missing": drop_segment,
    "a truncated .idx": truncate_idx,
    "highlight text cut short": truncate_highlights,
}


def broken_but_sealed(tmp_path, name, damage):
    """A snapshot as a careless publisher sends it: indexed, its index then damaged, and sealed
    anew (the manifest's digests match the broken files)."""
    from docsrv.snapshot.write import seal_index

    snapshot = sealed(tmp_path / name, name)
    assert docsrv("index", str(snapshot)).returncode == 0
    damage(snapshot / "index")
    seal_index(snapshot, snapshot / "index")
    for path in snapshot.glob(".docsrv-*"):
        path.unlink()  # what a publisher keeps for itself is not published
    return snapshot


@pytest.mark.parametrize("damage", BROKEN_INDEXES.values(), ids=BROKEN_INDEXES.keys())
def test_a_broken_but_sealed_index_is_named_and_built_anew_by_the_pull(tmp_path, origin, damage):
    """Hardening round four, finding 2: the pull opens the index as a server will and searches
    it; one that cannot serve is named in one line and built anew, so no server crash-loops on it."""
    from docsrv.search.index_files import index_problem

    origin.publish(broken_but_sealed(tmp_path, "snap-b", damage))
    into = tmp_path / "replica"
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0, pulled.stderr
    assert current_of(into) == "snap-b" and "Traceback" not in pulled.stderr
    named = [line for line in pulled.stderr.splitlines() if "the search index cannot serve" in line]
    assert len(named) == 1 and named[0].endswith("; not used")
    assert "snap-b: the index it came with was built from other content, or cannot serve; building it anew" in pulled.stderr
    assert index_problem(into / "snap-b" / "index") is None


@pytest.mark.parametrize("damage", BROKEN_INDEXES.values(), ids=BROKEN_INDEXES.keys())
def test_a_served_index_that_cannot_serve_is_not_built_from(tmp_path, origin, damage):
    """The next snapshot's index is built from the served one's shards, linked: the served one
    damaged since it was checked is named in one line, and the next one is built whole."""
    from docsrv.search.index_files import index_problem

    into = tmp_path / "replica"
    origin.publish(sealed(tmp_path / "a", "snap-a"))
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    damage(into / "snap-a" / "index")
    origin.publish(sealed(tmp_path / "b", "snap-b"))
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0, pulled.stderr
    assert current_of(into) == "snap-b" and "Traceback" not in pulled.stderr
    named = [line for line in pulled.stderr.splitlines() if "the search index cannot serve" in line]
    assert len(named) == 1 and f"{into / 'current' / 'index'}: the search index cannot serve" in named[0], named
    assert named[0].endswith("; not used") and "shards of the search index again" not in pulled.stderr
    assert index_problem(into / "snap-b" / "index") is None


@pytest.mark.parametrize("damage", BROKEN_INDEXES.values(), ids=BROKEN_INDEXES.keys())
def test_serve_on_a_broken_index_builds_its_own_and_searches(tmp_path, start_server, damage):
    snapshot = broken_but_sealed(tmp_path, "snap-b", damage)
    server = start_server("--snapshot", str(snapshot), "--workers", "1")
    assert sum("the search index cannot serve" in line for line in server.log) == 1
    found = server.json("/api/v1/file/search/?q=installer")["objects"]
    assert [hit["path"] for hit in found][:1] == ["index.html"] and '<span class="highlighted">installer</span>' in found[0]["text"]
