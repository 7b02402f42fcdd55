"""The search index in shards of versions (``search/build.py``): built again after a change, only
the shards whose pages changed are built, and it holds the shards an index built whole holds and
answers every search as it does."""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import msgspec
import pytest
from snapshot_change import KINDS, read, write

from docsrv.search import rebuild
from docsrv.search import shards as shard_layout
from docsrv.search.build import SEGMENT_FILES, SHARD_DECODER, build_index
from docsrv.search.index_files import index_problem, shard_directories, shard_path, version_scope
from docsrv.search.query import Found, Scope, SearchIndex
from docsrv.search.rebuild import plan_rebuild, rebuild_index
from docsrv.search.shards import Layout
from docsrv.snapshot.errors import SnapshotError
from docsrv.snapshot.records import Manifest
from docsrv.snapshot.write import write_manifest
from docsrv.store.loaded import load_store
from helpers import docsrv


def built_shards(index: Path, *, named: bool = True) -> dict:
    """What each shard of the index in ``index`` was built from (its ``shard.json``), by key; not
    ``named``, its segments said by their documents alone (tantivy names a segment at random)."""
    return {key: shard_record(directory / "shard.json", named=named) for key, directory in shard_directories(index).items()}


def shard_record(path: Path, *, named: bool = True):
    shard = SHARD_DECODER.decode(path.read_bytes())
    if named:
        return shard
    return msgspec.structs.replace(shard, parts={number: (part.documents, [segment.max_doc for segment in part.pages],
                                                          [segment.max_doc for segment in part.sections])
                                                 for number, part in shard.parts.items()})


def same_file(ours: Path, theirs: Path) -> bool:
    """Whether a file of a shard built again is what a whole build wrote (``shard.json``: but for
    its segments' names)."""
    if ours.name == "shard.json":
        return shard_record(ours, named=False) == shard_record(theirs, named=False)
    return ours.read_bytes() == theirs.read_bytes()


#: The words of the pages added to the demo: few, so that every query finds many pages.
VOCABULARY = ("install configure gearbox request session cache token proxy retry timeout stream header cookie "
              "upload schema migrate deploy worker queue broker signal logging").split()


def indexed_demo(directory: Path) -> Path:
    """The demo snapshot with 400 pages more, spread over every public version with pages, of
    words drawn from VOCABULARY; indexed."""
    assert docsrv("snapshot", "synth", "--scale", "demo", "--out", str(directory)).returncode == 0
    rng = random.Random(35)

    def more_pages(records: dict[str, list]) -> list[int]:
        versions = public_versions_with_pages(records)
        pages = records["pages"]
        for number in range(400):
            version = versions[number % len(versions)]
            words = [rng.choice(VOCABULARY) for _ in range(rng.randrange(20, 400))]
            pages.append({"id": max(p["id"] for p in pages) + 1, "project": version["project"], "version": version["id"],
                          "path": f"topic-{number}.html", "title": " ".join(rng.sample(VOCABULARY, 2)).title(), "text": " ".join(words),
                          "sections": [[f"part-{number}", " ".join(rng.sample(VOCABULARY, 3))]]})
        return []

    changed(directory, directory, more_pages)
    assert docsrv("index", str(directory)).returncode == 0
    return directory


def changed(old: Path, new: Path, change) -> set[int]:
    """``new`` (or ``old`` itself): ``old`` with its pages changed by ``change`` (which is given the
    records by kind, and returns the versions whose pages it touched), sealed anew; returns those versions."""
    if new != old:
        shutil.copytree(old, new, ignore=shutil.ignore_patterns("index", ".*", "*.msgpack"))
    records = {kind: read(new, kind) for kind in KINDS}
    touched = change(records)
    for kind in KINDS:
        write(new, kind, records[kind])
    manifest = msgspec.json.decode((new / "manifest.json").read_bytes(), type=Manifest)
    counts = {kind: len(records[kind]) for kind in KINDS if kind != "relationships" or records[kind]}
    write_manifest(new, msgspec.structs.replace(manifest, name="changed", counts={**manifest.counts, **counts}))
    return set(touched)


def public_versions_with_pages(records: dict[str, list]) -> list[dict]:
    public = {p["id"] for p in records["projects"] if p.get("privacy_level", "public") == "public"}
    held = {p["version"] for p in records["pages"]}
    return [v for v in records["versions"] if v["id"] in held and v["project"] in public and v.get("privacy_level", "public") == "public"]


def answers(found: Found) -> tuple:
    """What a reply says of a search: the pages, their order, scores and passages, the total and
    the words (not where each page's highlight files are, which depends on how the index is cut)."""
    return [(hit.page_id, hit.score, hit.passage) for hit in found.hits], found.total, found.words


def edit_add_delete_and_rename(layout: Layout):
    """A build's end, as the service makes it: a page's text edited, a page added to another
    version and one of a third deleted, and a fourth version renamed (its pages' scope moves),
    each in a shard of its own (``layout``)."""

    def change(records: dict[str, list]) -> list[int]:
        pages = records["pages"]
        shards = {}
        for version in public_versions_with_pages(records):  # four versions of four shards: each change builds its own
            shards.setdefault(layout.shard_of(version["id"]), version)
        edited, added, deleted, renamed = list(shards.values())[:4]
        page = next(p for p in pages if p["version"] == edited["id"])
        page["text"] = page.get("text", "") + " Zephyrine reticulation: the gearbox keeps quiet."
        model = next(p for p in pages if p["version"] == added["id"])
        pages.append(dict(model, id=max(p["id"] for p in pages) + 1, path="new-page.html", document="new-page",
                          title="Reticulation gearbox", text="How the gearbox reticulation works, and why it keeps quiet."))
        pages.remove(next(p for p in pages if p["version"] == deleted["id"]))
        renamed["slug"] = renamed["slug"] + "-renamed"
        return [edited["id"], added["id"], deleted["id"], renamed["id"]]

    return change


def test_an_index_built_again_from_an_earlier_one_answers_every_search_as_one_built_whole(tmp_path):
    old = indexed_demo(tmp_path / "old")
    new = tmp_path / "new"
    layout = Layout.of(load_store(old, page_text=False, progress=False))
    assert len(shard_directories(old / "index")) > 4  # four shards built again, the others linked
    touched = changed(old, new, edit_add_delete_and_rename(layout))
    store = load_store(new, page_text=False, progress=False)
    plan = plan_rebuild(store, old / "index")
    assert plan is not None
    assert set(plan.changed) == {layout.shard_of(version) for version in touched}
    assert len(plan.digests) - len(plan.changed) >= 2  # the others are kept
    rebuilt = tmp_path / "rebuilt"
    rebuild_index(store, plan, rebuilt)
    # as a changeset's index: the shards built elsewhere, each a link; the earlier listing's kept
    linked = tmp_path / "linked"
    rebuild_index(store, plan, linked, built_in=tmp_path / "built")
    assert all(shard_path(linked, shard).is_symlink() for shard in plan.digests)
    for index in (rebuilt, linked):
        assert index_problem(index) is None  # its listing lists what its shards hold
    whole = tmp_path / "whole"
    build_index(load_store(new, progress=False), whole, print_progress=False)
    assert built_shards(rebuilt, named=False) == built_shards(whole, named=False)  # the same shards, of the same pages
    # A kept shard is the earlier index's own files, linked; a changed one is new. Its entries
    # index is kept where only a page's text changed: no name, no page, no scope.
    edited = layout.shard_of(next(p["version"] for p in read(new, "pages") if "Zephyrine" in p.get("text", "")))
    for shard in plan.digests:
        for part, kept in (("pages", shard not in plan.changed), ("sections", shard not in plan.changed),
                           ("entries", shard not in plan.changed or shard == edited)):
            for path in (shard_path(rebuilt, shard) / part).iterdir():
                earlier = shard_path(old / "index", shard) / part / path.name
                assert (earlier.exists() and earlier.stat().st_ino == path.stat().st_ino) == kept, path
    ours, theirs = SearchIndex.open(store, rebuilt), SearchIndex.open(store, whole)
    queries = VOCABULARY + [" ".join(random.Random(number).sample(VOCABULARY, 2)) for number in range(40)]
    queries += ["zephyrine", "reticulation gearbox", "gearbox quiet", "pip install", "quickstart"]
    scopes = [Scope(version_scope(store.projects[v.project].slug, v.slug), v.id) for v in (store.versions[i] for i in touched if i in store.versions)]
    compared = 0
    for query in queries:
        found = ours.search_pages(query)
        assert answers(found) == answers(theirs.search_pages(query)), query
        compared += len(found.hits)
        assert answers(ours.search_pages(query, scopes=scopes)) == answers(theirs.search_pages(query, scopes=scopes)), query
        assert ours.search_anchors(query) == theirs.search_anchors(query), query
    assert compared > 2000
    assert [hit.page_id for hit in ours.search_pages("zephyrine").hits] == [
        p["id"] for p in read(new, "pages") if "Zephyrine" in p.get("text", "")]


def with_one_page_changed(tmp_path: Path, field: str, value: object) -> tuple[Path, Path]:
    """An indexed demo snapshot and, beside it, the same with ``field`` of one public page set to ``value``."""
    old = indexed_demo(tmp_path / "old")
    new = tmp_path / "new"

    def one_page(records: dict[str, list]) -> list[int]:
        page = next(p for p in records["pages"] if p["version"] in {v["id"] for v in public_versions_with_pages(records)})
        page[field] = value
        return [page["version"]]

    changed(old, new, one_page)
    return old, new


def test_a_page_that_names_a_new_operator_has_every_shard_built_again(tmp_path):
    """The operators the pages name decide what syntax every page's text is found by
    (``search/code_syntax.py``): a page that names one the index did not builds them all."""
    old, new = with_one_page_changed(tmp_path, "title", "<=>")
    assert plan_rebuild(load_store(new, page_text=False, progress=False), old / "index") is None


def test_a_changed_page_that_is_no_page_is_named_by_file_and_line(tmp_path):
    """A server loads pages without their text, sections and entries, and checks none of them: a
    shard built again checks those of its changed pages, and names a bad one."""
    old, new = with_one_page_changed(tmp_path, "sections", "not a list of sections")
    line = next(number for number, page in enumerate(read(new, "pages"), start=1) if page.get("sections") == "not a list of sections")
    store = load_store(new, page_text=False, progress=False)
    with pytest.raises(SnapshotError) as raised:
        plan_rebuild(store, old / "index")
    assert [(problem.file, problem.line) for problem in raised.value.problems] == [("pages.jsonl", line)]
    assert "Expected `array`, got `str` - at `$.sections`" in str(raised.value)


def test_an_earlier_index_that_does_not_say_what_a_shard_holds_is_not_built_from(tmp_path):
    """A shard's record spoiled (or an index of another layout): the index is built whole."""
    old, new = with_one_page_changed(tmp_path, "title", "Retitled")
    store = load_store(new, page_text=False, progress=False)
    assert plan_rebuild(store, old / "index") is not None
    record = shard_path(old / "index", 0) / "shard.json"
    written = msgspec.json.decode(record.read_bytes())
    record.write_bytes(msgspec.json.encode({**written, "schema": written["schema"] - 1}))  # its pages in another order
    assert plan_rebuild(store, old / "index") is None
    record.write_text("{not json")
    assert plan_rebuild(store, old / "index") is None


def test_an_earlier_shard_that_does_not_say_what_its_entries_hold_has_them_built_again(tmp_path):
    """An earlier shard whose ``shard.json`` does not say what its entries index holds (without
    ``entries``): a shard built again after a change of text builds its entries anew, and
    answers every search as an index built whole."""
    old, new = with_one_page_changed(tmp_path, "text", "Zephyrine reticulation: the gearbox keeps quiet.")
    store = load_store(new, page_text=False, progress=False)
    plan = plan_rebuild(store, old / "index")
    assert plan is not None and len(plan.changed) == 1
    (shard,) = plan.changed
    record = shard_path(old / "index", shard) / "shard.json"
    written = msgspec.json.decode(record.read_bytes())
    assert written["entries"]
    record.write_bytes(msgspec.json.encode({key: value for key, value in written.items() if key != "entries"}))
    rebuilt = tmp_path / "rebuilt"
    rebuild_index(store, plan, rebuilt)
    for path in (shard_path(rebuilt, shard) / "entries").iterdir():
        earlier = shard_path(old / "index", shard) / "entries" / path.name
        assert not earlier.exists() or earlier.stat().st_ino != path.stat().st_ino, path
    whole = tmp_path / "whole"
    build_index(load_store(new, progress=False), whole, print_progress=False)
    ours, theirs = SearchIndex.open(store, rebuilt), SearchIndex.open(store, whole)
    for query in [*VOCABULARY, "zephyrine", "reticulation gearbox"]:
        assert answers(ours.search_pages(query)) == answers(theirs.search_pages(query)), query
        assert ours.search_anchors(query) == theirs.search_anchors(query), query


@pytest.mark.parametrize("text", ["edited", "the same", "the same, what was derived cut short"])
def test_a_version_uploaded_again_under_new_ids_keeps_its_shards_entries(tmp_path, text):
    """A build of the service uploads every page of its version again under new ids, most with
    the same names: the shard built again keeps its entries index (which says a page by its
    slot, not its id), and names and anchors find the new ids, as an index built whole does.
    With the same text too (a build of a commit that changed no page), it keeps its pages index
    and highlight files (``documents_digest``), but for the page ids, written anew: every file
    but the tantivy indexes is byte for byte what a whole build writes (``shard.json`` but for
    the names tantivy gives segments). An earlier shard whose ``derived.msgpack`` is not of its
    pages (damaged) has its highlight files built again, and keeps the segments of its pages and
    sections (``search.build.Part``), made of the same pages."""
    from docsrv.search.build import DERIVED_FILE

    old = indexed_demo(tmp_path / "old")
    if text.endswith("cut short"):
        for path in (old / "index" / "shards").glob(f"*/{DERIVED_FILE}"):
            columns = msgspec.msgpack.decode(path.read_bytes())
            path.write_bytes(msgspec.msgpack.encode({**columns, "symbols": columns["symbols"][:-1]}))
    new = tmp_path / "new"
    titles = []
    added = " Zephyrine reticulation." if text == "edited" else ""

    def upload_again(records: dict[str, list]) -> list[int]:
        version = public_versions_with_pages(records)[0]
        pages = records["pages"]
        again = sorted((page for page in pages if page["version"] == version["id"]), key=lambda page: page["id"])
        top = max(page["id"] for page in pages)
        for number, page in enumerate(again, start=1):
            pages.remove(page)
            pages.append(dict(page, id=top + number, text=page.get("text", "") + added))
            titles.append(page["title"])
        return [version["id"]]

    changed(old, new, upload_again)
    store = load_store(new, page_text=False, progress=False)
    plan = plan_rebuild(store, old / "index")
    assert plan is not None and len(plan.changed) == 1
    (shard,) = plan.changed
    rebuilt = tmp_path / "rebuilt"
    rebuild_index(store, plan, rebuilt)
    same = text == "the same"  # its files linked, the ids written anew
    segments_kept = text != "edited"  # what was derived cut short: the segments of its pages alone are kept, listed anew
    for part, kept in (("entries", True), ("pages", segments_kept), ("sections", segments_kept), ("highlight", same)):
        for path in (shard_path(rebuilt, shard) / part).iterdir():
            earlier = shard_path(old / "index", shard) / part / path.name
            if path.name.startswith("."):  # tantivy's own: locks, its list of files
                continue
            linked = kept and path.name != "page-ids" and (same or part == "entries" or path.name != "meta.json")
            assert (earlier.exists() and earlier.stat().st_ino == path.stat().st_ino) == linked, path
    whole = tmp_path / "whole"
    build_index(load_store(new, progress=False), whole, print_progress=False)
    files = sorted(path.relative_to(shard_path(whole, shard)) for path in shard_path(whole, shard).rglob("*")
                   if path.is_file() and path.parts[-2] not in ("pages", "entries", "sections"))
    assert DERIVED_FILE in map(str, files) and "highlight/page-ids" in map(str, files)
    for path in files:
        assert same_file(shard_path(rebuilt, shard) / path, shard_path(whole, shard) / path), path
    ours, theirs = SearchIndex.open(store, rebuilt), SearchIndex.open(store, whole)
    new_ids = {page["id"] for page in read(new, "pages")} - {page["id"] for page in read(old, "pages")}
    named = [page_id for title in titles for page_id in ours.named.pages_named(title, None)]
    assert new_ids & set(named) and not set(named) - {page["id"] for page in read(new, "pages")}
    for query in [*VOCABULARY, *titles, "zephyrine", "reticulation gearbox"]:
        assert answers(ours.search_pages(query)) == answers(theirs.search_pages(query)), query
        assert ours.search_anchors(query) == theirs.search_anchors(query), query


def page_changes_of(old: Path, new: Path) -> tuple:
    """The changeset from ``old`` to ``new`` applied in memory to ``old``'s store: (that store,
    the page changes as the pull gives them, the versions whose pages they touch)."""
    from docsrv.replica.changeset_index import page_changes, versions_touched
    from docsrv.snapshot.changeset import compute, read_changeset
    from docsrv.snapshot.load import manifest_of
    from docsrv.snapshot.origin import PublishedChangeset
    from docsrv.store.changes import applied

    data = compute(old, manifest_of(old), new, manifest_of(new), 1)
    changeset = read_changeset(data, "1.jsonl")
    done = applied(load_store(old, page_text=False, progress=False), changeset, indexed=True)
    assert done is not None
    entry = PublishedChangeset(sequence=1, follows=manifest_of(old).name, product="changed", size=len(data), sha256="0" * 64)
    return done.store, page_changes([(entry, changeset)]), versions_touched(done.pages)


def changeset_plan(old: Path, new: Path, edit) -> tuple:
    """The changeset from ``old`` to ``old`` edited by ``edit`` (written in ``new``) applied in
    memory, and the pull's plan to build its index from ``old``'s: (the store, the page changes,
    the plan)."""
    from docsrv.search.rebuild import plan_changed_shards

    changed(old, new, edit)
    store, changes, versions = page_changes_of(old, new)
    plan = plan_changed_shards(store, changes, versions, old / "index")
    assert plan is not None and plan.changed
    return store, changes, plan


@pytest.mark.parametrize("earlier", ["kept", "missing", "cut short"])
def test_a_shard_built_again_after_a_changeset_takes_what_it_held_of_its_unchanged_pages(tmp_path, monkeypatch, earlier):
    """The pull builds a changed shard again with what the earlier shard holds of the pages a
    changeset left alone (``search.build.Recorded``): their highlight records copied, their words'
    positions moved to where the new files put them, and what was derived from each (changelog,
    symbols, operators: ``Derived``) taken, not derived again. Every file but the tantivy indexes
    is byte for byte what a whole build writes (``shard.json`` but for the names tantivy gives
    segments), for pages long enough to have their words
    recorded too; from an earlier shard without ``derived.msgpack`` (built before it was kept),
    or with one whose columns are not of its pages (damaged), every page's is derived again, alike."""
    from docsrv.search import code_syntax
    from docsrv.search.build import DERIVED_FILE
    from docsrv.search.highlight import SHORT_PAGE_BYTES, HighlightWriter

    old = indexed_demo(tmp_path / "old")
    for path in (old / "index" / "shards").glob(f"*/{DERIVED_FILE}"):
        if earlier == "missing":
            path.unlink()
        elif earlier == "cut short":
            columns = msgspec.msgpack.decode(path.read_bytes())
            path.write_bytes(msgspec.msgpack.encode({**columns, "symbols": columns["symbols"][:-1]}))

    def edited(records: dict[str, list]) -> list[int]:
        pages = records["pages"]
        top = max(page["id"] for page in pages)
        for number, page in enumerate(pages[::9], start=1):  # an edit, in place or uploaded again under a new id
            page["text"] = page.get("text", "") + " Reticulated again with @reticulate and __gear__."
            if number % 2:
                page["id"] = top + number
        del pages[4]
        return []

    new = tmp_path / "new"
    store, changes, plan = changeset_plan(old, new, edited)
    copied: list[bool] = []
    copy = HighlightWriter._copied
    monkeypatch.setattr(HighlightWriter, "_copied", lambda writer, *args: (found := copy(writer, *args), copied.append(found is not None))[0])
    derived: list[int] = []
    tokens = code_syntax.page_tokens
    monkeypatch.setattr(code_syntax, "page_tokens", lambda text, operators: (derived.append(1), tokens(text, operators))[1])
    rebuilt = tmp_path / "rebuilt"
    rebuild_index(store, plan, rebuilt)
    pages = [page for pages in plan.changed.values() for page in pages]
    unchanged = [page for page in pages if page.id not in changes]
    assert copied.count(True) == len(unchanged) and any(len(page.text) > SHORT_PAGE_BYTES for page in unchanged)
    assert len(derived) == (len(pages) - len(unchanged) if earlier == "kept" else len(pages))
    whole = tmp_path / "whole"
    build_index(load_store(new, progress=False), whole, print_progress=False)
    for shard in plan.changed:
        files = sorted(path.relative_to(shard_path(whole, shard)) for path in shard_path(whole, shard).rglob("*")
                       if path.is_file() and path.parts[-2] not in ("pages", "entries", "sections"))
        assert DERIVED_FILE in map(str, files) and b"@reticulate" in (shard_path(whole, shard) / DERIVED_FILE).read_bytes()
        assert files == sorted(path.relative_to(shard_path(rebuilt, shard)) for path in shard_path(rebuilt, shard).rglob("*")
                               if path.is_file() and path.parts[-2] not in ("pages", "entries", "sections"))
        for path in files:
            assert same_file(shard_path(rebuilt, shard) / path, shard_path(whole, shard) / path), (shard, path)


@pytest.mark.parametrize("across", [False, True])
def test_a_changed_shard_is_built_from_the_places_of_its_lines_as_from_the_file_read_through(tmp_path, monkeypatch, across):
    """The pull finds a changed shard's lines where they are in the pages file (``PageLines``):
    the same lines, so the same pages and the same digests as reading the file through, and the
    digests a fold's product has (its index then builds nothing again); a page moved to another
    version of its shard, or (``across``) of another shard, too."""
    from docsrv.search.build import shard_digests
    from docsrv.search.rebuild import PageLines, plan_changed_shards

    old = indexed_demo(tmp_path / "old")
    monkeypatch.setattr(shard_layout, "SHARD_BLOCKS", 4)  # blocks of several versions
    shutil.rmtree(old / "index")
    build_index(load_store(old, progress=False), old / "index", print_progress=False)
    layout = Layout.of(load_store(old, page_text=False, progress=False))
    assert layout.width > 1

    def edited(records: dict[str, list]) -> list[int]:
        versions = public_versions_with_pages(records)
        pages = records["pages"]
        for page in pages[::7]:
            page["text"] = page.get("text", "") + " Reticulated again."
        for number in range(2):
            pages.append(dict(pages[3], id=max(p["id"] for p in pages) + 1, path=f"new-{number}.html", text="A new gearbox page."))
        del pages[5]
        public = {p["id"] for p in records["projects"] if p.get("privacy_level", "public") == "public"}
        others = [v for v in records["versions"] if v["project"] in public and v.get("privacy_level", "public") == "public"]
        source, other = next((a, b) for a in versions for b in others
                             if a is not b and (layout.shard_of(a["id"]) != layout.shard_of(b["id"])) is across)
        page = next(p for p in records["pages"] if p["version"] == source["id"])
        page.update(version=other["id"], project=other["project"], path="moved.html")
        return []

    new = tmp_path / "new"
    changed(old, new, edited)
    store, changes, versions = page_changes_of(old, new)
    places = PageLines.of(load_store(old, page_text=False, progress=False))
    assert places is not None
    read_through = []
    reading = rebuild.read_shard_lines
    monkeypatch.setattr(rebuild, "read_shard_lines", lambda *args: read_through.append(1) or reading(*args))
    through = plan_changed_shards(store, changes, versions, old / "index")
    assert through is not None and read_through == [1]
    placed = plan_changed_shards(store, changes, versions, old / "index", places)
    assert placed is not None and read_through == [1]
    assert (placed.digests, placed.changed) == (through.digests, through.changed)
    assert through.changed
    product = load_store(new, page_text=False, progress=False)
    assert {shard: through.digests[shard] for shard in through.changed} == \
        {shard: digest for shard, digest in shard_digests(product, Layout.of(product)).items() if shard in through.changed}


def test_a_version_that_grows_past_its_share_is_a_shard_alone_and_its_block_left_is_gone(tmp_path, monkeypatch):
    """A version of more than VERSION_PAGES pages is a shard alone: one that grows past it moves
    there from its block's shard, both built again (its block, left with no page, is gone), and
    the index holds the shards an index built whole holds and answers every search as it does."""
    old = indexed_demo(tmp_path / "old")
    store = load_store(old, progress=False)
    monkeypatch.setattr(shard_layout, "VERSION_PAGES", max(store.versions_with_pages.values()))
    shutil.rmtree(old / "index")
    build_index(store, old / "index", print_progress=False)
    layout = Layout.of(store)
    grown = 0

    def change(records: dict[str, list]) -> list[int]:
        nonlocal grown
        held = public_versions_with_pages(records)
        version = next(v for v in held[1:] if [layout.block(w["id"]) for w in held].count(layout.block(v["id"])) == 1)
        grown = version["id"]
        pages = records["pages"]
        for number in range(shard_layout.VERSION_PAGES):
            pages.append({"id": max(p["id"] for p in pages) + 1, "project": version["project"], "version": grown,
                          "path": f"grown-{number}.html", "title": "Grown", "text": f"A flywheel, {number}."})
        return [grown]

    new = tmp_path / "new"
    changed(old, new, change)
    product = load_store(new, page_text=False, progress=False)
    assert layout.width == Layout.of(product).width
    assert (layout.shard_of(grown), Layout.of(product).shard_of(grown)) == (layout.block(grown), layout.alone(grown))
    plan = plan_rebuild(product, old / "index")
    assert plan is not None
    assert set(plan.changed) == {layout.alone(grown)} and layout.block(grown) not in plan.digests
    rebuilt = tmp_path / "rebuilt"
    rebuild_index(product, plan, rebuilt)
    whole = tmp_path / "whole"
    build_index(load_store(new, progress=False), whole, print_progress=False)
    assert built_shards(rebuilt, named=False) == built_shards(whole, named=False)
    ours, theirs = SearchIndex.open(product, rebuilt), SearchIndex.open(product, whole)
    for query in ["flywheel", "grown flywheel", *VOCABULARY]:
        assert answers(ours.search_pages(query)) == answers(theirs.search_pages(query)), query
        assert ours.search_anchors(query) == theirs.search_anchors(query), query


def test_an_index_whose_blocks_are_of_another_width_is_built_whole(tmp_path, monkeypatch):
    """The block width follows the last public version's id (``block_width``): an earlier index
    of another width holds other shards, and is not built from."""
    old, new = with_one_page_changed(tmp_path, "title", "Retitled")
    store = load_store(new, page_text=False, progress=False)
    assert plan_rebuild(store, old / "index") is not None
    width = Layout.of(store).width
    monkeypatch.setattr(shard_layout, "SHARD_BLOCKS", 1)
    assert Layout.of(store).width > width
    assert plan_rebuild(store, old / "index") is None


def test_a_search_of_a_version_is_scored_by_its_shard_alone_and_one_of_every_page_by_each(tmp_path):
    """Each shard is searched on its own, scored by its own statistics (``search.query.SearchIndex``):
    pages added to a version of another shard, holding every word, change none of a version's
    answers, not even their scores; a search of every page (v1's) finds them beside the others'."""
    from docsrv.search.highlight import SHARD_BITS

    old = indexed_demo(tmp_path / "old")
    layout = Layout.of(load_store(old, page_text=False, progress=False))
    public = public_versions_with_pages({kind: read(old, kind) for kind in KINDS})
    searched = public[0]
    other = next(version for version in public if layout.shard_of(version["id"]) != layout.shard_of(searched["id"]))

    def flooded(records: dict[str, list]) -> list[int]:
        pages = records["pages"]
        top = max(page["id"] for page in pages)
        for number in range(1, 4):
            pages.append({"id": top + number, "project": other["project"], "version": other["id"], "path": f"flood-{number}.html",
                          "title": VOCABULARY[0].title(), "text": " ".join(VOCABULARY), "sections": []})
        return [other["id"]]

    new = tmp_path / "new"
    changed(old, new, flooded)
    assert docsrv("index", str(new)).returncode == 0
    stores = [load_store(snapshot, page_text=False, progress=False) for snapshot in (old, new)]
    before, after = (SearchIndex.open(store, snapshot / "index") for store, snapshot in zip(stores, (old, new), strict=True))
    project = stores[0].projects[searched["project"]].slug
    scopes = [Scope(version_scope(project, searched["slug"]), searched["id"])]
    found = 0
    for query in [*VOCABULARY, " ".join(VOCABULARY[:2]), " ".join(VOCABULARY[3:6])]:
        assert answers(after.search_pages(query, scopes=scopes)) == answers(before.search_pages(query, scopes=scopes)), query
        found += len(before.search_pages(query, scopes=scopes).hits)
    assert found > 20
    flood = {page.id for page in stores[1].pages.values() if page.path.startswith("flood-")}
    hits = after.search_pages(VOCABULARY[0]).hits
    assert flood & {hit.page_id for hit in hits} and len({hit.slot >> SHARD_BITS for hit in hits}) > 1


def test_an_index_opened_beside_the_one_before_keeps_the_highlight_files_of_its_shards_alike(tmp_path):
    """A worker opens a changeset's index as its listing says (``segments.json``: one file, not
    two of each shard), beside the index it serves: the highlight files of a shard made of the
    same are kept open, those of a shard built again are opened, and it answers as an index
    opened on its own."""
    old = indexed_demo(tmp_path / "old")
    new = tmp_path / "new"
    layout = Layout.of(load_store(old, page_text=False, progress=False))
    changed(old, new, edit_add_delete_and_rename(layout))
    store = load_store(new, page_text=False, progress=False)
    plan = plan_rebuild(store, old / "index")
    assert plan is not None
    rebuild_index(store, plan, tmp_path / "rebuilt")
    before = SearchIndex.open(load_store(old, page_text=False, progress=False), old / "index")
    ours = SearchIndex.open(store, tmp_path / "rebuilt", before)
    alone = SearchIndex.open(store, tmp_path / "rebuilt")
    kept = {shard for shard, held in ours.highlights.shards.items() if held is before.highlights.shards.get(shard)}
    assert kept == set(plan.digests) - set(plan.changed) and kept
    assert kept == {shard for shard, index in ours.pages.items() if index is before.pages.get(shard)}
    assert kept <= {shard for shard, index in ours.named.indexes.items() if index is before.named.indexes.get(shard)}
    # pages renamed: their shard's entries index is another
    assert any(ours.named.indexes[shard] is not before.named.indexes.get(shard) for shard in plan.changed)
    for query in [*VOCABULARY, "zephyrine", "reticulation gearbox"]:
        assert ours.search_pages(query) == alone.search_pages(query), query
        assert ours.search_anchors(query) == alone.search_anchors(query), query


def test_an_index_opened_beside_one_of_the_same_entries_keeps_its_entries_index(tmp_path):
    """A changeset of pages' text alone, the pages uploaded again under new ids, keeps every
    shard's entries index (``search/build.py``): a worker opening its index keeps the entries index
    it holds open, and it answers as an index opened on its own, the new pages' ids named."""
    old = indexed_demo(tmp_path / "old")

    def uploaded_again(records: dict[str, list]) -> list[int]:
        pages = records["pages"]
        top = max(page["id"] for page in pages)
        for number, page in enumerate(pages, start=1):
            page["text"] = page.get("text", "") + " Zephyrine reticulation."
            page["id"] = top + number
        return []

    new = tmp_path / "new"
    store, _changes, plan = changeset_plan(old, new, uploaded_again)
    rebuild_index(store, plan, tmp_path / "rebuilt")
    before = SearchIndex.open(load_store(old, page_text=False, progress=False), old / "index")
    ours = SearchIndex.open(store, tmp_path / "rebuilt", before)
    alone = SearchIndex.open(store, tmp_path / "rebuilt")
    assert ours.named.indexes == before.named.indexes and ours.highlights.shards.keys() == before.highlights.shards.keys()
    assert all(ours.named.indexes[shard] is index for shard, index in before.named.indexes.items())
    new_ids = {page["id"] for page in read(new, "pages")}
    titles = [page["title"] for page in read(new, "pages")][:20]
    assert new_ids >= {page for title in titles for page in ours.named.pages_named(title, None)} != set()
    for query in [*VOCABULARY, *titles, "zephyrine", "reticulation gearbox"]:
        assert ours.search_pages(query) == alone.search_pages(query), query
        assert ours.search_anchors(query) == alone.search_anchors(query), query


def test_a_listing_read_beside_an_earlier_one_takes_its_shards_listed_alike_and_checks_the_others(tmp_path):
    """A worker reads a changeset's listing beside the one it serves (``read_listing`` with the
    earlier one): a shard listed in the same bytes is the earlier listing's, not decoded again; one
    listed otherwise is decoded and checked as a listing read whole is: a file out of the index is
    refused."""
    from docsrv.search.index_files import LISTING, Listing, read_listing

    def whole(index: Path) -> Listing | None:
        try:
            return msgspec.json.decode((index / LISTING).read_bytes(), type=Listing)
        except msgspec.DecodeError:
            return None

    index = indexed_demo(tmp_path / "demo") / "index"
    earlier = read_listing(index)
    assert earlier is not None and earlier.listing == whole(index) and len(earlier.listing.shards) > 1
    listing = msgspec.json.decode((index / LISTING).read_bytes())
    key = next(key for key, shard in listing["shards"].items() if shard["pages"]["files"])
    beside = tmp_path / "beside"
    beside.mkdir()
    listing["shards"][key]["digest"] = "0" * 32
    (beside / LISTING).write_bytes(msgspec.json.encode(listing))
    read = read_listing(beside, earlier)
    assert read is not None and read.listing == whole(beside) and read.listing.shards[int(key)].digest == "0" * 32
    assert [shard for shard, listed in read.listing.shards.items() if listed is not earlier.listing.shards[shard]] == [int(key)]
    listing["shards"][key]["pages"]["files"][0] = "shards/00/pages/../../../../manifest.json"
    (beside / LISTING).write_bytes(msgspec.json.encode(listing))
    assert read_listing(beside, earlier) is None and whole(beside) is None


@pytest.mark.parametrize("spoiled", ["missing", "a file more", "another digest", "not json", "a file out of the index", "another meta",
                                     "a meta that is no object"])
def test_an_index_whose_listing_is_not_what_its_shards_hold_is_not_served(tmp_path, spoiled):
    """A server opens an index as ``segments.json`` lists it: a listing that does not list what
    the shards hold (spoiled, or of another index) is named, in one line, and the index is not
    used (``search.index_files.index_problem``)."""
    from docsrv.search.index_files import LISTING

    index = indexed_demo(tmp_path / "demo") / "index"
    assert index_problem(index) is None
    listing = msgspec.json.decode((index / LISTING).read_bytes())
    if spoiled == "missing":
        (index / LISTING).unlink()
    elif spoiled == "not json":
        (index / LISTING).write_text("{not json")
    else:
        shard = next(shard for shard in listing["shards"].values() if shard["entries"]["files"])
        if spoiled == "a file more":
            shard["pages"]["files"].append(shard["entries"]["files"][0])
        elif spoiled == "a file out of the index":
            shard["pages"]["files"][0] = "shards/00/pages/../../../../manifest.json"
        elif spoiled == "another meta":
            shard["pages"]["meta"]["segments"] = shard["pages"]["meta"]["segments"][:-1]
        elif spoiled == "a meta that is no object":
            shard["pages"]["meta"] = 5
        else:
            shard["digest"] = "0" * 32
        (index / LISTING).write_bytes(msgspec.json.encode(listing))
    problem = index_problem(index)
    assert problem is not None and "\n" not in problem and f"{index}/{LISTING}" in problem, problem


@pytest.mark.parametrize("lost", ["a file of its sections", "its sections"])
def test_an_index_whose_shard_lost_its_sections_is_not_served(tmp_path, lost):
    """Issue 62: a shard's sections index (``search/sections.py``) is a part of it a server
    opens: a file of it gone, or all of it, is named in one line and the index is not used."""
    import shutil

    index = indexed_demo(tmp_path / "demo") / "index"
    assert index_problem(index) is None
    sections = next(path for path in sorted((index / "shards").glob("*/sections")) if any(path.glob("*.idx")))
    if lost == "its sections":
        shutil.rmtree(sections)
    else:
        next(sections.glob("*.idx")).unlink()
    problem = index_problem(index)
    named = sections / "meta.json" if lost == "its sections" else index / "segments.json"
    assert problem is not None and "\n" not in problem and str(named) in problem, problem


def test_the_links_an_index_was_opened_through_can_go_once_it_serves(tmp_path):
    """A worker opens a changeset's index through links in a memory file system, when there is
    one (``index_files.links_root``), and removes them once the index serves (``index_files.remove_links``),
    off the changeset's way: the index answers before and after, and nothing is left."""
    from docsrv.search.index_files import links_root, remove_links

    snapshot = indexed_demo(tmp_path / "demo")
    store = load_store(snapshot, page_text=False, progress=False)
    leftovers: list[Path] = []
    index = SearchIndex.open(store, snapshot / "index", leftovers=leftovers)
    # each shard's pages', entries' and sections'
    assert len(leftovers) == 3 * len(index.pages) > 3 and all(any(directory.iterdir()) for directory in leftovers)
    assert {directory.parent for directory in leftovers} == {Path(links_root())}
    before = [index.search_pages(query) for query in VOCABULARY]
    remove_links(leftovers)
    assert not any(directory.exists() for directory in leftovers)
    assert [index.search_pages(query) for query in VOCABULARY] == before and any(found.hits for found in before)


def test_links_are_made_in_the_memory_file_system_when_it_may_be_written_else_in_the_temporary_directory(tmp_path, monkeypatch):
    """A link took 0.44 ms to make in this machine's /tmp and 8 µs in /dev/shm: the links go there
    when it is a directory this process may write, else where TMPDIR says."""
    import tempfile

    from docsrv.search import index_files

    writable, read_only = tmp_path / "shm", tmp_path / "read-only"
    writable.mkdir()
    read_only.mkdir(mode=0o555)
    try:
        chosen = {}
        for case, where in (("writable", writable), ("missing", tmp_path / "absent"), ("read-only", read_only)):
            monkeypatch.setattr(index_files, "MEMORY_FILESYSTEM", str(where))
            index_files.links_root.cache_clear()
            chosen[case] = index_files.links_root()
    finally:
        index_files.links_root.cache_clear()
        read_only.chmod(0o755)
    expected_read_only = str(read_only) if os.access(read_only, os.W_OK) else tempfile.gettempdir()  # root may write anywhere
    assert chosen == {"writable": str(writable), "missing": tempfile.gettempdir(), "read-only": expected_read_only}


def test_directories_of_links_left_over_by_a_killed_process_are_swept_and_no_others(tmp_path, monkeypatch):
    """A process killed between making an index's links and removing them leaves their directory:
    ``sweep_links`` removes such directories once older than any open (LINKS_LEFT_SECONDS), and
    never a fresh one (an open under way) or a directory of another name."""
    from docsrv.search import index_files

    monkeypatch.setattr(index_files, "links_root", lambda: str(tmp_path))
    left, fresh, other = (tmp_path / name for name in (f"{index_files.LINKS_PREFIX}left", f"{index_files.LINKS_PREFIX}fresh", "someone-else"))
    for directory in (left, fresh, other):
        directory.mkdir()
        (directory / "meta.json").symlink_to(tmp_path / "nowhere")
    long_ago = time.time() - index_files.LINKS_LEFT_SECONDS - 60
    for directory in (left, other):
        os.utime(directory, (long_ago, long_ago))
    index_files.sweep_links()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([fresh.name, other.name])


def test_an_index_opens_through_the_temporary_directory_when_the_memory_file_system_takes_no_links(tmp_path, monkeypatch):
    """A ``/dev/shm`` full (64 MiB in a container, shared with whatever else uses it) must not stop
    a worker from opening a changeset's index: the links are made in the temporary directory
    then, and the index answers as it does through the memory file system."""
    import tempfile

    from docsrv.search import index_files

    snapshot = indexed_demo(tmp_path / "demo")
    store = load_store(snapshot, page_text=False, progress=False)
    expected = [SearchIndex.open(store, snapshot / "index").search_pages(query) for query in VOCABULARY]
    full = tmp_path / "full"
    full.write_text("not a directory: nothing can be made in it, as in a file system that is full")
    monkeypatch.setattr(index_files, "links_root", lambda: str(full))
    leftovers: list[Path] = []
    index = SearchIndex.open(store, snapshot / "index", leftovers=leftovers)
    assert {directory.parent for directory in leftovers} == {Path(tempfile.gettempdir())}
    index_files.remove_links(leftovers)
    assert [index.search_pages(query) for query in VOCABULARY] == expected and any(found.hits for found in expected)


def made_private(*versions: int):
    """A change of a snapshot's records (``changed``) that makes ``versions`` private."""

    def change(records: dict[str, list]) -> list[int]:
        for version in records["versions"]:
            if version["id"] in versions:
                version["privacy_level"] = "private"
        return list(versions)

    return change


def ranged_demo(tmp_path: Path, monkeypatch) -> tuple[Path, Layout, list[int], int]:
    """The demo indexed in blocks of many versions, each cut into ranges: (the snapshot, its
    layout, the public versions that hold pages, the block of the first of them)."""
    monkeypatch.setattr(shard_layout, "SHARD_BLOCKS", 1)  # blocks of many versions
    monkeypatch.setattr(shard_layout, "RANGED_PAGES", 100)  # each cut into ranges
    old = indexed_demo(tmp_path / "old")
    shutil.rmtree(old / "index")
    build_index(load_store(old, progress=False), old / "index", print_progress=False)
    layout = Layout.of(load_store(old, page_text=False, progress=False))
    held = [v["id"] for v in public_versions_with_pages({kind: read(old, kind) for kind in KINDS})]
    return old, layout, held, layout.shard_of(held[0])


def test_a_block_that_only_loses_versions_keeps_its_entries_index_with_their_documents_deleted(tmp_path, monkeypatch):
    """A version made private takes its pages out of its block: the segments of the block's
    pages and sections of its range of versions are built again, the other ranges' linked; its
    entries index is the earlier shard's files, linked, the version's documents deleted by a
    commit of new files (the earlier index keeps its own), and the index answers every search and
    lookup as one built whole. A block that would then hold more pages deleted than not has its
    entries index built again."""
    old, layout, held, block = ranged_demo(tmp_path, monkeypatch)
    in_block = [version for version in held if layout.shard_of(version) == block]
    assert len(in_block) >= 5 and in_block[-1] != max(held)

    earlier, steps = old / "index", [(in_block[1],), (in_block[2], in_block[3])]
    for step, versions in enumerate(steps):
        new = tmp_path / f"new-{step}"
        changed(old, new, made_private(*[v for done in steps[:step + 1] for v in done]))
        store = load_store(new, page_text=False, progress=False)
        plan = plan_rebuild(store, earlier)
        assert plan is not None and set(plan.changed) == {block}
        earlier_meta = (shard_path(earlier, block) / "entries" / "meta.json").read_bytes()
        rebuilt = tmp_path / f"rebuilt-{step}"
        rebuild_index(store, plan, rebuilt)
        whole = tmp_path / f"whole-{step}"
        build_index(load_store(new, progress=False), whole, print_progress=False)
        ours, theirs = built_shards(rebuilt, named=False), built_shards(whole, named=False)
        deleted = ours[block].deleted
        assert {key: msgspec.structs.replace(shard, deleted=0) for key, shard in ours.items()} == theirs
        ours = built_shards(rebuilt)
        entries, before = shard_path(rebuilt, block) / "entries", shard_path(earlier, block) / "entries"
        kept = {path.name for path in entries.iterdir() if (before / path.name).exists()
                and (before / path.name).stat().st_ino == path.stat().st_ino}
        if step == 0:  # 61 pages' documents deleted, fewer than the 240 left
            assert deleted == len([p for p in read(old, "pages") if p["version"] in versions]) > 0
            assert kept and "meta.json" not in kept and any(name.endswith(".del") for name in {p.name for p in entries.iterdir()} - kept)
            assert (before / "meta.json").read_bytes() == earlier_meta != (entries / "meta.json").read_bytes()
        else:  # 182 pages deleted against 180 left: built again, none deleted
            assert (deleted, kept) == (0, set())
        # The pages and sections of the ranges the versions left are built again; every other
        # range's segments are the earlier shard's files, linked.
        left = {shard_layout.segment_of(block, layout.width, ours[block].pages, version) for version in versions}
        was_parts = built_shards(earlier)[block].parts
        staying = [part for number, part in ours[block].parts.items() if number not in left]
        assert staying and all(was_parts[number] == part for number, part in ours[block].parts.items() if number not in left)
        assert left & was_parts.keys() and all(was_parts[number] != ours[block].parts.get(number) for number in left & was_parts.keys())
        for name in ("pages", "sections"):
            now, before = shard_path(rebuilt, block) / name, shard_path(earlier, block) / name
            linked = {path.name for path in now.iterdir() if (before / path.name).exists()
                      and (before / path.name).stat().st_ino == path.stat().st_ino}
            assert linked == {segment.segment_id.replace("-", "") + suffix for part in staying
                              for segment in getattr(part, name) for suffix in SEGMENT_FILES}, name
        ours_index, theirs_index = SearchIndex.open(store, rebuilt), SearchIndex.open(store, whole)
        titles = {p["title"] for p in read(old, "pages")}
        for query in [*VOCABULARY, *sorted(titles)[:40], "install gearbox", "quickstart"]:
            assert answers(ours_index.search_pages(query)) == answers(theirs_index.search_pages(query)), query
            assert ours_index.search_anchors(query) == theirs_index.search_anchors(query), query
            assert ours_index.named.pages_named(query, None) == theirs_index.named.pages_named(query, None), query
            assert ours_index.named.holds_name(query) == theirs_index.named.holds_name(query), query
        earlier = rebuilt


def test_the_ranges_a_changeset_left_alone_take_their_pages_records_as_runs(tmp_path, monkeypatch):
    """A block built again after a changeset made one of its versions private: the ranges the
    version was not in are linked, and their pages' highlight records and what was derived from
    them are taken from the earlier shard at once, a run a range (``HighlightWriter.copy_run``,
    ``Recorded.run``), the others' page by page; every file but the tantivy indexes is byte for
    byte what a whole build writes, for pages whose words are all recorded too."""
    from docsrv.search import highlight
    from docsrv.search.build import DERIVED_FILE
    from docsrv.search.highlight import HighlightWriter

    monkeypatch.setattr(highlight, "SHORT_PAGE_BYTES", 0)
    old, layout, held, block = ranged_demo(tmp_path, monkeypatch)
    leaving = [version for version in held if layout.shard_of(version) == block][1]

    new = tmp_path / "new"
    store, _changes, plan = changeset_plan(old, new, made_private(leaving))
    assert set(plan.changed) == {block}
    runs: list[int] = []
    one_by_one: list[bool] = []
    copy_run, copied = HighlightWriter.copy_run, HighlightWriter._copied
    monkeypatch.setattr(HighlightWriter, "copy_run", lambda writer, source, first, count: (runs.append(count), copy_run(writer, source, first, count))[1])
    monkeypatch.setattr(HighlightWriter, "_copied", lambda writer, *args: (found := copied(writer, *args), one_by_one.append(found is not None))[0])
    rebuilt = tmp_path / "rebuilt"
    rebuild_index(store, plan, rebuilt)
    ranges = {shard_layout.segment_of(block, layout.width, len(plan.changed[block]), page.version) for page in plan.changed[block]}
    assert len(runs) == len(ranges) - 1 and all(one_by_one)  # every range but the one the version left
    assert sum(runs) + len(one_by_one) == len(plan.changed[block]) and len(one_by_one) > 0
    whole = tmp_path / "whole"
    build_index(load_store(new, progress=False), whole, print_progress=False)
    files = sorted(path.relative_to(shard_path(whole, block)) for path in shard_path(whole, block).rglob("*")
                   if path.is_file() and path.parts[-2] not in ("pages", "entries", "sections") and path.name != "shard.json")
    assert {DERIVED_FILE, "highlight/entries", "highlight/positions"} <= set(map(str, files))
    assert files == sorted(path.relative_to(shard_path(rebuilt, block)) for path in shard_path(rebuilt, block).rglob("*")
                           if path.is_file() and path.parts[-2] not in ("pages", "entries", "sections") and path.name != "shard.json")
    for path in files:
        assert same_file(shard_path(rebuilt, block) / path, shard_path(whole, block) / path), path
    assert (shard_path(whole, block) / "highlight" / "positions").stat().st_size > 0
    ours = built_shards(rebuilt, named=False)
    assert {key: msgspec.structs.replace(shard, deleted=0) for key, shard in ours.items()} == built_shards(whole, named=False)
    ours_index, theirs_index = SearchIndex.open(store, rebuilt), SearchIndex.open(store, whole)
    for query in [*VOCABULARY, "install gearbox"]:
        assert answers(ours_index.search_pages(query)) == answers(theirs_index.search_pages(query)), query


def test_an_index_whose_shard_lost_its_table_of_versions_is_not_served(tmp_path):
    """A block's highlight files say where each version's pages start (``highlight/versions``):
    the file gone, a server does not open the index, and says which file in one line."""
    index = indexed_demo(tmp_path / "demo") / "index"
    assert index_problem(index) is None
    table = next(path for path in sorted((index / "shards").glob("*/highlight/versions")) if path.stat().st_size)
    table.unlink()
    problem = index_problem(index)
    assert problem is not None and "\n" not in problem and str(table) in problem, problem


def test_a_kept_range_whose_segment_files_are_gone_is_built_again(tmp_path, monkeypatch):
    """A block built again keeps the segments of its ranges made of the same pages, unless the
    earlier shard lost a segment's files (damaged): that range is built again, nothing of it
    linked, and the index answers as one built whole."""
    old, layout, held, block = ranged_demo(tmp_path, monkeypatch)
    was = built_shards(old / "index")[block]
    leaving = held[0]
    left = shard_layout.segment_of(block, layout.width, was.pages, leaving)
    damaged = next(number for number in was.parts if number != left)
    for segment in was.parts[damaged].sections:
        (shard_path(old / "index", block) / "sections" / (segment.segment_id.replace("-", "") + ".term")).unlink()

    new = tmp_path / "new"
    changed(old, new, made_private(leaving))
    store = load_store(new, page_text=False, progress=False)
    plan = plan_rebuild(store, old / "index")
    assert plan is not None and block in plan.changed
    rebuilt = tmp_path / "rebuilt"
    rebuild_index(store, plan, rebuilt)
    ours = built_shards(rebuilt)[block]
    for name in ("pages", "sections"):
        now, before = shard_path(rebuilt, block) / name, shard_path(old / "index", block) / name
        linked = {path.name for path in now.iterdir() if (before / path.name).exists() and (before / path.name).stat().st_ino == path.stat().st_ino}
        assert not {segment.segment_id.replace("-", "") + suffix for segment in getattr(ours.parts[damaged], name)
                    for suffix in SEGMENT_FILES} & linked, name
        assert linked, name  # the other ranges' are kept
    whole = tmp_path / "whole"
    build_index(load_store(new, progress=False), whole, print_progress=False)
    assert {key: msgspec.structs.replace(shard, deleted=0) for key, shard in built_shards(rebuilt, named=False).items()} == built_shards(
        whole, named=False)  # its entries index kept, the version's documents deleted
    ours_index, theirs_index = SearchIndex.open(store, rebuilt), SearchIndex.open(store, whole)
    for query in [*VOCABULARY, "install gearbox", "quickstart"]:
        assert answers(ours_index.search_pages(query)) == answers(theirs_index.search_pages(query)), query


@pytest.mark.parametrize("hard_links", [True, False])
def test_a_changeset_index_links_the_shards_it_keeps_to_where_the_earlier_one_does(tmp_path, monkeypatch, hard_links):
    """A changeset's index names each shard it keeps from the changeset index before it by that
    index's link itself, hard-linked (no inode of its own); on a file system that does not
    hard-link symbolic links, by a symbolic link of its own to the same place. Either way the
    shard is the same files, and a shard of a whole index (a directory) gets a link to it."""
    from docsrv.search.rebuild import link_shards

    built = tmp_path / "index-shards" / "1" / "shards" / "00"
    built.mkdir(parents=True)
    (built / "shard.json").write_text("{}")
    whole = tmp_path / "snapshot" / "index" / "shards" / "02"
    whole.mkdir(parents=True)
    first, second = tmp_path / "indexes" / "1", tmp_path / "indexes" / "2"
    (first / "shards").mkdir(parents=True)
    (second / "shards").mkdir(parents=True)
    (first / "shards" / "00").symlink_to("../../../index-shards/1/shards/00")
    if not hard_links:
        def refused(*args, **kwargs):
            raise OSError(1, "Operation not permitted")

        monkeypatch.setattr(rebuild.os, "link", refused)
    link_shards(second, first, [0])
    link_shards(second, tmp_path / "snapshot" / "index", [2])
    kept, was = second / "shards" / "00", first / "shards" / "00"
    assert kept.is_symlink() and kept.resolve() == built.resolve() and (kept / "shard.json").read_text() == "{}"
    assert os.path.samestat(kept.lstat(), was.lstat()) is hard_links
    assert (second / "shards" / "02").is_symlink() and (second / "shards" / "02").resolve() == whole.resolve()
