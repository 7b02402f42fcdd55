"""A live replica against a hostile or broken origin (hardening, round five): what an origin
publishes can never damage what a replica holds, and every refusal is one line that says why."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import msgspec
import pytest
from snapshot_change import read, realistic_change, write

from docsrv.snapshot.records import Manifest
from docsrv.snapshot.write import write_manifest
from helpers import Origin, docsrv, poll

#: What a replica keeps beside its snapshots, and a name ending as what it writes aside does.
RESERVED = ["changesets", "head.json", "indexes", "index-shards", "current", "snap.partial"]


@pytest.fixture
def origin(tmp_path):
    running = Origin(tmp_path / "origin")
    yield running
    running.close()


def synth(directory: Path, name: str | None = None) -> Path:
    assert docsrv("snapshot", "synth", "--scale", "demo", "--out", str(directory)).returncode == 0
    if name is not None:
        manifest = json.loads((directory / "manifest.json").read_text())
        (directory / "manifest.json").write_text(json.dumps({**manifest, "name": name}))
    return directory


def pulled_replica(tmp_path: Path, origin: Origin) -> tuple[Path, Path]:
    """A demo snapshot published on ``origin`` and pulled into a replica: (the snapshot, the replica)."""
    base = synth(tmp_path / "s0")
    assert docsrv("snapshot", "publish", str(base), str(origin.root)).returncode == 0
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    return base, into


def entries(into: Path) -> dict[str, list[str]]:
    """What a replica holds: each entry of its directory, with what a snapshot's index holds (but
    the changesets a pull downloaded and has not taken, which it checks again before it does)."""
    return {path.name: sorted(p.name for p in path.rglob("*")) if path.is_dir() and not path.is_symlink() else []
            for path in sorted(into.iterdir()) if path.name != ".pull-changesets"}


def refused_in_one_line(result, text: str) -> bool:
    return result.returncode == 1 and result.stderr.count("\n") == 1 and text in result.stderr


@pytest.mark.parametrize("name", RESERVED)
def test_publish_refuses_a_snapshot_named_as_what_a_replica_keeps(tmp_path, origin, name):
    """Finding 2: a snapshot named ``changesets`` was published, and a replica pulling it could not
    start its server. Whole or as a changeset, publish refuses it in one line and writes nothing."""
    base = synth(tmp_path / "s0", name)
    refused = docsrv("snapshot", "publish", str(base), str(origin.root))
    assert refused_in_one_line(refused, f"the snapshot is named {name!r}"), refused.stderr
    assert not origin.root.exists()
    good = synth(tmp_path / "good")
    assert docsrv("snapshot", "publish", str(good), str(origin.root)).returncode == 0
    head = (origin.root / "head.json").read_bytes()
    changed = tmp_path / "s1"
    realistic_change(good, changed, name)
    refused = docsrv("snapshot", "publish", str(changed), str(origin.root), "--since", str(good))
    assert refused_in_one_line(refused, f"the snapshot is named {name!r}"), refused.stderr
    assert (origin.root / "head.json").read_bytes() == head and not (origin.root / "changesets").exists()


def published_as(origin: Origin, published: str, name: str) -> None:
    """Rename the base ``published`` on the origin to ``name``, as a hostile publisher would."""
    snapshots = origin.root / "snapshots"
    (snapshots / published).rename(snapshots / name)
    manifest = json.loads((snapshots / name / "manifest.json").read_text())
    (snapshots / name / "manifest.json").write_text(json.dumps({**manifest, "name": name}))
    head = json.loads((origin.root / "head.json").read_text())
    (origin.root / "head.json").write_text(json.dumps({**head, "base": name}))


@pytest.mark.parametrize("name", ["indexes", "changesets", "current", "snap.partial"])
def test_a_base_named_as_what_a_replica_keeps_is_refused_and_the_replica_is_unharmed(tmp_path, origin, name):
    """Finding 2: a base of such a name, pulled, damaged the replica for good (``indexes``
    silently deleted the search index of the snapshot it served). The pull refuses it in one line;
    the replica holds what it held, and pulls again once the origin is mended; a new replica
    keeps nothing of it."""
    base, into = pulled_replica(tmp_path, origin)
    held = entries(into)
    changed = tmp_path / "s1"
    realistic_change(base, changed, "snap-1")
    assert docsrv("snapshot", "publish", str(changed), str(origin.root)).returncode == 0  # a new base
    good_head = (origin.root / "head.json").read_bytes()
    published_as(origin, "snap-1", name)
    refused = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert refused_in_one_line(refused, f"the snapshot is named {name!r}"), refused.stderr
    assert entries(into) == held and (into / "current").resolve().name == "demo"
    fresh = tmp_path / "fresh"
    refused = docsrv("snapshot", "pull", origin.url, "--into", str(fresh))
    assert refused_in_one_line(refused, f"the snapshot is named {name!r}"), refused.stderr
    assert not fresh.exists() or not any(path.name == name for path in fresh.iterdir())
    # The origin mended: the replica pulls its base.
    published_as(origin, name, "snap-1")
    (origin.root / "head.json").write_bytes(good_head)
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0, pulled.stderr
    assert (into / "current").resolve().name == "snap-1"


def test_a_changeset_whose_product_is_named_as_what_a_replica_keeps_is_refused(tmp_path, origin):
    """Finding 2, in a fold: a changeset whose product would be named ``indexes`` (its header
    rewritten and sealed again by a hostile origin) is refused in one line, and nothing is kept."""
    base, into = pulled_replica(tmp_path, origin)
    held = entries(into)
    changed = tmp_path / "s1"
    realistic_change(base, changed, "snap-1")
    assert docsrv("snapshot", "publish", str(changed), str(origin.root), "--since", str(base)).returncode == 0
    resealed(origin, lambda data: data.replace(b'"product":{"name":"snap-1"', b'"product":{"name":"indexes"', 1), product="indexes")
    refused = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert refused_in_one_line(refused, "the snapshot is named 'indexes'"), refused.stderr
    assert entries(into) == held


def resealed(origin: Origin, change, **listed) -> None:
    """Rewrite the last changeset the origin lists with ``change`` (bytes to bytes), and seal it
    again in ``head.json`` (with ``listed`` for what the head says of it), as a hostile origin
    would: its size and SHA-256 are then right."""
    head = json.loads((origin.root / "head.json").read_text())
    path = origin.root / "changesets" / f"{head['changesets'][-1]['sequence']}.jsonl"
    data = change(path.read_bytes())
    assert data != path.read_bytes()
    path.write_bytes(data)
    head["changesets"][-1] |= {**listed, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (origin.root / "head.json").write_text(json.dumps(head))


def first_record_id(data: bytes, new: bytes) -> bytes:
    header, first, rest = data.split(b"\n", 2)
    return b"\n".join([header, re.sub(rb'"id":\d+', b'"id":' + new, first, count=1), rest])


def first_string(data: bytes, new: bytes) -> bytes:
    header, first, rest = data.split(b"\n", 2)
    return b"\n".join([header, re.sub(rb'"(slug|name|username|identifier)":"[^"]*"', rb'"\1":"' + new + b'"', first, count=1), rest])


@pytest.mark.parametrize(("change", "message"), [
    (lambda data: first_record_id(data, str(2**64).encode()), "Expected `int` <= 9223372036854775807"),
    (lambda data: first_record_id(data, str(2**63).encode()), "Expected `int` <= 9223372036854775807"),
    (lambda data: first_string(data, b"caf\xe9"), "not UTF-8"),
])
def test_a_changeset_of_ids_past_64_bits_or_text_not_utf8_is_refused_in_one_line(tmp_path, origin, change, message):
    """Finding 7: invalid UTF-8 gave a traceback in a one-shot pull, and ids of 2^64 and above
    were taken. Each is refused in one line naming the changeset's file and line; nothing is kept."""
    base, into = pulled_replica(tmp_path, origin)
    held = entries(into)
    changed = tmp_path / "s1"
    realistic_change(base, changed, "snap-1")
    assert docsrv("snapshot", "publish", str(changed), str(origin.root), "--since", str(base)).returncode == 0
    resealed(origin, change)
    refused = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert refused_in_one_line(refused, "2.jsonl:2: ") and message in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and entries(into) == held


@pytest.mark.parametrize("stale", ["same size", "shorter"])
def test_a_stale_partial_changeset_is_fetched_anew(tmp_path, origin, stale):
    """Finding 6: a refused changeset's file left in ``.pull-changesets`` blocked a later valid
    changeset of the same sequence and size for ever (the resume appended to the stale bytes).
    What a pull finds there is fetched anew when its digest fails, whole or resumed."""
    base, into = pulled_replica(tmp_path, origin)
    changed = tmp_path / "s1"
    realistic_change(base, changed, "snap-1")
    assert docsrv("snapshot", "publish", str(changed), str(origin.root), "--since", str(base)).returncode == 0
    size = (origin.root / "changesets" / "2.jsonl").stat().st_size
    (into / ".pull-changesets").mkdir()
    (into / ".pull-changesets" / "2.jsonl").write_bytes(b"x" * (size if stale == "same size" else size // 2))
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0, pulled.stderr
    assert held_name(into) == "snap-1"


def held_name(into: Path) -> str:
    """The state a replica holds: the last changeset kept after ``current``, or its snapshot."""
    kept = json.loads((into / "head.json").read_text())["changesets"] if (into / "head.json").exists() else []
    return kept[-1]["product"] if kept else (into / "current").resolve().name


def builds_flipped(old: Path, new: Path, name: str) -> None:
    """``new``: ``old`` with one build's state flipped, a changeset a server applies in memory."""
    shutil.copytree(old, new, ignore=shutil.ignore_patterns("index", "index.*", ".*", "*.msgpack"))
    builds = read(new, "builds")
    builds[0]["state"] = "building" if builds[0].get("state") != "building" else "finished"
    write(new, "builds", builds)
    manifest = msgspec.json.decode((new / "manifest.json").read_bytes(), type=Manifest)
    write_manifest(new, msgspec.structs.replace(manifest, name=name))


def version_edited(old: Path, new: Path, name: str) -> None:
    """``new``: ``old`` with a public version's name edited, a changeset a server applies in memory."""
    shutil.copytree(old, new, ignore=shutil.ignore_patterns("index", "index.*", ".*", "*.msgpack"))
    versions = read(new, "versions")
    edited = next(v for v in versions if v.get("privacy_level", "public") == "public")
    edited["verbose_name"] += " (edited)"
    write(new, "versions", versions)
    manifest = msgspec.json.decode((new / "manifest.json").read_bytes(), type=Manifest)
    write_manifest(new, msgspec.structs.replace(manifest, name=name))


def project_missing(base: Path, data: bytes) -> bytes:
    """The changeset's version line naming a project that does not exist."""
    line = next(line for line in data.split(b"\n") if b'"kind":"versions"' in line)
    return data.replace(line, re.sub(rb'"project":\d+', b'"project":987654321', line, count=1))


def other_project(base: Path, data: bytes) -> bytes:
    """The changeset's build line naming a project other than its version's."""
    projects = [p["id"] for p in read(base, "projects")]
    line = next(line for line in data.split(b"\n") if b'"kind":"builds"' in line)
    mine = int(re.search(rb'"project":(\d+)', line).group(1))
    return data.replace(line, re.sub(rb'"project":\d+', b'"project":%d' % next(p for p in projects if p != mine), line, count=1))


def missing_version(base: Path, data: bytes) -> bytes:
    line = next(line for line in data.split(b"\n") if b'"kind":"builds"' in line)
    return data.replace(line, re.sub(rb'"version":\d+', b'"version":987654321', line, count=1))


@pytest.mark.parametrize(("change", "message"), [
    (other_project, "but its version"),
    (missing_version, "names version 987654321, which does not exist"),
])
def test_a_changeset_that_does_not_follow_the_state_is_refused_and_servers_serve_on(tmp_path, origin, start_server, change, message):
    """Finding 1: a sealed changeset whose records do not hold together with the state it follows
    (a build under another project than its version's, or of a version that does not exist) was
    kept unchecked, and froze or crash-looped the servers. The pull checks it as a load checks a
    snapshot and refuses it in one line; the server following the replica serves on, ready, and
    takes the next good changeset."""
    base, into = pulled_replica(tmp_path, origin)
    server = start_server("--snapshot", str(into / "current"), "--watch", "--workers", "1")
    held = entries(into)
    changed = tmp_path / "s1"
    builds_flipped(base, changed, "snap-1")
    assert docsrv("snapshot", "publish", str(changed), str(origin.root), "--since", str(base)).returncode == 0
    resealed(origin, lambda data: change(base, data))
    refused = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert refused_in_one_line(refused, "2.jsonl (changeset 2) does not follow the state it applies to: ") and message in refused.stderr, \
        refused.stderr
    assert entries(into) == held
    ready = server.json("/readyz")
    assert (ready["status"], ready["snapshot"], ready["sequence"]) == ("ready", "demo", 1)
    # The origin mends: a good changeset 2 is taken, and served.
    (origin.root / "changesets" / "2.jsonl").unlink()
    head = json.loads((origin.root / "head.json").read_text())
    head["changesets"] = []
    (origin.root / "head.json").write_text(json.dumps(head))
    assert docsrv("snapshot", "publish", str(changed), str(origin.root), "--since", str(base)).returncode == 0
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0, pulled.stderr
    poll(lambda: server.json("/readyz")["sequence"] == 2, what="changeset 2 applied")


def test_a_worker_that_cannot_apply_a_kept_changeset_says_so_once_and_serves_on(tmp_path, origin, start_server):
    """Finding 1, in the servers: a changeset kept unchecked (by a pull before the check) made
    running workers stop following with no word, while /readyz said ready and current, and a
    fresh server exit. A worker that cannot apply it (here a build of a project that does not
    exist) logs it once, says so in /readyz and /metrics (its sequence stays behind), and serves
    what it has; a server started on it serves the state before it."""
    base, into = pulled_replica(tmp_path, origin)
    server = start_server("--snapshot", str(into / "current"), "--watch", "--workers", "1")
    project = server.json("/api/v2/project/?limit=1")["results"][0]["id"]
    changed = tmp_path / "s1"
    builds_flipped(base, changed, "snap-1")
    assert docsrv("snapshot", "publish", str(changed), str(origin.root), "--since", str(base)).returncode == 0
    resealed(origin, missing_project)
    (into / "changesets").mkdir()
    shutil.copyfile(origin.root / "changesets" / "2.jsonl", into / "changesets" / "2.jsonl")
    shutil.copyfile(origin.root / "head.json", into / "head.json")  # as a pull kept it, unchecked
    poll(lambda: server.json("/readyz")["follow_problem"] is not None, what="the problem said")
    ready = server.json("/readyz")
    assert (ready["status"], ready["snapshot"], ready["sequence"]) == ("ready", "demo", 1)
    assert ready["follow_problem"].startswith("changeset 2 cannot be applied to demo: KeyError"), ready["follow_problem"]
    metrics = server.get("/metrics").body.decode()
    assert "docsrv_follow_problem 1" in metrics and 'docsrv_snapshot_sequence{snapshot="demo"} 1' in metrics
    assert server.get(f"/api/v2/project/{project}/").status == 200
    said = sum("changeset not applied" in line for line in server.log)
    (into / "head.json").write_bytes((into / "head.json").read_bytes() + b" ")  # the head seen anew: not said again
    fresh = start_server("--snapshot", str(into / "current"), "--watch", "--workers", "1")
    assert (fresh.json("/readyz")["snapshot"], fresh.json("/readyz")["sequence"]) == ("demo", 1)
    assert fresh.get(f"/api/v2/project/{project}/").status == 200
    poll(lambda: fresh.json("/readyz")["follow_problem"] is not None, what="the problem said by the fresh server")
    assert said == 1 and sum("changeset not applied" in line for line in server.log) == 1, server.log


def missing_project(data: bytes) -> bytes:
    """The changeset's build line naming a project that does not exist."""
    line = next(line for line in data.split(b"\n") if b'"kind":"builds"' in line)
    return data.replace(line, re.sub(rb'"project":\d+', b'"project":987654321', line, count=1))


def replica_at_sequence_3(tmp_path: Path, origin: Origin) -> tuple[Path, list[Path], dict[int, bytes]]:
    """A base and two changesets published and pulled: (the replica, the snapshots, the origin's
    head at each sequence)."""
    states = [synth(tmp_path / "s0")]
    assert docsrv("snapshot", "publish", str(states[0]), str(origin.root)).returncode == 0
    heads = {1: (origin.root / "head.json").read_bytes()}
    for number in (1, 2):
        states.append(tmp_path / f"s{number}")
        builds_flipped(states[-2], states[-1], f"snap-{number}")
        assert docsrv("snapshot", "publish", str(states[-1]), str(origin.root), "--since", str(states[-2])).returncode == 0
        heads[number + 1] = (origin.root / "head.json").read_bytes()
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    assert held_name(into) == "snap-2"
    return into, states, heads


def test_a_stale_head_of_the_same_history_is_refused_and_nothing_is_fetched(tmp_path, origin):
    """Finding 3: a head rolled back to an earlier sequence (an edge cache's stale copy) was
    served silently, after the whole base was downloaded again. It is refused in one line; the
    replica keeps its state and fetches nothing."""
    into, _states, heads = replica_at_sequence_3(tmp_path, origin)
    held = entries(into)
    for sequence in (2, 1):
        (origin.root / "head.json").write_bytes(heads[sequence])
        origin.requests.clear()
        refused = docsrv("snapshot", "pull", origin.url, "--into", str(into))
        assert refused_in_one_line(refused, f"at sequence {sequence} ") and "behind the sequence 3 (snap-2)" in refused.stderr, \
            refused.stderr
        assert entries(into) == held and [name for name, _headers in origin.requests if name != "head.json"] == []
    (origin.root / "head.json").write_bytes(heads[3])
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0 and held_name(into) == "snap-2"


def test_a_rewritten_history_under_the_same_id_is_refused(tmp_path, origin):
    """Finding 3: sequences re-used with other content under the same history: refused in one
    line, the replica keeps what it serves."""
    into, states, heads = replica_at_sequence_3(tmp_path, origin)
    held = entries(into)
    history = json.loads(heads[3])["history"]
    other = Origin(tmp_path / "other")
    try:
        assert docsrv("snapshot", "publish", str(states[0]), str(other.root)).returncode == 0
        rewritten = tmp_path / "rewritten"
        version_edited(states[0], rewritten, "snap-1b")
        assert docsrv("snapshot", "publish", str(rewritten), str(other.root), "--since", str(states[0])).returncode == 0
        again = tmp_path / "again"
        builds_flipped(rewritten, again, "snap-2b")
        assert docsrv("snapshot", "publish", str(again), str(other.root), "--since", str(rewritten)).returncode == 0
        third = tmp_path / "third"
        builds_flipped(again, third, "snap-3b")
        assert docsrv("snapshot", "publish", str(third), str(other.root), "--since", str(again)).returncode == 0
        head = json.loads((other.root / "head.json").read_text())
        (other.root / "head.json").write_text(json.dumps({**head, "history": history}))
        refused = docsrv("snapshot", "pull", other.url, "--into", str(into))
        assert refused_in_one_line(refused, "the origin's history was rewritten"), refused.stderr
        assert entries(into) == held
    finally:
        other.close()


def test_a_new_history_is_followed_with_a_warning_and_a_base_held_is_not_fetched_again(tmp_path, origin):
    """Finding 3: an origin published anew (a new history id) with a lower sequence is followed,
    with a warning that names both histories; its base, which the replica holds, is not fetched."""
    into, states, heads = replica_at_sequence_3(tmp_path, origin)
    old = json.loads(heads[3])["history"]
    shutil.rmtree(origin.root)
    assert docsrv("snapshot", "publish", str(states[0]), str(origin.root)).returncode == 0
    new = json.loads((origin.root / "head.json").read_text())["history"]
    assert new != old and len(new) == 32
    origin.requests.clear()
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0, pulled.stderr
    assert f"the origin publishes history {new}, not {old} that this replica followed to snap-2 at sequence 3" in pulled.stderr
    assert held_name(into) == "demo" and (into / "current").resolve().name == "demo"
    assert [name for name, _headers in origin.requests if name.startswith("snapshots/") and not name.endswith("/manifest.json")] == []


def test_a_fold_that_fails_is_tried_again_after_a_pause_that_doubles(tmp_path, origin, monkeypatch, caplog):
    """Finding 5: a fold that failed was tried again every 2.5 s, without backoff (53 CPU-seconds
    in a minute). It is tried again after a pause that doubles with each failure, as the pulls
    are, and the pauses end once one succeeds."""
    import asyncio

    from docsrv.replica import kept as keeping
    from docsrv.replica import sidecar

    base, into = pulled_replica(tmp_path, origin)
    changed = tmp_path / "s1"
    builds_flipped(base, changed, "snap-1")
    assert docsrv("snapshot", "publish", str(changed), str(origin.root), "--since", str(base)).returncode == 0
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0 and held_name(into) == "snap-1"
    monkeypatch.setattr(keeping, "FOLD_CHANGESETS", 1)
    monkeypatch.setattr(sidecar, "FOLD_RETRY", sidecar.Backoff())
    tried: list[int] = []
    folding = keeping.fold_kept

    def failing(where):
        tried.append(1)
        raise OSError(28, "No space left on device")

    async def tend(times: int) -> None:
        task = None
        for _ in range(times):
            task = await sidecar.tend_fold(into, task)
            if task is not None:
                await asyncio.wait([task])

    caplog.set_level("INFO", logger="docsrv")
    monkeypatch.setattr(sidecar, "fold_kept", failing)
    asyncio.run(tend(20))
    assert len(tried) == 1 and "trying again in 5 s" in caplog.text  # not tried again within the pause
    sidecar.FOLD_RETRY.not_before = 0.0  # the pause over
    asyncio.run(tend(20))
    assert len(tried) == 2 and "trying again in 10 s" in caplog.text
    sidecar.FOLD_RETRY.not_before = 0.0
    monkeypatch.setattr(sidecar, "fold_kept", folding)
    asyncio.run(tend(3))
    assert (into / "current").resolve().name == "snap-1" and sidecar.FOLD_RETRY.failures == 0


def listed_again(origin: Origin, sequence: int, **fields) -> None:
    """Change what the origin's ``head.json`` says of changeset ``sequence`` (its own file unchanged)."""
    head = json.loads((origin.root / "head.json").read_text())
    for entry in head["changesets"]:
        if entry["sequence"] == sequence:
            entry |= fields
    (origin.root / "head.json").write_text(json.dumps(head))


def test_a_changeset_larger_than_a_publisher_writes_is_refused_before_it_is_fetched(tmp_path, origin):
    """Finding 8: a changeset had no maximum size (one of 60 MB held workers' event loops for
    tens of milliseconds while they applied it). A head that lists one past the bound is refused
    in one line, before anything is fetched; the replica keeps what it serves, and pulls again
    once the origin is mended."""
    from docsrv.snapshot.origin import MAX_CHANGESET_BYTES

    base, into = pulled_replica(tmp_path, origin)
    held = entries(into)
    changed = tmp_path / "s1"
    builds_flipped(base, changed, "snap-1")
    assert docsrv("snapshot", "publish", str(changed), str(origin.root), "--since", str(base)).returncode == 0
    good = (origin.root / "head.json").read_bytes()
    listed_again(origin, 2, size=MAX_CHANGESET_BYTES + 1)
    origin.requests.clear()
    refused = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert refused_in_one_line(refused, f"changeset 2 is {MAX_CHANGESET_BYTES + 1} bytes, more than the {MAX_CHANGESET_BYTES} a "
                                        "changeset may hold"), refused.stderr
    assert entries(into) == held and [name for name, _headers in origin.requests] == ["head.json"]
    (origin.root / "head.json").write_bytes(good)
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0 and held_name(into) == "snap-1"


def test_a_head_listing_more_changesets_than_a_publisher_writes_is_refused(tmp_path, origin):
    """Finding 8: 20,000 changesets listed in one head were fetched one at a time, and nothing
    was kept after minutes. A publisher lists at most ``MAX_CHANGESETS`` after a base (it
    publishes whole past that): a head that lists more is refused in one line, and nothing is
    fetched."""
    from docsrv.snapshot.origin import MAX_CHANGESETS

    _base, into = pulled_replica(tmp_path, origin)
    held = entries(into)
    head = json.loads((origin.root / "head.json").read_text())
    names = [head["base"], *(f"snap-{n}" for n in range(1, MAX_CHANGESETS + 2))]
    head["changesets"] = [{"sequence": n + 1, "follows": names[n - 1], "product": names[n], "size": 100, "sha256": "0" * 64}
                          for n in range(1, MAX_CHANGESETS + 2)]
    (origin.root / "head.json").write_text(json.dumps(head))
    origin.requests.clear()
    refused = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert refused_in_one_line(refused, f"lists {MAX_CHANGESETS + 1} changesets after its base and 0 leading to it: a publisher "
                                        f"lists at most {MAX_CHANGESETS}"), refused.stderr
    assert entries(into) == held and [name for name, _headers in origin.requests] == ["head.json"]


def test_publish_publishes_whole_a_changeset_past_the_size_bound(tmp_path, origin, monkeypatch):
    """Finding 8: the publisher respects the bound: a changeset that would be larger is not
    written; the snapshot is published whole, as a new base with nothing leading to it, and
    says why."""
    from docsrv.replica import publish as publishing

    base = synth(tmp_path / "s0")
    publishing.publish(base, origin.root)
    changed = tmp_path / "s1"
    builds_flipped(base, changed, "snap-1")
    monkeypatch.setattr(publishing, "MAX_CHANGESET_BYTES", 100)
    published = publishing.publish(changed, origin.root, since=base)
    assert (published.kind, published.name, published.sequence) == ("snapshot", "snap-1", 2)
    assert published.compacted.startswith("the changeset would hold ") and "more than the 100 a changeset may hold" in published.compacted
    head = json.loads((origin.root / "head.json").read_text())
    assert (head["base"], head["base_sequence"], head["changesets"], head.get("leading", [])) == ("snap-1", 2, [], [])
    assert not (origin.root / "changesets" / "2.jsonl").exists()


def test_a_replica_further_behind_than_a_fold_takes_the_base_whole(tmp_path, origin, monkeypatch):
    """Finding 8: a replica far behind fetched every changeset one after another, only to fold
    them. Past ``FOLD_CHANGESETS`` behind a base that the origin publishes, it takes the base
    whole and fetches none of the changesets before it; nearer, it fetches them."""
    import asyncio

    from docsrv.replica import pull as pulling
    from docsrv.replica.publish import publish

    states = [synth(tmp_path / "s0")]
    publish(states[0], origin.root)
    into = tmp_path / "replica"
    asyncio.run(pulling.pull(origin.url, into, progress=False))
    near = tmp_path / "near"
    shutil.copytree(into, near, symlinks=True)
    for number in (1, 2, 3):
        states.append(tmp_path / f"s{number}")
        builds_flipped(states[-2], states[-1], f"snap-{number}")
        publish(states[-1], origin.root, since=states[-2], compact_share=0.0 if number == 3 else 1.0)
    head = json.loads((origin.root / "head.json").read_text())
    assert (head["base"], [entry["sequence"] for entry in head["leading"]]) == ("snap-3", [2, 3, 4])
    monkeypatch.setattr(pulling, "FOLD_CHANGESETS", 2)
    origin.requests.clear()
    asyncio.run(pulling.pull(origin.url, into, progress=False))
    assert held_name(into) == "snap-3" and (into / "current").resolve().name == "snap-3"
    fetched = [name for name, _headers in origin.requests]
    assert "snapshots/snap-3/manifest.json" in fetched and not [name for name in fetched if name.startswith("changesets/")]
    monkeypatch.setattr(pulling, "FOLD_CHANGESETS", 3)  # three behind: not past it
    origin.requests.clear()
    asyncio.run(pulling.pull(origin.url, near, progress=False, fold_at=None))
    assert held_name(near) == "snap-3" and (near / "current").resolve().name == "demo"
    fetched = [name for name, _headers in origin.requests]
    assert sorted(name for name in fetched if name.startswith("changesets/")) == [f"changesets/{n}.jsonl" for n in (2, 3, 4)]
    assert not [name for name in fetched if name.startswith("snapshots/")]


def test_a_changeset_is_split_into_lines_a_piece_at_a_time_as_in_one_call(monkeypatch):
    """Finding 8: a worker reads a changeset beside its event loop, and splitting one of the largest
    size in one call held the GIL for tens of milliseconds. It is split a piece at a time, into
    the same lines, whatever falls at a piece's edge."""
    import random

    from docsrv.snapshot import changeset

    monkeypatch.setattr(changeset, "SPLIT_PIECE", 3)
    rng = random.Random(8)
    cases = [b"", b"\n", b"a", b"a\n", b"\n\n", b"ab\ncd\n", b"abcdefg\nh\n\nij"]
    cases += [bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(40))) for _ in range(500)]
    for data in cases:
        assert changeset.split_lines(data) == data.split(b"\n"), data
