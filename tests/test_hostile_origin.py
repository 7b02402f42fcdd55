"""A live replica against a hostile or broken origin (hardening, round five): what an origin
publishes can never damage what a replica holds, and every refusal is one line that says why."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from snapshot_change import realistic_change

from helpers import Origin, docsrv

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
    base = synth(tmp_path / "s0")
    assert docsrv("snapshot", "publish", str(base), str(origin.root)).returncode == 0
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
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
    base = synth(tmp_path / "s0")
    assert docsrv("snapshot", "publish", str(base), str(origin.root)).returncode == 0
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
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
    base = synth(tmp_path / "s0")
    assert docsrv("snapshot", "publish", str(base), str(origin.root)).returncode == 0
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
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
    base = synth(tmp_path / "s0")
    assert docsrv("snapshot", "publish", str(base), str(origin.root)).returncode == 0
    into = tmp_path / "replica"
    assert docsrv("snapshot", "pull", origin.url, "--into", str(into)).returncode == 0
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
