"""A replica that follows an origin's changesets (``snapshot publish --since``, ``snapshot pull``):
what it serves equals what a server started fresh on the same snapshot serves, reply for reply,
and a changeset it cannot trust is never applied (DECISIONS.md section 7)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from pathlib import Path

import msgspec
import pytest
from crawl import crawl
from snapshot_change import KINDS, read, realistic_change, stamp, write

from conftest import Client, InProcessServer, Response
from docsrv.serve.served import signature
from docsrv.snapshot.records import Manifest
from docsrv.snapshot.write import write_manifest
from docsrv.store.changes import Applied
from docsrv.store.loaded import load_store
from helpers import Origin, docsrv, poll


@pytest.fixture
def origin(tmp_path):
    running = Origin(tmp_path / "origin")
    yield running
    running.close()


#: The public URL of the servers compared: links name it, not each server's port.
PUBLIC_URL = "https://api.example.org"


def synth(directory: Path) -> Path:
    assert docsrv("snapshot", "synth", "--scale", "demo", "--out", str(directory)).returncode == 0
    return directory


def renamed(directory: Path, name: str) -> None:
    manifest = msgspec.json.decode((directory / "manifest.json").read_bytes(), type=Manifest)
    counts = {kind: len(read(directory, kind)) for kind in KINDS if kind != "relationships" or read(directory, kind)}
    write_manifest(directory, msgspec.structs.replace(manifest, name=name, counts={**manifest.counts, **counts}))


def random_change(old: Path, new: Path, name: str, rng: random.Random) -> None:
    """``new``: ``old`` with one change of every kind, chosen by ``rng``: a project edited and one
    added, a version deleted, one with pages made private and one renamed (its slug), builds added
    (with commands) and one's state changed, commands added to an existing build, pages edited,
    added and deleted."""
    shutil.copytree(old, new, ignore=shutil.ignore_patterns("index", "index.*", ".*", "*.msgpack"))
    records = {kind: read(new, kind) for kind in KINDS}
    ids = {kind: max((r["id"] for r in records[kind]), default=0) for kind in KINDS}
    public_projects = [p for p in records["projects"] if p.get("privacy_level", "public") == "public"]
    project = rng.choice(public_projects)
    project["description"] = f"{project.get('description', '')} Edited {rng.randrange(1000)}."
    added = dict(project, id=ids["projects"] + 1, slug=f"added-{ids['projects'] + 1}", name=f"Added {ids['projects'] + 1}")
    records["projects"].append(added)
    versions = [v for v in records["versions"] if v.get("privacy_level", "public") == "public"]
    doomed = rng.choice(versions)
    records["versions"].remove(doomed)
    gone_builds = {b["id"] for b in records["builds"] if b["version"] == doomed["id"]}
    records["builds"] = [b for b in records["builds"] if b["id"] not in gone_builds]
    records["build_commands"] = [c for c in records["build_commands"] if c["build"] not in gone_builds]
    records["pages"] = [p for p in records["pages"] if p["version"] != doomed["id"]]
    # One with pages made private, and one renamed: a version that moves is not applied in memory, and the pull folds it.
    paged = {p["version"] for p in records["pages"]}
    hidden, moved = rng.sample([v for v in records["versions"] if v.get("privacy_level", "public") == "public" and v["id"] in paged], 2)
    hidden["privacy_level"] = "private"
    moved["slug"] = f"{moved['slug']}-moved"
    live = [v for v in records["versions"] if v.get("privacy_level", "public") == "public"]
    latest = max(datetime.fromisoformat(b["date"].replace("Z", "+00:00")) for b in records["builds"])
    for number in range(rng.randrange(1, 4)):
        version = rng.choice(live)
        when = latest + timedelta(minutes=number + 1)
        build = {"id": ids["builds"] + 1 + number, "project": version["project"], "version": version["id"], "date": stamp(when),
                 "state": rng.choice(["triggered", "building", "finished"]), "commit": f"{rng.getrandbits(160):040x}"}
        records["builds"].append(build)
        for step in range(2):
            ids["build_commands"] += 1
            records["build_commands"].append({"id": ids["build_commands"], "build": build["id"], "command": f"step {step}",
                                              "start_time": stamp(when), "end_time": stamp(when + timedelta(seconds=1))})
    existing = rng.choice([b for b in records["builds"] if b["id"] <= ids["builds"]])
    existing["state"] = "finished" if existing.get("state") != "finished" else "building"
    ids["build_commands"] += 1
    started = datetime.fromisoformat(existing["date"].replace("Z", "+00:00")) + timedelta(hours=1)
    late = {"id": ids["build_commands"], "build": existing["id"], "command": "late step", "start_time": stamp(started),
            "end_time": stamp(started + timedelta(seconds=2))}
    commands = records["build_commands"]
    after = max((place for place, command in enumerate(commands) if command["build"] == existing["id"]), default=len(commands) - 1)
    commands.insert(after + 1, late)  # a build's commands are next to each other in their file
    if records["pages"]:
        page = rng.choice(records["pages"])
        page["title"] = f"{page.get('title', '')} (revised)"
        page["text"] = f"{page.get('text', '')} Install it with pip, revised."
        records["pages"].append(dict(page, id=ids["pages"] + 1, path=f"added-{ids['pages'] + 1}.html"))
        records["pages"].remove(rng.choice(records["pages"][:-1]))
    for kind in KINDS:
        write(new, kind, records[kind])
    renamed(new, name)


def folded_change(old: Path, new: Path, name: str) -> None:
    """``new``: a realistic change of ``old`` in which a version also moves (its slug): no server
    applies it in memory, and the pull folds it into the snapshot it makes."""
    realistic_change(old, new, name)
    versions = read(new, "versions")
    moved = next(v for v in versions if v.get("privacy_level", "public") == "public")
    moved["slug"] = f"{moved['slug']}-moved"
    write(new, "versions", versions)
    renamed(new, name)


def replica_and_change(tmp_path: Path, origin: Origin) -> tuple[Path, Path, Path]:
    """A snapshot published whole and pulled into a replica, and a change of it that the pull
    folds (not published): (the snapshot, the replica, the changed snapshot)."""
    base = synth(tmp_path / "s0")
    docsrv("snapshot", "publish", str(base), str(origin.root))
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    second = tmp_path / "s1"
    folded_change(base, second, "snap-1")
    return base, into, second


def assert_serves_the_same(replica: Path, fresh: Path) -> int:
    """Every reply of the crawl, from a server on ``replica`` and one started on ``fresh``: the same
    status, headers (Date aside) and body. Returns how many were compared."""
    from docsrv.config import Settings

    urls = crawl(fresh)
    settings = Settings(public_url=PUBLIC_URL)
    followed, started = InProcessServer(replica, settings), InProcessServer(fresh, settings)
    try:
        assert_same_replies(followed, started, urls)
    finally:
        followed.stop()
        started.stop()
    return len(urls)


def assert_serves_as_fresh(server: Client, snapshot: Path, urls: list[str]) -> None:
    """``server`` (a replica following changesets, started with the public URL below) counts and
    answers each URL as a server started fresh on ``snapshot`` does."""
    from docsrv.config import Settings

    fresh = InProcessServer(snapshot, Settings(public_url=PUBLIC_URL))
    try:
        assert server.json("/readyz")["counts"] == fresh.json("/readyz")["counts"]
        assert_same_replies(server, fresh, urls)
    finally:
        fresh.stop()


def followed_replica(tmp_path: Path, origin: Origin, start_server: Callable[..., Client],
                     made: Callable[[Path], None] = lambda _base: None) -> tuple[Path, Path, Client]:
    """A demo snapshot (changed by ``made``) published whole, pulled into a replica, and a server
    following it (one worker, ``--watch``): (the snapshot, the replica, the server)."""
    base = synth(tmp_path / "s0")
    made(base)
    assert docsrv("snapshot", "publish", str(base), str(origin.root)).returncode == 0
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    return base, into, start_server("--snapshot", str(into / "current"), "--watch", "--workers", "1", "--public-url", PUBLIC_URL)


def warm(server: Client, urls: list[str]) -> None:
    """Ask ``server`` (of one worker) for each URL: a warm cache."""
    with server.kept_alive() as kept:
        for url in urls:
            kept.get(url)


def assert_same_replies(ours: Client, theirs: Client, urls: list[str]) -> None:
    """Each URL answered alike by both (each of one worker): status, body, and every header but Date."""
    with ours.kept_alive() as ours_kept, theirs.kept_alive() as theirs_kept:
        for url in urls:
            assert_same_reply(url, ours_kept.get(url), theirs_kept.get(url))


def assert_same_reply(url: str, mine: Response, fresh: Response) -> None:
    assert (mine.status, mine.body) == (fresh.status, fresh.body), url
    assert {k: v for k, v in mine.headers.items() if k != "Date"} == {k: v for k, v in fresh.headers.items() if k != "Date"}, url


def test_a_replica_that_follows_changesets_serves_what_a_fresh_server_on_each_snapshot_serves(tmp_path, origin):
    base = synth(tmp_path / "s0")
    assert docsrv("snapshot", "publish", str(base), str(origin.root)).returncode == 0
    into = tmp_path / "replica"
    first = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert first.returncode == 0, first.stderr
    rng = random.Random(34)
    previous = base
    for round_ in range(1, 4):
        new = tmp_path / f"s{round_}"
        random_change(previous, new, f"snap-{round_}", rng)
        published = docsrv("snapshot", "publish", str(new), str(origin.root), "--since", str(previous))
        assert published.returncode == 0, published.stderr
        assert published.stdout.startswith(f"published changeset {round_ + 1} of ")
        before = len(origin.requests)
        served = (into / "current").resolve()
        identity = signature(served)
        pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
        assert pulled.returncode == 0, pulled.stderr
        assert pulled.stdout.startswith(f"pulled snapshot snap-{round_} (1 changeset(s) and 0 files")
        # Pages changed: the shards of the versions whose pages changed are built again, the others linked.
        rebuilt = re.search(rf"snap-{round_}: built (\d+) of the (\d+) shards of the search index again", pulled.stderr)
        assert rebuilt is not None and 0 < int(rebuilt[1]) < int(rebuilt[2]), pulled.stderr
        # The snapshot served until now is untouched (not even a link made to its files, which
        # would move their change time): a server watching it sees no change of it.
        assert signature(served) == identity
        assert [name for name, _ in origin.requests[before:]] == ["head.json", f"changesets/{round_ + 1}.jsonl"]  # nothing else
        assert (into / "current").resolve().name == f"snap-{round_}"
        # Prepared as it is served: a server's load trusts the pull's check (the files the product
        # shares with older snapshots were linked, and those snapshots removed, before it).
        assert load_store(into / "current", page_text=False, progress=False).trusted
        assert assert_serves_the_same(into / "current", new) > 300
        server = InProcessServer(into / "current")
        try:
            ready = server.json("/readyz")
            assert (ready["snapshot"], ready["sequence"]) == (f"snap-{round_}", round_ + 1)
            assert f'docsrv_snapshot_sequence{{snapshot="snap-{round_}"}} {round_ + 1}' in server.get("/metrics").body.decode()
        finally:
            server.stop()
        previous = new


def builds_change(old: Path, new: Path, name: str, rng: random.Random, flips: int = 3, moves: int = 1) -> None:
    """``new``: ``old`` with changes of builds and their commands alone, as the service makes them
    every few seconds, chosen by ``rng``: ``flips`` states flipped, ``moves`` builds moved in their lists (a
    new date; the last also a new commit), builds added with commands (one of a private version, one of a private project's
    public version: neither is ever served), a
    build deleted with its commands, a command added to a build and one edited."""
    shutil.copytree(old, new, ignore=shutil.ignore_patterns("index", "index.*", ".*", "*.msgpack"))
    records = {kind: read(new, kind) for kind in ("projects", "versions", "builds", "build_commands")}
    builds, commands = records["builds"], records["build_commands"]
    for build in rng.sample(builds, flips):
        build["state"] = "finished" if build.get("state") != "finished" else "building"
    for moved in rng.sample(builds, min(moves, len(builds))):
        moved["date"] = stamp(datetime.fromisoformat(moved["date"].replace("Z", "+00:00")) + timedelta(days=rng.randrange(1, 900)))
    moved["commit"] = f"{rng.getrandbits(160):040x}"
    doomed = rng.choice(builds)
    builds.remove(doomed)
    commands[:] = [c for c in commands if c["build"] != doomed["id"]]
    versions = records["versions"]
    # Hidden: a private version, and a public version of a private project (private through its parent).
    private_projects = {p["id"] for p in records["projects"] if p.get("privacy_level", "public") != "public"}
    hidden = [v for v in versions if v.get("privacy_level", "public") != "public"][:1]
    hidden += [v for v in versions if v.get("privacy_level", "public") == "public" and v["project"] in private_projects][:1]
    assert len(hidden) == 2
    chosen = [rng.choice([v for v in versions if v.get("privacy_level", "public") == "public"]) for _ in range(2)] + hidden
    next_build, next_command = max(b["id"] for b in builds) + 1, max(c["id"] for c in commands) + 1
    latest = max(datetime.fromisoformat(b["date"].replace("Z", "+00:00")) for b in builds)
    for number, version in enumerate(chosen):
        when = latest + timedelta(minutes=number + 1)
        builds.append({"id": next_build, "project": version["project"], "version": version["id"], "date": stamp(when),
                       "state": "building", "commit": f"{rng.getrandbits(160):040x}"})
        for step in range(2):
            commands.append({"id": next_command, "build": next_build, "command": f"step {step}", "start_time": stamp(when),
                             "end_time": stamp(when + timedelta(seconds=1))})
            next_command += 1
        next_build += 1
    existing = rng.choice([b for b in builds if any(c["build"] == b["id"] for c in commands)])
    mine = [place for place, c in enumerate(commands) if c["build"] == existing["id"]]
    commands[mine[0]] = dict(commands[mine[0]], output=f"edited {rng.randrange(1000)}")
    started = datetime.fromisoformat(existing["date"].replace("Z", "+00:00"))
    commands.insert(mine[-1] + 1, {"id": next_command, "build": existing["id"], "command": "late step", "start_time": stamp(started),
                                   "end_time": stamp(started + timedelta(seconds=2))})
    write(new, "builds", builds)
    write(new, "build_commands", commands)
    renamed(new, name)


def test_a_server_applies_changesets_of_builds_in_memory_and_serves_what_a_fresh_server_serves(tmp_path, origin, start_server):
    """The heart of a live replica: a server on ``current`` with --watch applies each changeset of
    builds in memory, without a reload, and then answers every request as a server started fresh
    on the snapshot the changeset makes: status, headers (Date aside), body. Its reply cache was
    warm: a reply a changeset touched is made anew, every other keeps its body and takes the new
    snapshot's name. A restart serves the same state."""
    base, into, server = followed_replica(tmp_path, origin, start_server)
    worker = server.json("/readyz")["worker"]
    rng = random.Random(35)
    previous = base
    for round_ in range(1, 4):
        new = tmp_path / f"s{round_}"
        # The third moves every build.
        builds_change(previous, new, f"snap-{round_}", rng, flips=40 if round_ == 3 else 3, moves=1000 if round_ == 3 else 1)
        urls = crawl(previous, new)
        warm(server, urls)  # what a changeset touches must be made anew
        assert docsrv("snapshot", "publish", str(new), str(origin.root), "--since", str(previous)).returncode == 0
        pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
        assert pulled.returncode == 0, pulled.stderr
        assert (into / "current").resolve().name == "demo"  # kept after the snapshot served, not folded into a new one
        assert json.loads((into / "head.json").read_bytes())["changesets"][-1]["product"] == f"snap-{round_}"
        poll(lambda sequence=round_ + 1: server.json("/readyz")["sequence"] == sequence, what=f"changeset {round_ + 1} applied")
        ready = server.json("/readyz")
        # Applied in memory: the same worker, no reload.
        assert (ready["snapshot"], ready["worker"], ready["reloads"]) == (f"snap-{round_}", worker, 0)
        metrics = server.get("/metrics").body.decode()
        assert f'docsrv_snapshot_sequence{{snapshot="snap-{round_}"}} {round_ + 1}' in metrics
        assert f'docsrv_changeset_age_seconds{{snapshot="snap-{round_}"}} ' in metrics
        assert_serves_as_fresh(server, new, urls)
        previous = new
    server.stop()
    # A restart applies the three changesets kept, composed into one, before it forks: the same replies.
    restarted = start_server("--snapshot", str(into / "current"), "--watch", "--workers", "1", "--public-url", PUBLIC_URL)
    assert (restarted.json("/readyz")["snapshot"], restarted.json("/readyz")["sequence"]) == ("snap-3", 4)
    assert_serves_as_fresh(restarted, previous, urls)


def test_changesets_that_arrive_together_are_applied_at_once_and_serve_what_a_fresh_server_serves(tmp_path, origin, start_server):
    """Two changesets kept by one pull are composed and applied in one step by a running worker,
    which logs each; its replies are those of a fresh server on the second one's product."""
    base, into, server = followed_replica(tmp_path, origin, start_server)
    rng = random.Random(11)
    first, second = tmp_path / "s1", tmp_path / "s2"
    builds_change(base, first, "snap-1", rng, flips=5, moves=3)
    builds_change(first, second, "snap-2", rng, flips=5, moves=3)
    urls = crawl(base, first, second)
    warm(server, urls)
    for old, new in ((base, first), (first, second)):
        assert docsrv("snapshot", "publish", str(new), str(origin.root), "--since", str(old)).returncode == 0
    start = len(server.log)
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    assert [e["sequence"] for e in json.loads((into / "head.json").read_bytes())["changesets"]] == [2, 3]
    poll(lambda: server.json("/readyz")["sequence"] == 3, what="changesets 2 and 3 applied")
    # The log is read in a thread of its own: its lines may come after /readyz says so.
    poll(lambda: any("applied changeset 3:" in line for line in server.log[start:]), what="changeset 3's log line")
    applied = [line for line in server.log[start:] if "applied changeset" in line]
    assert [line.split("applied changeset ")[1].split(":")[0] for line in applied] == ["2", "3"]
    assert all(": serving snap-2, " in line for line in applied)  # one step: the state after both
    assert_serves_as_fresh(server, second, urls)


def test_a_server_applies_changesets_of_pages_in_memory_with_the_index_the_pull_builds(tmp_path, origin, start_server, caplog,
                                                                                     monkeypatch):
    """Pages applied in memory: the pull keeps a changeset that changes pages (retitled, text
    edited, moved, added, deleted; with every other kind of change) and builds the index of the
    state it makes, only the shards its pages are in built again; the server applies it without a
    reload, and every reply, doc search, file search and anchor search included, equals that of a
    fresh server on the snapshot it makes (which builds its index whole). Two changesets pulled
    together have one index built, of the last one's state, and are applied at once. A restart serves the same state, and a fold of the kept
    changesets finds the index of their last state current: it builds no shard again, though the
    pull removes that index while the fold runs (a sidecar goes on keeping changesets)."""
    from docsrv.replica import kept as keeping
    from docsrv.replica.changeset_index import prune_indexes
    from docsrv.replica.kept import finish_fold, fold_kept

    base, into, server = followed_replica(tmp_path, origin, start_server, with_subproject)
    worker = server.json("/readyz")["worker"]
    rng = random.Random(17)
    states = [base]
    for number in range(1, 4):
        states.append(tmp_path / f"s{number}")
        random_in_place_change(states[-2], states[-1], f"snap-{number}", rng, pages=True)
    urls = crawl(*states)
    warm(server, urls)
    for pulled_up_to in (1, 3):
        for number in range(server.json("/readyz")["sequence"], pulled_up_to + 1):
            assert docsrv("snapshot", "publish", str(states[number]), str(origin.root), "--since", str(states[number - 1])).returncode == 0
        pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
        assert pulled.returncode == 0, pulled.stderr
        assert (into / "current").resolve().name == "demo"  # kept, not folded
        built = re.findall(r"changeset (\d+): built (\d+) of the (\d+) shards", pulled.stderr)
        assert [sequence for sequence, *_counts in built] == [str(pulled_up_to + 1)]  # of two pulled at once, the last one's alone
        assert all(0 < int(count) < int(shards) for _sequence, count, shards in built), built
        poll(lambda up_to=pulled_up_to: server.json("/readyz")["sequence"] == up_to + 1, what=f"changeset {pulled_up_to + 1} applied")
        ready = server.json("/readyz")
        assert (ready["snapshot"], ready["worker"], ready["reloads"]) == (f"snap-{pulled_up_to}", worker, 0)
        assert_serves_as_fresh(server, states[pulled_up_to], urls)
        # The shards built again replace those the worker was forked with: it lets go of them
        # (their files mapped, their readers' memory), as it lets go of the state it moved on from.
        served = index_files(into / "indexes" / str(pulled_up_to + 1))
        poll(lambda served=served: mapped_index_files(worker) <= served,
             what=lambda served=served: f"files of shards mapped that the index no longer holds: {mapped_index_files(worker) - served}")
    assert sorted(p.name for p in (into / "indexes").iterdir()) == ["2", "4"]  # of each pull: a worker needs the last
    # Each index's shards are links to the shards built for a changeset, or to the snapshot's
    # index's: those built for changesets whose indexes went are gone, unless linked to still.
    assert "4" in {p.name for p in (into / "index-shards").iterdir()} <= {"2", "4"}
    for index in ("2", "4"):
        assert all(shard.is_symlink() and (shard / "shard.json").is_file() for shard in (into / "indexes" / index / "shards").iterdir())
    # A shard the second index kept from the first is the first's link itself (a hard link of it);
    # one built again is a link of its own, to the shards built for it.
    built_again = {p.name for p in (into / "index-shards" / "4" / "shards").iterdir()}
    for shard in (into / "indexes" / "4" / "shards").iterdir():
        was = into / "indexes" / "2" / "shards" / shard.name
        if shard.name in built_again:
            assert shard.resolve() == (into / "index-shards" / "4" / "shards" / shard.name).resolve() and not (
                was.exists() and os.path.samestat(shard.lstat(), was.lstat()))
        else:
            assert os.path.samestat(shard.lstat(), was.lstat()) and shard.lstat().st_nlink == 2, shard.name
    assert built_again and built_again < {p.name for p in (into / "indexes" / "4" / "shards").iterdir()}
    server.stop()
    restarted = start_server("--snapshot", str(into / "current"), "--watch", "--workers", "1", "--public-url", PUBLIC_URL)
    assert restarted.json("/readyz")["sequence"] == 4
    assert_serves_as_fresh(restarted, states[3], urls)
    restarted.stop()
    caplog.set_level("INFO", logger="docsrv")
    applying = keeping.apply_changesets

    def pruned_meanwhile(*args, **kwargs):
        prune_indexes(into, set())
        return applying(*args, **kwargs)

    monkeypatch.setattr(keeping, "apply_changesets", pruned_meanwhile)
    folded = fold_kept(into)
    assert folded is not None and finish_fold(into, folded)
    assert re.search(r"snap-3: built 0 of the \d+ shards of the search index again", caplog.text), caplog.text
    assert sorted(p.name for p in (into / "indexes").iterdir()) == []  # the kept changesets' indexes went with them
    assert not any((into / "index-shards").iterdir())  # and the shards built for them


def mapped_index_files(pid: int) -> set[int]:
    """The inodes of the files of an index's shards (``<index>/shards/<key>/...``) process ``pid`` maps."""
    found = re.findall(r"^\S+ \S+ \S+ \S+ (\d+) +/\S+/shards/\d+/\S+$", Path(f"/proc/{pid}/maps").read_text(), re.MULTILINE)
    return {int(inode) for inode in found}


def index_files(index: Path) -> set[int]:
    """The inodes of the files of the shards of ``index`` (links followed)."""
    return {path.stat().st_ino for shard in (index / "shards").iterdir() for path in shard.resolve().rglob("*") if path.is_file()}


def published_pages_change(tmp_path: Path, origin: Origin, base: Path) -> Path:
    """A change of pages and every other kind made of ``base`` and published after it: its changeset is 2."""
    new = tmp_path / "pages-changed"
    random_in_place_change(base, new, "snap-1", random.Random(23), pages=True)
    assert docsrv("snapshot", "publish", str(new), str(origin.root), "--since", str(base)).returncode == 0
    return new


def test_a_changeset_with_a_page_that_is_no_page_is_refused_in_one_line_and_nothing_is_kept(tmp_path, origin):
    """A changeset that upserts what is no page (the origin's fault; its seal matches) fails the
    pull in one line naming the changeset's file and line, before any index is built of it: the
    replica keeps what it had, without the changeset or an index of it."""
    base, into, _second = replica_and_change(tmp_path, origin)
    published_pages_change(tmp_path, origin, base)
    path, head_path = origin.root / "changesets" / "2.jsonl", origin.root / "head.json"
    lines = path.read_bytes().split(b"\n")
    at = next(n for n, line in enumerate(lines) if line.startswith(b'{"op":"upsert","kind":"pages"'))
    change = json.loads(lines[at])
    change["record"]["title"] = 5
    lines[at] = json.dumps(change).encode()
    path.write_bytes(b"\n".join(lines))
    head = json.loads(head_path.read_text())
    head["changesets"][0].update(size=path.stat().st_size, sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    head_path.write_text(json.dumps(head))
    failed = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert failed.returncode == 1 and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert f"changeset 2.jsonl has 1 problem(s): 2.jsonl:{at + 1}: Expected `str`, got `int` - at `$.title`" in failed.stderr
    assert (into / "current").resolve().name == "demo"
    assert json.loads((into / "head.json").read_bytes())["changesets"] == []
    assert not any((into / "indexes").glob("*"))


def test_a_kept_changeset_whose_index_cannot_be_opened_is_not_applied_and_the_server_says_why(tmp_path, origin, start_server):
    """A changeset of pages is applied only with the index the pull built of what it makes: one
    whose index was damaged since (a shard's file gone) is not applied; a server starting on the
    replica serves the state before it, and says why in one line."""
    base, into, server = followed_replica(tmp_path, origin, start_server)
    server.stop()
    published_pages_change(tmp_path, origin, base)
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0, pulled.stderr
    built = [path for path in (into / "index-shards" / "2").rglob("*") if path.is_file()
             and path.parent.name == "pages" and path.name != "meta.json"]
    assert built  # the segments of the shards built again for it; its index links to their directories
    assert all(shard.is_symlink() for shard in (into / "indexes" / "2" / "shards").iterdir())
    for path in built:
        path.unlink()
    restarted = start_server("--snapshot", str(into / "current"), "--watch", "--workers", "1", "--public-url", PUBLIC_URL)
    ready = restarted.json("/readyz")
    assert (ready["snapshot"], ready["sequence"]) == ("demo", 1)
    said = [line for line in restarted.log if "changeset not applied" in line]
    assert said and str(into / "indexes" / "2") in said[0] and said[0].rstrip().endswith("; serving demo"), said


def versions_edited(old: Path, new: Path, name: str, rng: random.Random, private: bool = False) -> None:
    """``new``: ``old`` with versions edited in place, as a build's end edits them (a renamed one
    moves in its lists, one made inactive or active changes lists, a new identifier, built), a
    private version edited too (never served); with ``private``, a served version that has pages
    made private."""
    shutil.copytree(old, new, ignore=shutil.ignore_patterns("index", "index.*", ".*", "*.msgpack"))
    versions = read(new, "versions")
    public = [v for v in versions if v.get("privacy_level", "public") == "public"]
    renamed_one, flipped_one, rebuilt = rng.sample(public, 3)
    renamed_one["verbose_name"] = f"v{rng.randrange(100)}.{rng.randrange(100)} (renamed)"
    flipped_one["active"] = not flipped_one.get("active", True)
    rebuilt.update(identifier=f"{rng.getrandbits(160):040x}", built=not rebuilt.get("built", False))
    hidden = next(v for v in versions if v.get("privacy_level", "public") != "public")
    hidden["verbose_name"] = "hidden, renamed"
    if private:
        paged = {p["version"] for p in read(new, "pages")}
        next(v for v in public if v not in (renamed_one, flipped_one, rebuilt) and v["id"] in paged)["privacy_level"] = "private"
    write(new, "versions", versions)
    renamed(new, name)


def with_subproject(base: Path) -> None:
    """``base`` with a project whose page says "install" a subproject of another public project
    that has a version of the same slug (whose doc search for "install", as crawled, then finds
    the subproject's page), and a project without pages a subproject of it too."""
    public = {p["id"] for p in read(base, "projects") if p.get("privacy_level", "public") == "public"}
    versions = {v["id"]: v for v in read(base, "versions")}
    page = next(p for p in read(base, "pages") if p["project"] in public and re.search(r"\binstall\b", p.get("text", "")))
    slug = versions[page["version"]]["slug"]
    parent = next(v["project"] for v in versions.values() if v["slug"] == slug and v["project"] in public - {page["project"]})
    paged = {p["project"] for p in read(base, "pages")}
    pageless = min(public - paged - {parent})
    write(base, "relationships", [{"id": 1, "parent": parent, "child": page["project"]}, {"id": 2, "parent": parent, "child": pageless}])
    renamed(base, "demo")


def projects_and_users_changed(old: Path, new: Path, name: str, rng: random.Random, private: bool = False) -> None:
    """``new``: ``old`` with projects edited in place (a subproject's language, another's
    description, one losing a user and gaining a new one, a private one), users changed (one
    renamed, one added, one deleted), the subproject moved to another parent that has a version
    of the same slug, new records as the service makes them (a project with its first version
    and build, a version of another project), and records without pages taken away: a project
    made private (with its versions and builds), a version made private and one deleted (with
    its builds); with ``private``, a served project that has pages made private."""
    shutil.copytree(old, new, ignore=shutil.ignore_patterns("index", "index.*", ".*", "*.msgpack"))
    projects, users, versions, builds = (read(new, kind) for kind in ("projects", "users", "versions", "builds"))
    pages = read(new, "pages")
    public = [p for p in projects if p.get("privacy_level", "public") == "public"]
    relationships = read(new, "relationships")
    relationship = next(r for r in relationships if r["child"] in {p["project"] for p in pages})
    rest = [r for r in relationships if r is not relationship]
    relanguaged = next(p for p in public if p["id"] == relationship["child"])
    slugs = {v["slug"] for v in versions if v["project"] == relationship["child"]}
    parent = rng.choice([p for p in public if p["id"] not in (relationship["parent"], relationship["child"])
                         and any(v["project"] == p["id"] and v["slug"] in slugs for v in versions)])
    moved = dict(relationship, id=max(r["id"] for r in relationships) + 1, parent=parent["id"], alias="moved")
    write(new, "relationships", [*rest, moved])
    described = rng.choice([p for p in public if p not in (relanguaged, parent)])
    regrouped = rng.choice([p for p in public if p.get("users") and p not in (described, relanguaged, parent)])
    described.update(description=f"Edited {rng.randrange(1000)}.", modified_date=stamp(datetime(2026, 11, 26, tzinfo=UTC)))
    relanguaged["language"] = "fr" if relanguaged.get("language", "en") != "fr" else "de"
    newcomer = {"id": max(u["id"] for u in users) + 1, "username": f"newcomer-{rng.randrange(1000)}"}
    leaving = regrouped["users"][0]
    regrouped["users"] = [*regrouped["users"][1:], newcomer["id"]]
    next(p for p in projects if p.get("privacy_level", "public") != "public")["description"] = "Private, edited."
    named = {user for p in projects for user in p.get("users", [])}
    renamed_user = rng.choice([u for u in users if u["id"] != leaving])
    renamed_user["username"] += "-renamed"
    users = [u for u in users if u["id"] != leaving or u["id"] in named] + [newcomer]
    kept = (relanguaged, parent, described, regrouped)
    paged = {p["project"] for p in pages} | {p["version"] for p in pages}
    pageless = [p for p in public if p not in kept and p["id"] not in paged]  # a subproject first
    next((p for p in pageless if p["id"] in {r["child"] for r in rest}), rng.choice(pageless))["privacy_level"] = "private"
    shown = {p["id"] for p in projects if p.get("privacy_level", "public") == "public"}
    spare = [v for v in versions if v.get("privacy_level", "public") == "public" and v["project"] in shown
             and v["project"] not in {p["id"] for p in kept} and v["id"] not in paged]
    hidden, deleted = rng.sample(spare, 2)
    hidden["privacy_level"] = "private"
    gone = {b["id"] for b in builds if b["version"] == deleted["id"]}
    write(new, "build_commands", [c for c in read(new, "build_commands") if c["build"] not in gone])
    if private:
        next(p for p in public if p not in kept and p["id"] in paged)["privacy_level"] = "private"
    ids = {kind: max(r["id"] for r in records) + 1 for kind, records in (("projects", projects), ("versions", versions),
                                                                          ("builds", builds))}
    created = {"id": ids["projects"], "name": "Created", "slug": f"created-{ids['projects']}", "users": [newcomer["id"]],
               "pub_date": "2026-11-26T00:00:00Z", "modified_date": "2026-11-26T00:00:00Z"}
    first = {"id": ids["versions"], "project": created["id"], "slug": "latest", "verbose_name": "latest", "active": True}
    tagged = {"id": ids["versions"] + 1, "project": described["id"], "slug": f"v{ids['versions']}.0", "verbose_name": f"v{ids['versions']}.0",
              "active": True, "type": "tag"}
    build = {"id": ids["builds"], "project": created["id"], "version": first["id"], "date": "2026-11-26T00:00:01Z",
             "state": "building", "commit": f"{rng.getrandbits(160):040x}"}
    write(new, "projects", [*projects, created])
    write(new, "versions", [*(v for v in versions if v is not deleted), first, tagged])
    write(new, "builds", [*(b for b in builds if b["id"] not in gone), build])
    write(new, "users", users)
    renamed(new, name)


@pytest.mark.parametrize(("change", "seed"), [(versions_edited, 12), (projects_and_users_changed, 21)])
def test_changes_of_projects_and_versions_are_applied_in_memory_those_that_take_pages_away_with_the_index(
        tmp_path, origin, start_server, change, seed):
    """A changeset that edits versions in place, or one that edits projects in place (a
    subproject, a new language, users moved), changes users (renamed, added, deleted), moves a
    subproject, adds a project and versions and takes some without pages away, with builds each,
    is applied in memory by a worker with a warm cache (its header says ``in_place``): every
    crawled reply equals a fresh server's. One that makes a version or project with pages
    private is not in place but ``unmoved``: the pull builds the index of what it makes and keeps
    it, and the worker applies it with that index, without a reload: it has left every reply,
    doc search included."""
    base, into, server = followed_replica(tmp_path, origin, start_server, with_subproject)
    worker = server.json("/readyz")["worker"]
    rng = random.Random(seed)
    builds, edited, private = tmp_path / "s1", tmp_path / "s2", tmp_path / "s3"
    builds_change(base, builds, "snap-1-builds", rng)
    change(builds, edited, "snap-1", rng)
    shutil.rmtree(builds)
    change(edited, private, "snap-2", rng, private=True)
    urls = crawl(base, edited, private)
    warm(server, urls)
    for sequence, (old, new, in_place) in enumerate(((base, edited, True), (edited, private, False)), start=2):
        assert docsrv("snapshot", "publish", str(new), str(origin.root), "--since", str(old)).returncode == 0
        header = json.loads((origin.root / "changesets" / f"{sequence}.jsonl").read_bytes().split(b"\n", 1)[0])
        assert (header.get("in_place", False), header.get("unmoved", False)) == (in_place, True)
        pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
        assert pulled.returncode == 0, pulled.stderr
        assert (into / "current").resolve().name == "demo"  # kept beside the snapshot served
        built = re.findall(r"changeset (\d+): built \d+ of the \d+ shards", pulled.stderr)  # a shard whose pages all left is gone
        assert built == ([] if in_place else [str(sequence)]), pulled.stderr
        poll(lambda sequence=sequence: server.json("/readyz")["sequence"] == sequence, what=f"changeset {sequence} served")
        assert (server.json("/readyz")["worker"], server.json("/readyz")["reloads"]) == (worker, 0)  # in memory
        assert_serves_as_fresh(server, new, urls)


@pytest.mark.parametrize("change", [versions_edited, projects_and_users_changed])
def test_a_header_that_claims_in_place_for_a_version_or_project_made_private_is_not_believed(tmp_path, origin, start_server, change):
    """Privacy does not rest on the header: a changeset whose header says ``in_place`` while it
    makes a served version or project that has pages private is found out by the pull, which
    checks the claim against the state it holds, and folded at once into the snapshot it makes
    (hardening round five, finding 4: it was kept, and every later changeset waited behind it
    until the fold at 200 kept). The next changeset of pages is applied in memory as ever. A
    worker given such a changeset all the same (kept by an earlier docsrv, which believed the
    header) does not apply it in memory: it says so and serves the state before. Every reply,
    doc search included, is a fresh server's on the snapshot served."""
    base, into, server = followed_replica(tmp_path, origin, start_server, with_subproject)
    rng = random.Random(13)
    states = [base, *(tmp_path / f"s{number}" for number in range(1, 5))]
    change(states[0], states[1], "snap-1", rng, private=True)
    random_in_place_change(states[1], states[2], "snap-2", rng, pages=True)
    random_in_place_change(states[2], states[3], "snap-3", rng, pages=True)
    change(states[3], states[4], "snap-4", rng, private=True)
    urls = crawl(*states)
    publish_claiming_in_place(states[0], states[1], origin)
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0 and "2.jsonl (changeset 2): its header's claim is false (" in pulled.stderr, pulled.stderr
    assert (into / "current").resolve().name == "snap-1"  # folded at once
    poll(lambda: (server.json("/readyz")["snapshot"], server.json("/readyz")["sequence"]) == ("snap-1", 2), what="the fold served")
    assert_serves_as_fresh(server, states[1], urls)
    for number in (2, 3):
        assert docsrv("snapshot", "publish", str(states[number]), str(origin.root), "--since", str(states[number - 1])).returncode == 0
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0 and "changeset 4: built" in pulled.stderr, pulled.stderr
    poll(lambda: server.json("/readyz")["sequence"] == 4, what="changesets 3 and 4 applied")
    assert_serves_as_fresh(server, states[3], urls)
    publish_claiming_in_place(states[3], states[4], origin)
    start = len(server.log)
    shutil.copyfile(origin.root / "changesets" / "5.jsonl", into / "changesets" / "5.jsonl")  # kept as an earlier docsrv kept it
    kept = json.loads((into / "head.json").read_bytes())
    kept["changesets"].append(json.loads((origin.root / "head.json").read_bytes())["changesets"][-1])
    (into / "head.json").write_text(json.dumps(kept))
    line = server.wait_for("changes what is not applied in memory", start=start)
    assert line.rstrip().endswith("changeset 5 changes what is not applied in memory: serving snap-3 until the pull's snapshot of it")
    assert (server.json("/readyz")["sequence"], server.json("/readyz")["waiting_for"]) == (4, 5)
    assert_serves_as_fresh(server, states[3], urls)


def publish_claiming_in_place(old: Path, new: Path, origin: Origin) -> None:
    """Publish the changeset from ``old`` to ``new`` (which takes pages away) with a header that
    claims ``in_place``, sealed again as the origin's."""
    assert docsrv("snapshot", "publish", str(new), str(origin.root), "--since", str(old)).returncode == 0
    head = json.loads((origin.root / "head.json").read_bytes())
    path = origin.root / "changesets" / f"{head['changesets'][-1]['sequence']}.jsonl"
    header, rest = path.read_bytes().split(b"\n", 1)
    assert b'"in_place"' not in header
    forged = header[:-1] + b',"in_place":true}\n' + rest
    path.write_bytes(forged)
    head["changesets"][-1].update(size=len(forged), sha256=hashlib.sha256(forged).hexdigest())
    (origin.root / "head.json").write_text(json.dumps(head))


def test_a_changeset_is_applied_without_a_collection_and_a_worker_freezes_nothing(tmp_path, origin, monkeypatch):
    """A changeset is applied with the garbage collector held (``serve.following.uncollected``): no
    collection can run while its lists are made; the collector is on again after. A worker that
    serves freezes nothing: a connection's objects in a cycle, alive while it applied, holding the
    state they began with, are collected once they are garbage, and that state with them (frozen,
    each changeset kept megabytes for the worker's life). A generation, before it forks, freezes
    what it made, out of every later collection's reach, as a loaded store is."""
    import gc
    import weakref

    from docsrv.serve import following

    _first, into = replica_keeping_a_changeset(tmp_path, origin, 3)
    collecting: list[bool] = []
    applying = following.applied

    def watched(*args, **kwargs):
        collecting.append(gc.isenabled())
        return applying(*args, **kwargs)

    monkeypatch.setattr(following, "applied", watched)
    enable = gc.enable
    applied_alive: list[int] = []

    def enabled() -> None:  # what a collection would read at once: the change applied is gone before it
        applied_alive.append(sum(isinstance(o, Applied) for o in gc.get_objects()))
        enable()

    connection: list = [load_store(into / "current", page_text=False)]
    connection.append(connection)  # a cycle that holds the state served, as a request under way does
    began_with = weakref.ref(connection[0])
    monkeypatch.setattr(gc, "enable", enabled)
    assert gc.isenabled()
    done = following.step(into, connection[0])
    assert [entry.sequence for entry in done.entries] == [2] and done.store.name == "snap-1"
    assert collecting == [False] and gc.isenabled() and applied_alive == [0]
    del connection, done
    gc.collect()
    assert began_with() is None

    done = following.step(into, load_store(into / "current", page_text=False), freeze=True)
    made = [done.store.builds_ordered, done.store.versions_ordered, done.store.builds]
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(o) in tracked for o in made)  # frozen: no generation holds them


def test_a_worker_notes_the_keys_its_changeset_names_and_every_reply_past_the_bound(tmp_path, origin, monkeypatch):
    """A worker notes in its reply cache the keys of the replies a changeset applied in memory
    changes: those its header names for the edge (``purge_keys``). Past MAX_CHANGE_KEYS the
    header names every reply (``EVERY_REPLY``), and so does the worker, which would otherwise note
    hundreds of thousands of keys one by one on its event loop for a changeset of the largest size."""
    from docsrv.edge import keys
    from docsrv.serve import following

    _first, into = replica_keeping_a_changeset(tmp_path, origin, 3)
    named = json.loads((into / "changesets" / "2.jsonl").read_bytes().splitlines()[0])["purge_keys"]
    done = following.step(into, load_store(into / "current", page_text=False))
    assert sorted(done.touched) == named and len(named) > 20
    monkeypatch.setattr(keys, "MAX_CHANGE_KEYS", len(named) - 1)
    done = following.step(into, load_store(into / "current", page_text=False))
    assert [entry.sequence for entry in done.entries] == [2] and done.touched == ["search", "v1", "v2"]


def test_a_kept_changeset_that_fails_its_seal_is_never_applied_and_a_new_worker_serves_what_its_peers_serve(
    tmp_path, origin, start_server
):
    """A ``head.json`` that does not read, or a changeset rewritten in the replica's directory
    after the pull checked it, is not applied: the worker says so in one line and serves what it
    had; once the file is whole again, it
    applies it. A worker killed after that is replaced by one serving the same state."""
    base = synth(tmp_path / "s0")
    assert docsrv("snapshot", "publish", str(base), str(origin.root)).returncode == 0
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    server = start_server("--snapshot", str(into / "current"), "--watch", "--workers", "1")
    new = tmp_path / "s1"
    builds_change(base, new, "snap-1", random.Random(7))
    assert docsrv("snapshot", "publish", str(new), str(origin.root), "--since", str(base)).returncode == 0
    shutil.copytree(into, tmp_path / "pulled", symlinks=True)
    assert docsrv("snapshot", "pull", origin.url, "--into", str(tmp_path / "pulled")).returncode == 0
    whole = (tmp_path / "pulled" / "changesets" / "2.jsonl").read_bytes()
    start = len(server.log)
    (into / "head.json").write_bytes(b'{"format": "docsrv-origin", "changesets": [')  # a list cut short
    line = server.wait_for("changeset not applied", start=start)
    assert "head.json: not an origin's head" in line and line.rstrip().endswith("; serving demo")
    (into / "changesets").mkdir()
    (into / "changesets" / "2.jsonl").write_bytes(whole.replace(b'"state":"building"', b'"state":"finished"', 1))
    start = len(server.log)
    shutil.copy(tmp_path / "pulled" / "head.json", into / "head.json")
    line = server.wait_for("changeset not applied", start=start)
    assert "2.jsonl: its size or SHA-256 differs from the one head.json records; serving demo" in line
    assert (server.json("/readyz")["snapshot"], server.json("/readyz")["sequence"]) == ("demo", 1)
    (into / "changesets" / "2.jsonl").write_bytes(whole)
    shutil.copy(tmp_path / "pulled" / "head.json", into / "head.json.new")
    (into / "head.json.new").replace(into / "head.json")
    poll(lambda: server.json("/readyz")["sequence"] == 2, what="changeset 2 applied once whole")
    worker = server.json("/readyz")["worker"]
    os.kill(worker, signal.SIGKILL)
    poll(lambda: (ready := server.get("/readyz")).status == 200 and json.loads(ready.body)["worker"] != worker, what="a new worker")
    assert (server.json("/readyz")["snapshot"], server.json("/readyz")["sequence"]) == ("snap-1", 2)


def replica_keeping_a_changeset(tmp_path: Path, origin: Origin, seed: int) -> tuple[Path, Path]:
    """A demo snapshot published and pulled, then a change of builds and of versions edited in
    place published after it, which the pull keeps: (the changed snapshot, the replica)."""
    base = synth(tmp_path / "s0")
    docsrv("snapshot", "publish", str(base), str(origin.root))
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    first, builds = tmp_path / "s1", tmp_path / "s1-builds"
    builds_change(base, builds, "snap-1-builds", random.Random(seed))
    versions_edited(builds, first, "snap-1", random.Random(seed))
    docsrv("snapshot", "publish", str(first), str(origin.root), "--since", str(base))
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    return first, into


def readdressed(old: Path, new: Path, origin: Origin) -> Path:
    """``new`` (snapshot snap-2): ``old`` at another public URL (a change no server applies in
    memory, and that keeps the search index), published after it."""
    shutil.copytree(old, new)
    renamed(new, "snap-2")
    manifest = msgspec.json.decode((new / "manifest.json").read_bytes(), type=Manifest)
    write_manifest(new, msgspec.structs.replace(manifest, public_url="https://docs.example.net"))
    docsrv("snapshot", "publish", str(new), str(origin.root), "--since", str(old))
    return new


def test_a_changeset_of_other_kinds_is_folded_into_a_snapshot_that_shares_the_search_index(tmp_path, origin):
    """A changeset that a server does not apply in memory (a new public URL, here with a build) is
    folded with those kept before it (builds, and versions edited in place) into the snapshot
    they make, which ``current`` then names. Its pages are those of the snapshot before, in the
    same places: it shares that one's index files (the same inodes), and no index is built."""
    first, into = replica_keeping_a_changeset(tmp_path, origin, 1)
    assert (into / "current").resolve().name == "demo" and (into / "changesets" / "2.jsonl").is_file()
    second = readdressed(first, tmp_path / "s2", origin)
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
    assert (into / "current").resolve().name == "snap-2"
    assert json.loads((into / "head.json").read_bytes())["changesets"] == []
    assert not list((into / "changesets").iterdir())
    before, after = into / "demo" / "index", into / "snap-2" / "index"
    shared = [path.relative_to(after) for path in after.rglob("*")
              if path.is_file() and not path.name.startswith(".") and path.name != "docsrv-index.json"]
    assert len(shared) > 10
    assert all((before / name).stat().st_ino == (after / name).stat().st_ino for name in shared)
    assert json.loads((after / "docsrv-index.json").read_bytes())["snapshot"] == "snap-2"  # its own marker
    assert_serves_the_same(into / "current", second)


def test_a_fold_onto_a_snapshot_whose_pages_file_was_spoiled_fails_in_one_line_and_keeps_current(tmp_path, origin):
    """A page file of the replica's snapshot spoiled after its pull (a line that is no record):
    the fold of the changesets kept after it fails in one line that names the file, builds no
    index from it, and ``current`` stays."""
    first, into = replica_keeping_a_changeset(tmp_path, origin, 2)
    pages = into / "demo" / "pages.jsonl"
    pages.write_bytes(pages.read_bytes() + b"not a record\n")
    readdressed(first, tmp_path / "s2", origin)
    failed = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1 and "pages.jsonl" in failed.stderr, failed.stderr
    assert (into / "current").resolve().name == "demo"


def test_a_new_replica_takes_the_base_and_every_changeset_and_compaction_makes_a_new_base(tmp_path, origin):
    base = synth(tmp_path / "s0")
    docsrv("snapshot", "publish", str(base), str(origin.root))
    second = tmp_path / "s1"
    folded_change(base, second, "snap-1")
    docsrv("snapshot", "publish", str(second), str(origin.root), "--since", str(base))
    into = tmp_path / "replica"
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout.startswith("pulled snapshot snap-1 (1 changeset(s) and 6 files")
    assert_serves_the_same(into / "current", second)
    # A change that, with the changesets since the base, holds more than a quarter of the base's
    # bytes (every build changed) is published whole: the new base.
    third = tmp_path / "s2"
    folded_change(second, third, "snap-2")
    write(third, "builds", [dict(build, length=build.get("length", 0) + 1) for build in read(third, "builds")])
    renamed(third, "snap-2")
    compacted = docsrv("snapshot", "publish", str(third), str(origin.root), "--since", str(second))
    assert compacted.returncode == 0, compacted.stderr
    assert compacted.stdout.startswith("published snapshot snap-2 whole as sequence 3: the changesets since base demo")
    head = json.loads((origin.root / "head.json").read_text())
    assert (head["base"], head["base_sequence"], head["changesets"]) == ("snap-2", 3, [])
    # Its changeset is published too, leading from the old base to the new one.
    assert [(c["sequence"], c["follows"], c["product"]) for c in head["leading"]] == [(2, "demo", "snap-1"), (3, "snap-1", "snap-2")]
    assert sorted(p.name for p in (origin.root / "snapshots").iterdir()) == ["demo", "snap-2"]  # the base before it stays
    # A replica on the old chain reaches the new base by its changeset; a new one takes it whole.
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert pulled.returncode == 0 and pulled.stdout.startswith("pulled snapshot snap-2 (1 changeset(s) and 0 files"), pulled.stdout
    assert_serves_the_same(into / "current", third)
    fresh = tmp_path / "new-replica"
    pulled = docsrv("snapshot", "pull", origin.url, "--into", str(fresh))
    assert pulled.returncode == 0 and pulled.stdout.startswith("pulled snapshot snap-2 (6 files"), pulled.stdout
    assert_serves_the_same(fresh / "current", third)


@pytest.mark.parametrize(("fault", "message"), [
    ("digest", "changesets/2.jsonl: its SHA-256 differs from the one head.json records (corrupt); the file was removed"),
    ("malformed", "changeset 2.jsonl has 1 problem(s): 2.jsonl:3: Expected `object`, got `int`"),
    ("gap", "head.json: changeset 3 comes after 1 (a gap)"),
    ("base", "head.json: changeset 2 follows elsewhere, not demo (another base)"),
])
def test_a_changeset_that_cannot_be_trusted_is_never_applied(tmp_path, origin, fault, message):
    base, into, second = replica_and_change(tmp_path, origin)
    docsrv("snapshot", "publish", str(second), str(origin.root), "--since", str(base))
    path, head_path = origin.root / "changesets" / "2.jsonl", origin.root / "head.json"
    head = json.loads(head_path.read_text())
    if fault == "digest":
        path.write_bytes(path.read_bytes().replace(b"Now with more.", b"Now with less."))
    elif fault == "malformed":
        lines = path.read_bytes().split(b"\n")
        lines[2] = b"17"
        path.write_bytes(b"\n".join(lines))
        head["changesets"][0].update(size=path.stat().st_size, sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    elif fault == "gap":
        head["changesets"][0]["sequence"] = 3
    else:
        head["changesets"][0]["follows"] = "elsewhere"
    head_path.write_text(json.dumps(head))
    failed = docsrv("snapshot", "pull", origin.url, "--into", str(into))
    assert failed.returncode == 1
    assert failed.stderr.strip().startswith("docsrv: pull failed: ") and message in failed.stderr, failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    assert (into / "current").resolve().name == "demo"  # nothing applied: the replica serves what it had
    assert sorted(p.name for p in into.iterdir() if not p.name.startswith(".")) == ["current", "demo", "head.json"]


def test_publish_refuses_what_the_origin_does_not_follow(tmp_path, origin):
    base = synth(tmp_path / "s0")
    second = tmp_path / "s1"
    realistic_change(base, second, "snap-1")
    refused = docsrv("snapshot", "publish", str(second), str(origin.root), "--since", str(base))
    assert "publishes nothing yet" in refused.stderr and not origin.root.exists()
    docsrv("snapshot", "publish", str(base), str(origin.root))
    other = tmp_path / "other"
    realistic_change(base, other, "other")
    docsrv("snapshot", "publish", str(second), str(origin.root), "--since", str(base))
    refused = docsrv("snapshot", "publish", str(other), str(origin.root), "--since", str(base))
    assert f"{origin.root} publishes snapshot snap-1, not demo" in refused.stderr
    again = docsrv("snapshot", "publish", str(second), str(origin.root), "--since", str(base))
    assert f"{origin.root} already publishes snapshot snap-1 (sequence 2)" in again.stderr
    assert json.loads((origin.root / "head.json").read_text())["changesets"][-1]["product"] == "snap-1"


def test_a_changeset_records_only_what_changed(tmp_path):
    from docsrv.snapshot.changeset import read_changeset

    base = synth(tmp_path / "s0")
    second = tmp_path / "s1"
    done = realistic_change(base, second, "snap-1")
    origin = tmp_path / "origin"
    docsrv("snapshot", "publish", str(base), str(origin))
    docsrv("snapshot", "publish", str(second), str(origin), "--since", str(base))
    changeset = read_changeset((origin / "changesets" / "2.jsonl").read_bytes(), "2.jsonl")
    assert changeset.header.follows == "demo" and changeset.header.product.name == "snap-1" and changeset.header.sequence == 2
    for kind in KINDS:  # the records whose JSON differs, read by the tests' own reader
        old, new = ({r["id"]: r for r in read(s, kind)} for s in (base, second))
        assert set(changeset.upserts[kind]) == {i for i, r in new.items() if old.get(i) != r}, kind
        assert changeset.deletes[kind] == old.keys() - new.keys(), kind
    assert set(done["new builds"]) | set(done["builds whose state changed"]) <= set(changeset.upserts["builds"])
    # Its lines are the change (its header adds the purge keys of what changed, as many).
    lines = (origin / "changesets" / "2.jsonl").read_bytes().split(b"\n", 1)[1]
    assert len(lines) < (origin / "snapshots" / "demo" / "builds.jsonl").stat().st_size / 5


def test_a_full_disk_applies_nothing_and_publishes_nothing(tmp_path, origin):
    """A full disk (every write past 16 KB fails) while a replica applies a changeset: the pull
    fails in one line, ``current`` stays, and nothing half made is left. While the publisher
    writes a snapshot whole: the origin's head still names what it published before."""
    import resource

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 10, 16 << 10))

    base, into, second = replica_and_change(tmp_path, origin)
    docsrv("snapshot", "prepare", str(second))  # its own check is not what the full disk stops
    assert docsrv("snapshot", "publish", str(second), str(origin.root), "--since", str(base)).returncode == 0
    failed = docsrv("snapshot", "pull", origin.url, "--into", str(into), preexec_fn=small_files)
    assert failed.returncode == 1 and "File too large" in failed.stderr and failed.stderr.count("\n") == 1, failed.stderr
    assert (into / "current").resolve().name == "demo"
    assert not [p.name for p in into.iterdir() if p.name.startswith(".apply-")]
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0  # with room again, it follows
    assert (into / "current").resolve().name == "snap-1"

    third = tmp_path / "s2"
    folded_change(second, third, "snap-2")
    docsrv("snapshot", "prepare", str(third))
    head = (origin.root / "head.json").read_bytes()
    refused = docsrv("snapshot", "publish", str(third), str(origin.root), preexec_fn=small_files)  # whole: past 16 KB
    assert refused.returncode == 1 and "File too large" in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
    assert (origin.root / "head.json").read_bytes() == head
    assert sorted(p.name for p in (origin.root / "snapshots").iterdir()) == ["demo"]


def test_the_purge_keys_of_a_changeset_are_read_from_it_and_equal_those_of_the_diff(tmp_path, origin):
    """The publisher writes into each changeset the purge keys of the replies it changes:
    ``snapshot keys`` reads them back (the time of reading one file), and they are the keys
    ``snapshot diff`` names for the same two snapshots, for a change of builds and one of projects
    and users (which a server applies in memory: the keys it drops from its own cache) and for a
    change of every kind."""
    base = synth(tmp_path / "s0")
    with_subproject(base)
    assert docsrv("snapshot", "publish", str(base), str(origin.root)).returncode == 0
    first, second, third = tmp_path / "s1", tmp_path / "s2", tmp_path / "s3"
    builds_change(base, first, "snap-1", random.Random(3))
    projects_and_users_changed(first, second, "snap-2", random.Random(4))
    random_change(second, third, "snap-3", random.Random(5))
    for old, new in ((base, first), (first, second), (second, third)):
        assert docsrv("snapshot", "publish", str(new), str(origin.root), "--since", str(old)).returncode == 0
        keys = docsrv("snapshot", "keys", str(origin.root))
        assert keys.returncode == 0, keys.stderr
        diff = docsrv("snapshot", "diff", str(old), str(new)).stdout
        assert keys.stdout == diff and len(diff.splitlines()) > 5
    since = docsrv("snapshot", "keys", str(origin.root), "--since", "2").stdout.splitlines()
    assert since == sorted(set(docsrv("snapshot", "diff", str(first), str(second)).stdout.splitlines())
                           | set(docsrv("snapshot", "diff", str(second), str(third)).stdout.splitlines()))
    gone = docsrv("snapshot", "keys", str(origin.root), "--since", "0")
    assert gone.returncode == 1
    assert gone.stderr.strip().endswith("no longer lists the changesets after sequence 0: purge every key of the API instead")


@pytest.mark.parametrize(("changes", "states_only"), [(5, (False,) * 3), (400, (False,) * 3), (50, (True,) * 3), (50, (True, False, True))])
def test_the_lists_of_builds_changed_in_memory_are_those_sorted_from_scratch(changes, states_only):
    """The store's builds after a change in memory (replaced where they stand; left out, put in
    and moved, a few or a fifth of them), by id, in order (pages of it too), by project and by
    commit, equal those of a store made of the same builds from scratch. ``states_only``: whether
    each round only changes states (builds replaced where they stand: a ``Replaced`` view, which
    the next round may move builds out of)."""
    from docsrv.snapshot.records import Build
    from docsrv.store.changes import BUILDS, RANK, regrouped, reordered, split
    from docsrv.utils.sequences import Overlay, PatchedOrder, SortedOrder

    rng = random.Random(changes + len(set(states_only)))
    start = datetime(2024, 1, 1)

    def build(identity: int) -> Build:
        when = start + timedelta(minutes=rng.randrange(600))  # many builds share a date: their ids order them
        return Build(id=identity, project=rng.randrange(1, 30), version=1, date=when.replace(tzinfo=UTC), commit=f"c{rng.randrange(40)}")

    def ordered(builds: dict[int, Build]) -> list[Build]:
        return sorted(builds.values(), key=RANK, reverse=True)

    builds = {i: build(i) for i in range(1, 2001)}
    items = ordered(builds)
    groups: dict[int, list[Build]] = {}
    for item in items:
        groups.setdefault(item.project, []).append(item)
    lookup: SortedOrder[Build] | PatchedOrder[Build] = SortedOrder(items, attrgetter("commit"))
    by_id: Mapping[int, Build] = builds
    replaced_before: list[int] = []
    for only_states in states_only:
        current = dict(builds)
        changed = rng.sample(sorted(current), changes)
        # Some of the builds replaced where they stood last round leave now, out of the Replaced view.
        changed = list(dict.fromkeys([*replaced_before[: changes // 6], *changed]))[:changes]
        for identity in changed[: 0 if only_states else changes // 3]:
            del current[identity]
        for identity in changed[0 if only_states else changes // 3:]:
            old = current[identity]
            flip = only_states or identity % 2
            current[identity] = msgspec.structs.replace(old, state="building" if old.state != "building" else "finished") if flip \
                else build(identity)
        for identity in range(max(builds) + 1, max(builds) + 1 + (0 if only_states else changes // 5)):
            current[identity] = build(identity)
        before = {i: builds[i] for i in changed if i in builds}
        upserted = {i: b for i, b in current.items() if i not in builds or b is not builds[i]}
        gone, came, replaced = split([(before.get(i), upserted.get(i)) for i in set(before) | set(upserted)], attrgetter("project"), BUILDS)
        items = reordered(items, gone, came, replaced, BUILDS)
        replaced_before = sorted(b.id for b in replaced) if only_states else []
        groups = regrouped(groups, attrgetter("project"), gone, came, replaced, BUILDS)
        moved = [b for b in came if b.id not in before or before[b.id].commit != b.commit]
        lookup = PatchedOrder.of(lookup, current, moved, attrgetter("id"), attrgetter("commit"), RANK)
        by_id = Overlay.of(by_id, {**dict.fromkeys(set(builds) - set(current)), **upserted})
        assert dict(by_id) == current and len(by_id) == len(current) and list(by_id) == list(by_id.keys())
        assert all(by_id.get(i) is None and i not in by_id for i in set(builds) - set(current))
        builds = current
        expected = ordered(builds)
        assert list(items) == expected and len(items) == len(expected)
        assert items[5:40] == expected[5:40] and items[-3] == expected[-3] and items[1990:2100] == expected[1990:2100]
        expected_groups: dict[int, list[Build]] = {}
        for item in expected:
            expected_groups.setdefault(item.project, []).append(item)
        assert groups == expected_groups
        for commit in {b.commit for b in builds.values()} | {"c-none"}:
            assert lookup.find(commit) == [b for b in expected if b.commit == commit]


def test_a_sidecar_folds_the_kept_changesets_in_the_background_and_keeps_what_came_meanwhile(tmp_path, origin, monkeypatch):
    """Past FOLD_CHANGESETS kept, a sidecar folds them into the snapshot they make aside, while it
    goes on keeping the changesets that arrive; once the fold is done, ``current`` names its
    product and ``head.json`` keeps what came after it. The state is the same throughout."""
    import asyncio

    from docsrv.replica import kept as keeping
    from docsrv.replica import pull as pulling
    from docsrv.replica import sidecar

    monkeypatch.setattr(keeping, "FOLD_CHANGESETS", 2)
    previous = synth(tmp_path / "s0")
    assert docsrv("snapshot", "publish", str(previous), str(origin.root)).returncode == 0
    into = tmp_path / "replica"
    rng = random.Random(9)

    def publish_and_keep(round_: int) -> Path:
        new = tmp_path / f"s{round_}"
        builds_change(previous, new, f"snap-{round_}", rng)
        assert docsrv("snapshot", "publish", str(new), str(origin.root), "--since", str(previous)).returncode == 0
        asyncio.run(pulling.pull(origin.url, into, progress=False, fold_at=None))
        return new

    asyncio.run(pulling.pull(origin.url, into, progress=False))
    for round_ in (1, 2):
        previous = publish_and_keep(round_)

    async def fold_while_a_changeset_arrives() -> None:
        folding = await sidecar.tend_fold(into, None)
        assert folding is not None
        await asyncio.to_thread(publish_and_keep, 3)  # kept while the fold runs
        await folding
        assert await sidecar.tend_fold(into, folding) is None

    asyncio.run(fold_while_a_changeset_arrives())
    assert (into / "current").resolve().name == "snap-2"
    chain = json.loads((into / "head.json").read_bytes())
    assert (chain["base"], [c["product"] for c in chain["changesets"]]) == ("snap-2", ["snap-3"])
    assert sorted(p.name for p in (into / "changesets").iterdir()) == ["4.jsonl"]
    assert_serves_the_same(into / "current", tmp_path / "s2")


def sidecar_replica(tmp_path: Path, origin: Origin, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A snapshot published whole and pulled into a replica whose pulls keep the state they index
    in a cache of the test's own (``kept.INDEXED_STATE``): (the snapshot, the replica)."""
    import asyncio

    from docsrv.replica import changeset_index
    from docsrv.replica import kept as keeping
    from docsrv.replica import pull as pulling

    monkeypatch.setattr(keeping, "INDEXED_STATE", changeset_index.StateCache())
    base = synth(tmp_path / "s0")
    assert docsrv("snapshot", "publish", str(base), str(origin.root)).returncode == 0
    into = tmp_path / "replica"
    asyncio.run(pulling.pull(origin.url, into, progress=False))
    return base, into


def test_changesets_before_a_change_of_pages_are_kept_while_its_index_is_built(tmp_path, origin, monkeypatch):
    """Pulled at once, a changeset of builds and a change of pages after it: the first is kept
    (``head.json`` lists it, and servers apply it) before the pull builds the second's index, not
    once that build is done; then both are kept, the second with its index."""
    import asyncio

    from docsrv.replica import changeset_index
    from docsrv.replica import kept as keeping
    from docsrv.replica import pull as pulling

    rng = random.Random(37)
    base, into = sidecar_replica(tmp_path, origin, monkeypatch)
    states = [base]
    current = keeping.current_name(into)
    assert current is not None
    states += [tmp_path / "s1", tmp_path / "s2"]
    builds_change(states[0], states[1], "snap-1", rng)
    random_in_place_change(states[1], states[2], "snap-2", rng, pages=True)
    for number in (1, 2):
        assert docsrv("snapshot", "publish", str(states[number]), str(origin.root), "--since", str(states[number - 1])).returncode == 0

    def kept() -> list[int]:
        chain = keeping.kept_chain(into, current)
        return [entry.sequence for entry in chain.changesets] if chain is not None else []

    listed_while_building = []
    building = changeset_index.rebuild_index

    def watched(store, plan, directory, built_in):
        listed_while_building.append(kept())
        return building(store, plan, directory, built_in)

    monkeypatch.setattr(changeset_index, "rebuild_index", watched)
    asyncio.run(pulling.pull(origin.url, into, progress=False))
    assert listed_while_building == [[2]]
    assert kept() == [2, 3] and changeset_index.changeset_index(into, keeping.kept_chain(into, current).changesets[1]) is not None


@pytest.mark.parametrize("failing", [False, True])
def test_a_sidecar_loads_the_snapshot_it_holds_before_a_change_of_pages_asks_for_it(tmp_path, origin, monkeypatch, caplog, failing):
    """A sidecar loads the store of the snapshot ``current`` names, and finds the lines of its pages
    file, in the background (``sidecar.tend_warming``): the first changeset of pages is then indexed
    from them, not from the snapshot loaded when it comes (about 10 s at the large scale). A load
    that fails (``failing``) is said in one line and not tried again; the change of pages then
    loads the snapshot itself."""
    import asyncio
    import contextlib
    import errno
    import logging

    from docsrv.replica import changeset_index, sidecar
    from docsrv.replica import kept as keeping
    from docsrv.replica import pull as pulling

    monkeypatch.setattr(keeping, "INDEXED_STATE", changeset_index.StateCache())
    monkeypatch.setattr(keeping, "HELD_REFERENCES", keeping.HeldReferences())
    base, into, _second = replica_and_change(tmp_path, origin)
    current = keeping.current_name(into)
    assert current is not None
    loading = changeset_index.load_store
    if failing:
        def unreadable(*args, **kwargs):
            raise OSError(errno.EIO, "Input/output error", str(into / current / "projects.jsonl"))

        monkeypatch.setattr(changeset_index, "load_store", unreadable)

    async def warm() -> None:
        warming = sidecar.tend_warming(into, None)
        assert warming is not None
        with contextlib.suppress(OSError):
            await warming
        assert sidecar.tend_warming(into, warming) is None  # done, or not tried again

    with caplog.at_level(logging.ERROR, logger="docsrv"):
        asyncio.run(warm())
    kept = keeping.INDEXED_STATE.store
    if failing:
        assert kept is None
        assert [r.getMessage() for r in caplog.records] == [
            f"loading the snapshot ahead of the next changeset failed ({into / current / 'projects.jsonl'}: Input/output error)"]
        monkeypatch.setattr(changeset_index, "load_store", loading)
    else:
        assert kept is not None and (kept.path, kept.name) == (into / current, current)
        assert keeping.INDEXED_STATE.places is not None and not caplog.records
        # The references the next changeset is checked by are built too.
        assert keeping.HELD_REFERENCES.state == ((into / current).resolve(), keeping.read_held(into / current).sequence)

        def loaded_again(*args, **kwargs):
            raise AssertionError("the snapshot was loaded again")

        monkeypatch.setattr(changeset_index, "load_store", loaded_again)
    published_pages_change(tmp_path, origin, base)
    asyncio.run(pulling.pull(origin.url, into, progress=False, fold_at=None))
    kept_chain = keeping.kept_chain(into, current)
    assert kept_chain is not None and [entry.sequence for entry in kept_chain.changesets] == [2]
    assert changeset_index.changeset_index(into, kept_chain.changesets[0]) is not None


def test_a_change_of_pages_that_comes_while_the_sidecar_loads_its_state_waits_for_that_load(tmp_path, monkeypatch):
    """Asked for the state a changeset of pages follows while ``StateCache.warm`` loads it, the
    cache waits and gives the store loaded, rather than nothing (the pull would load a second)."""
    import threading

    from docsrv.replica import changeset_index
    from docsrv.snapshot.load import manifest_of

    snapshot = synth(tmp_path / "s0")
    cache = changeset_index.StateCache()
    started, go_on = threading.Event(), threading.Event()
    loading = changeset_index.load_store

    def held_load(*args, **kwargs):
        started.set()
        assert go_on.wait(60)
        return loading(*args, **kwargs)

    monkeypatch.setattr(changeset_index, "load_store", held_load)
    assert cache.cold(snapshot)
    warming = threading.Thread(target=cache.warm, args=(snapshot,))
    warming.start()
    assert started.wait(60)
    manifest = manifest_of(snapshot)
    found = []
    asked = threading.Event()

    def ask() -> None:
        asked.set()
        found.append(cache.state(snapshot, (manifest.name, manifest.sequence), []))

    asking = threading.Thread(target=ask)
    asking.start()
    assert asked.wait(60)
    go_on.set()
    asking.join()
    warming.join()
    assert found == [cache.store] and found[0] is not None
    assert not cache.cold(snapshot)


def test_a_sidecar_checks_its_snapshots_own_index_once_while_it_warms(tmp_path, monkeypatch):
    """The index a snapshot's first changeset of pages is built from is the snapshot's own,
    checked as a server opens it (``search.location.current_index``): a sidecar checks it while it warms
    (``StateCache.warm``), ahead of that changeset, and again only when the snapshot's content is
    another (its fingerprint). One that cannot serve is found as none."""
    from docsrv.replica import changeset_index

    snapshot = synth(tmp_path / "s0")
    assert docsrv("index", str(snapshot)).returncode == 0
    checked: list[Path] = []
    checking = changeset_index.current_index

    def counted(directory: Path, digest: str, **kwargs) -> Path | None:
        checked.append(directory)
        return checking(directory, digest, **kwargs)

    monkeypatch.setattr(changeset_index, "current_index", counted)
    cache = changeset_index.StateCache()
    cache.warm(snapshot)
    assert checked == [snapshot] and cache.snapshot_index(snapshot) == snapshot / "index"
    assert cache.snapshot_index(snapshot) == snapshot / "index" and checked == [snapshot]
    pages = read(snapshot, "pages")
    pages[0]["text"] = pages[0].get("text", "") + " Edited."
    write(snapshot, "pages", pages)
    renamed(snapshot, "s0-edited")  # sealed: another content, which the index is not of
    assert cache.snapshot_index(snapshot) is None and checked == [snapshot, snapshot]


@pytest.mark.parametrize("damaged", [False, True])
def test_after_a_sidecars_fold_the_next_change_of_pages_is_indexed_from_the_state_it_kept(tmp_path, origin, start_server, monkeypatch,
                                                                                            damaged):
    """A sidecar keeps the store of the state it indexed last (``replica.changeset_index.StateCache``):
    once a fold of the kept changesets is put in place, that store, caught up with the changesets
    folded after it (builds here), reads the fold's files, and the next changeset of pages is
    indexed from it, not from the fold loaded again. A server applying it serves what a fresh
    server on its snapshot serves. A kept changeset damaged while the fold ran (``damaged``)
    leaves the fold in place and the sidecar running: the kept state is dropped, and the next
    change loads the fold's snapshot."""
    import asyncio

    from docsrv.replica import changeset_index, sidecar
    from docsrv.replica import kept as keeping
    from docsrv.replica import pull as pulling

    monkeypatch.setattr(keeping, "FOLD_CHANGESETS", 3)
    rng = random.Random(31)
    base, into = sidecar_replica(tmp_path, origin, monkeypatch)
    states = [base]
    for number in range(1, 5):
        states.append(tmp_path / f"s{number}")
        if number == 3:
            builds_change(states[-2], states[-1], f"snap-{number}", rng)
        else:
            random_in_place_change(states[-2], states[-1], f"snap-{number}", rng, pages=True)
    for number in range(1, 4):
        assert docsrv("snapshot", "publish", str(states[number]), str(origin.root), "--since", str(states[number - 1])).returncode == 0
        asyncio.run(pulling.pull(origin.url, into, progress=False, fold_at=None))
    assert keeping.INDEXED_STATE.store is not None and keeping.INDEXED_STATE.store.manifest.sequence == 3  # of the last index

    async def fold() -> None:
        folding = await sidecar.tend_fold(into, None)
        assert folding is not None
        await folding
        if damaged:
            (into / "changesets" / "4.jsonl").write_bytes(b"not a changeset\n")
        assert await sidecar.tend_fold(into, folding) is None

    asyncio.run(fold())
    assert (into / "current").resolve().name == "snap-3"
    kept = keeping.INDEXED_STATE.store
    if damaged:
        assert kept is None
    else:
        assert kept is not None and (kept.path, kept.name, kept.manifest.sequence) == (into / "snap-3", "snap-3", 4)

        def loaded_again(*args, **kwargs):
            raise AssertionError("the fold's snapshot was loaded again")

        monkeypatch.setattr(changeset_index, "load_store", loaded_again)
    assert docsrv("snapshot", "publish", str(states[4]), str(origin.root), "--since", str(states[3])).returncode == 0
    asyncio.run(pulling.pull(origin.url, into, progress=False, fold_at=None))
    assert (into / "indexes" / "5").is_dir()
    server = start_server("--snapshot", str(into / "current"), "--watch", "--workers", "1", "--public-url", PUBLIC_URL)
    assert (server.json("/readyz")["snapshot"], server.json("/readyz")["sequence"]) == ("snap-4", 5)
    assert_serves_as_fresh(server, states[4], crawl(*states))


def random_in_place_change(old: Path, new: Path, name: str, rng: random.Random, pages: bool = False) -> None:
    """``new``: ``old`` with a random change of every kind a server applies in memory: projects
    edited (description, language, users), created and, without pages, made private; versions
    renamed, made active or inactive, created and, without pages, made private or deleted with
    their builds; users renamed, created and, named by no project, deleted; subprojects linked
    and unlinked; builds flipped, moved, given another commit or version in place, and created.
    With ``pages`` (applied in memory with the index the pull builds): pages of versions that
    keep theirs retitled, their text alone edited, moved to another such version, added, and
    deleted (a version's last one at times); a version that holds pages made private, at times
    a project that holds pages made private too, or a version deleted with its pages and builds."""
    shutil.copytree(old, new, ignore=shutil.ignore_patterns("index", "index.*", ".*", "*.msgpack"))
    records = {kind: read(new, kind) for kind in KINDS}
    projects, versions, users, builds = (records[kind] for kind in ("projects", "versions", "users", "builds"))
    ids = {kind: max((r["id"] for r in records[kind]), default=0) + 1 for kind in KINDS}
    paged = {p["project"] for p in records["pages"]} | {p["version"] for p in records["pages"]}
    public = [p for p in projects if p.get("privacy_level", "public") == "public"]
    for project in rng.sample(public, 3):
        project.update(description=f"Edited {rng.randrange(10**6)}.", language=rng.choice(["en", "fr", "ja"]),
                       users=rng.choices([u["id"] for u in users], k=rng.randrange(0, 4)))  # a user named twice, at times
    for _ in range(rng.randrange(0, 3)):
        users.append({"id": ids["users"], "username": f"user-{ids['users']}"})
        ids["users"] += 1
    for user in rng.sample(users, 2):
        user["username"] = f"{user['username']}-{rng.randrange(100)}"
    named = {u for p in projects for u in p.get("users", [])}
    users[:] = [u for u in users if u["id"] in named or rng.random() < 0.8]
    for _ in range(rng.randrange(0, 3)):
        projects.append({"id": ids["projects"], "name": "New", "slug": f"new-{ids['projects']}", "pub_date": "2026-11-26T00:00:00Z",
                         "modified_date": "2026-11-26T00:00:00Z", "users": rng.sample([u["id"] for u in users], 1)})
        versions.append({"id": ids["versions"], "project": ids["projects"], "slug": "latest", "verbose_name": "latest"})
        ids["projects"] += 1
        ids["versions"] += 1
    shown = [p for p in projects if p.get("privacy_level", "public") == "public"]
    for project in rng.sample(shown, 2):
        versions.append({"id": ids["versions"], "project": project["id"], "slug": f"v{ids['versions']}", "verbose_name": f"{rng.random():.3f}",
                         "active": rng.random() < 0.7})
        ids["versions"] += 1
    live = [v for v in versions if v.get("privacy_level", "public") == "public"]
    for version in rng.sample(live, 4):
        version.update(verbose_name=f"{rng.random():.3f}", active=rng.random() < 0.5)
    pageless = [v for v in live if v["id"] not in paged]
    hidden, deleted = rng.sample(pageless, 2)
    hidden["privacy_level"] = "private"
    if rng.random() < 0.5:
        rng.choice([p for p in shown if p["id"] not in paged])["privacy_level"] = "private"
    holding = [v for v in live if v["id"] in paged and v["project"] in {p["id"] for p in shown}]
    if pages and len(holding) > 4:  # what the index holds taken away, while enough is left to change
        taken, other = rng.sample(holding, 2)
        taken["privacy_level"] = "private"
        if rng.random() < 0.5:
            deleted = other
            records["pages"] = [p for p in records["pages"] if p["version"] != deleted["id"]]
        elif len({v["project"] for v in holding}) > 3:
            next(p for p in shown if p["id"] == other["project"])["privacy_level"] = "private"
    gone = {b["id"] for b in builds if b["version"] == deleted["id"]}
    records["versions"] = [v for v in versions if v is not deleted]
    records["build_commands"] = [c for c in records["build_commands"] if c["build"] not in gone]
    shown_ids = {p["id"] for p in projects if p.get("privacy_level", "public") == "public"}
    live = [v for v in records["versions"] if v.get("privacy_level", "public") == "public" and v["project"] in shown_ids]
    links = records["relationships"]
    links[:] = [r for r in links if rng.random() < 0.7]
    for _ in range(rng.randrange(1, 3)):
        parent, child = rng.sample([p["id"] for p in projects], 2)
        if all((r["parent"], r["child"]) != (parent, child) for r in links):
            links.append({"id": ids["relationships"], "parent": parent, "child": child, "alias": rng.choice([None, "a", "b"])})
            ids["relationships"] += 1
    kept = [b for b in builds if b["id"] not in gone]
    for build in rng.sample(kept, 5):
        build["state"] = "building" if build.get("state", "finished") == "finished" else "finished"
        if rng.random() < 0.4:
            build["date"] = stamp(datetime(2026, 11, 26, rng.randrange(24), tzinfo=UTC))
    # In place (the same project and date) with another commit, and one with another version of its project.
    rng.choice(kept)["commit"] = f"{rng.getrandbits(64):016x}"
    remaining = records["versions"]
    movable = [b for b in kept if sum(v["project"] == b["project"] for v in remaining) > 1]
    if movable:
        build = rng.choice(movable)
        build["version"] = rng.choice([v["id"] for v in remaining if v["project"] == build["project"] and v["id"] != build["version"]])
    for version in rng.sample([v for v in records["versions"] if v.get("privacy_level", "public") == "public"], 2):
        kept.append({"id": ids["builds"], "project": version["project"], "version": version["id"], "date": "2026-11-26T12:00:00Z",
                     "state": "triggered", "commit": f"{rng.getrandbits(64):016x}"})
        ids["builds"] += 1
    records["builds"] = kept
    if pages:
        change_pages(records["pages"], {v["id"]: v["project"] for v in live if v["id"] in paged}, ids["pages"], rng)
    for kind in KINDS:
        write(new, kind, records[kind])
    renamed(new, name)


def change_pages(pages: list[dict], versions: dict[int, int], next_id: int, rng: random.Random) -> None:
    """Pages of ``versions`` (their projects by id) retitled, their text alone edited, moved to another of them, added and deleted."""
    held = [p for p in pages if p["version"] in versions]
    for page in rng.sample(held, min(2, len(held))):
        page["title"] = f"{page.get('title', '')} {rng.choice(['revised', 'moved', 'kept'])}"
    for page in rng.sample(held, min(2, len(held))):
        page["text"] = f"{page.get('text', '')} Install the {rng.choice(['wheel', 'sdist', 'plugin'])} with pip."
    moving = rng.choice(held)
    moving["version"] = rng.choice(sorted(versions))
    moving["project"] = versions[moving["version"]]
    moving["path"] = f"moved-{moving['id']}.html"  # a path is a page's once in its version
    for number in range(rng.randrange(1, 3)):
        source = rng.choice(held)
        pages.append(dict(source, id=next_id + number, path=f"added-{next_id + number}.html",
                          text=f"A new page on {rng.choice(['caching', 'wheels', 'themes'])}."))
    for page in rng.sample(pages, rng.randrange(1, 3)):
        pages.remove(page)


def store_state(store) -> dict:
    """What a store serves, as plain values: every record by id, every ordered list and grouping,
    every lookup by slug, and the counts."""
    grouped = ("projects_of_user", "subprojects", "relationships_of_parent", "relationships_of_child", "versions_of_project", "versions_by_active",
               "versions_of_project_active", "versions_by_slug", "versions_by_slug_active", "builds_of_project", "pages_of_version")
    state = {name: dict(getattr(store, name)) for name in ("users", "user_by_name", "projects", "project_by_slug", "relationships",
                                                           "versions", "builds")}
    state |= {name: dict(getattr(store, name)) for name in ("pages", "projects_with_pages", "versions_with_pages")}
    state |= {name: list(getattr(store, name)) for name in ("users_ordered", "projects_ordered", "versions_ordered", "builds_ordered",
                                                           "pages_ordered")}
    state |= {name: {key: list(items) for key, items in getattr(store, name).items()} for name in grouped}
    state["version_of"] = {(v.project, v.slug): store.version_of(v.project, v.slug) for v in store.versions.values()}
    state["by_commit"] = {b.commit: store.builds_by_commit.find(b.commit) for b in store.builds.values()}
    state["by_version"] = {v: store.builds_by_version.find(v) for v in {*store.versions, *(b.version for b in store.builds.values())}}
    state["counts"] = store.counts
    return state


@pytest.mark.parametrize(("seed", "chunk", "pages"), [(1, 4, False), (2, 4, True), (3, None, True), (4, None, False)])
def test_changes_applied_in_memory_make_the_store_loaded_from_scratch(tmp_path, monkeypatch, seed, chunk, pages):
    """Rounds of random changes of every kind a server applies in memory (``random_in_place_change``),
    each published as the publisher makes it (``in_place``) and applied to the store the round
    before made: every record, list, grouping, lookup and count equals those of the store loaded
    from the snapshot the changes make. With a ``chunk`` of a few records, the store keeps its
    lists in chunks, as it keeps the long lists of a large snapshot (``utils.sequences.Chunked``).
    With ``pages``, pages change too (applied with the index the pull builds: ``indexed``)."""
    from docsrv.snapshot.changeset import compute, read_changeset
    from docsrv.snapshot.load import manifest_of
    from docsrv.store.changes import applied
    from docsrv.utils import sequences as positions

    if chunk is not None:
        monkeypatch.setattr(positions, "CHUNK", chunk)

    rng = random.Random(seed)
    old = synth(tmp_path / "s0")
    with_subproject(old)
    store = load_store(old, page_text=False)
    if chunk is not None:
        assert isinstance(store.versions_ordered, positions.Chunked)
    for number in range(1, 6):
        new = tmp_path / f"s{number}"
        random_in_place_change(old, new, f"snap-{number}", rng, pages)
        data = compute(old, manifest_of(old), new, manifest_of(new), number + 1)
        changeset = read_changeset(data, f"{number + 1}.jsonl")
        assert changeset.header.unmoved and (changeset.header.in_place or pages)  # with pages, what the index holds is taken away
        assert (applied(store, changeset) is None) is pages  # pages are applied only with the index of what they make
        done = applied(store, changeset, indexed=pages)
        assert done is not None
        assert store_state(done.store) == store_state(load_store(new, page_text=False)), f"round {number}"
        store, old = done.store, new


def test_the_state_a_sidecar_keeps_catches_up_with_the_changesets_kept_since_and_is_of_one_snapshot(tmp_path):
    """A sidecar keeps the store of the state it last indexed (``replica.changeset_index.StateCache``): asked
    for a later state of the same snapshot, it applies the changesets kept since and gives the
    store loaded from scratch of that state; for another snapshot, or a state it is not on the
    way to, it gives nothing (the pull loads the snapshot)."""
    from docsrv.replica.changeset_index import StateCache
    from docsrv.snapshot.changeset import compute, read_changeset
    from docsrv.snapshot.load import manifest_of
    from docsrv.snapshot.origin import PublishedChangeset

    rng = random.Random(29)
    states = [synth(tmp_path / "s0")]
    kept = []
    for number in range(1, 4):
        states.append(tmp_path / f"s{number}")
        random_in_place_change(states[-2], states[-1], f"snap-{number}", rng, pages=True)
        data = compute(states[-2], manifest_of(states[-2]), states[-1], manifest_of(states[-1]), number)
        entry = PublishedChangeset(sequence=number, follows=manifest_of(states[-2]).name, product=f"snap-{number}", size=len(data),
                                   sha256=hashlib.sha256(data).hexdigest())
        kept.append((entry, read_changeset(data, f"{number}.jsonl")))
    cache = StateCache()
    cache.store = load_store(states[0], page_text=False)
    base = ("demo", 0)  # a snapshot not yet published
    caught_up = cache.state(states[0], base, kept[:2])
    assert caught_up is not None and store_state(caught_up) == store_state(load_store(states[2], page_text=False))
    cache.store = caught_up
    assert cache.state(states[0], base, kept) is not None and cache.state(states[0], base, kept).name == "snap-3"
    assert cache.state(states[0], base, kept[:2]) is caught_up
    assert cache.state(states[0], base, kept[:1]) is None  # past the state asked for
    assert cache.state(tmp_path / "elsewhere", base, kept) is None


def test_a_full_disk_while_the_pull_builds_a_changesets_index_keeps_nothing_of_it(tmp_path, origin, monkeypatch):
    """A full disk while the pull builds the index of a changeset of pages (the index's writer
    fails with ENOSPC half-way): the pull fails, saying so in one line; it keeps neither the
    changeset nor a part of its index, and ``current`` stays; with room again, it keeps both."""
    import asyncio
    import errno

    from docsrv.replica import changeset_index
    from docsrv.replica.fetch import describe
    from docsrv.replica.pull import pull

    base, into, _second = replica_and_change(tmp_path, origin)
    published_pages_change(tmp_path, origin, base)
    building = changeset_index.rebuild_index

    def full_disk(store, plan, directory, built_in):
        (directory / "shards").mkdir()
        (built_in / "shards").mkdir(parents=True)
        (built_in / "shards" / "half-written").write_bytes(b"x" * 100)
        raise OSError(errno.ENOSPC, "No space left on device", str(built_in / "shards" / "half-written"))

    monkeypatch.setattr(changeset_index, "rebuild_index", full_disk)
    with pytest.raises(OSError) as failed:
        asyncio.run(pull(origin.url, into))
    said = describe(failed.value)
    assert said.endswith("indexes/2: No space left on device") and "\n" not in said, said  # the index it was building
    assert (into / "current").resolve().name == "demo"
    assert json.loads((into / "head.json").read_bytes())["changesets"] == []
    assert not any((into / "indexes").iterdir())  # no part of it, under its name or beside it
    assert not any((into / "index-shards").iterdir())  # nor of its shards
    left = into / "index-shards" / "2" / "shards" / "00" / "pages" / "half-written"  # what a pull killed mid-build leaves
    left.parent.mkdir(parents=True)
    left.write_bytes(b"x" * 100)
    monkeypatch.setattr(changeset_index, "rebuild_index", building)
    asyncio.run(pull(origin.url, into))
    assert [e["sequence"] for e in json.loads((into / "head.json").read_bytes())["changesets"]] == [2]
    assert sorted(p.name for p in (into / "indexes").iterdir()) == ["2"]
    assert not left.exists() and sorted(p.name for p in (into / "index-shards").iterdir()) == ["2"]  # built again, whole
    assert all((shard / "shard.json").is_file() for shard in (into / "indexes" / "2" / "shards").iterdir())
