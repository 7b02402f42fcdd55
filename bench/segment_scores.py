"""Whether an index whose shards are made of segments built apart answers every search as one
whose shards are each built whole, to the bit.

    python bench/segment_scores.py [--corpus python|django|...] [--pages 16] [--queries 3000]

Why it matters: a shard is built again whole after any change of its pages (``search/build.py``),
which is what a changeset that makes versions private waits for (issue 61's lag). If a tantivy
index listing segments built apart (each in an index of its own, their files linked, one
``meta.json`` listing them in the pages' order) scores as one segment of the same documents does,
a change could build the segments of the pages it touches alone and list the others again.

The corpus (a Debian Sphinx build, ``bench/relevance.py``'s) is indexed twice by docsrv's own
build (``search.build.build_index``): as it is, and with each shard's pages and sections indexes
cut into segments of ``--pages`` pages (with their sections); the named entries' index is built
as it is in both. The judged queries of the corpus and ``--queries`` more of one to five words
its pages hold (seeded) are searched in both as ``/api/v2/docsearch/`` searches them
(``SearchIndex.search_pages``), in the version and over every shard: each hit (page, score to
the bit, where its highlight starts) and the total compared; with ``--without-near``, the
sections' near pairs (tantivy's sloppy phrases) are left out of both, to tell their part. Written to
``bench/results/<date>-segment-scores-<corpus>[-without-near].json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import types
from datetime import date
from pathlib import Path

import tantivy

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from relevance import CORPORA, judged  # noqa: E402

from docsrv.search import build, sections  # noqa: E402
from docsrv.search.index_files import PAGES, SECTIONS, version_scope  # noqa: E402
from docsrv.search.query import Scope, SearchIndex  # noqa: E402
from docsrv.store.loaded import load_store  # noqa: E402
from search import sphinx_snapshot  # noqa: E402


class SegmentedWriter:
    """Takes a shard's documents as tantivy's writer does and, at the commit, writes them as
    segments of ``pages`` pages each (a page's documents share its ``slot``), each built in an
    index of its own beside ``path`` and listed in ``path``'s ``meta.json`` in the order added."""

    def __init__(self, schema: tantivy.Schema, path: Path, heap: int, pages: int) -> None:
        self.schema, self.path, self.heap, self.pages = schema, path, heap, pages
        self.parts: list[list[tantivy.Document]] = []
        self.slots_in_part, self.last_slot = 0, None

    def add_document(self, document: tantivy.Document) -> None:
        slot = document.get_first("slot")
        if slot != self.last_slot:
            self.last_slot = slot
            if not self.parts or self.slots_in_part == self.pages:
                self.parts.append([])
                self.slots_in_part = 0
            self.slots_in_part += 1
        self.parts[-1].append(document)

    def commit(self) -> None:
        meta = json.loads((self.path / "meta.json").read_text())
        segments = []
        for documents in self.parts:
            apart = Path(tempfile.mkdtemp(dir=self.path.parent))
            writer = tantivy.Index(self.schema, path=str(apart)).writer(heap_size=self.heap, num_threads=1)
            for document in documents:
                writer.add_document(document)
            writer.commit()
            writer.wait_merging_threads()
            segments += json.loads((apart / "meta.json").read_text())["segments"]
            for name in os.listdir(apart):
                if not name.startswith(".") and name != "meta.json":
                    os.link(apart / name, self.path / name)
            shutil.rmtree(apart)
        meta["segments"] = segments
        (self.path / "meta.json").write_text(json.dumps(meta))

    def wait_merging_threads(self) -> None:
        pass


def segmented_tantivy(pages: int) -> types.SimpleNamespace:
    """tantivy as ``search.build`` uses it, but for the pages and sections indexes: segmented."""

    class Index:
        def __init__(self, schema: tantivy.Schema, path: str) -> None:
            self.schema, self.path, self.real = schema, Path(path), tantivy.Index(schema, path=path)

        def config_reader(self, *args: object) -> None:
            self.real.config_reader(*args)

        def writer(self, heap_size: int, num_threads: int) -> SegmentedWriter:
            return SegmentedWriter(self.schema, self.path, heap_size, pages)

    def index(schema: tantivy.Schema, path: str) -> object:
        return Index(schema, path) if Path(path).name in (PAGES, SECTIONS) else tantivy.Index(schema, path=path)

    return types.SimpleNamespace(**{**{name: getattr(tantivy, name) for name in dir(tantivy) if not name.startswith("_")}, "Index": index})


def word_queries(store, count: int, rng: random.Random) -> list[str]:
    words = sorted({word.lower() for page in store.pages_ordered for word in re.findall(r"[A-Za-z_]{3,}", page.text[:4000])})
    return [" ".join(rng.sample(words, rng.randint(1, 5))) for _query in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="python", choices=sorted(CORPORA))
    parser.add_argument("--pages", type=int, default=16, help="pages to a segment")
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--without-near", action="store_true",
                        help="the sections' near pairs (sloppy phrases) left out of every search, both indexes alike")
    args = parser.parse_args()
    if args.without_near:
        sections.near_clauses = lambda _schema, _parts: []
    name, html, package, project, version = CORPORA[args.corpus]
    store = load_store(sphinx_snapshot(name, html, package, project, version), progress=False)
    queries = [judged_query.query for judged_query in judged(args.corpus)] + word_queries(store, args.queries, random.Random(61))
    searched = store.version_of(store.project_by_slug[project].id, version)
    assert searched is not None
    scopes = [Scope(version_scope(project, version), searched.id)]
    with tempfile.TemporaryDirectory(dir=HERE / "scratch") as work:
        whole, segmented = Path(work) / "whole", Path(work) / "segmented"
        build.build_index(store, whole, print_progress=False)
        real, build.tantivy = build.tantivy, segmented_tantivy(args.pages)  # type: ignore[attr-defined]
        try:
            build.build_index(store, segmented, print_progress=False)
        finally:
            build.tantivy = real  # type: ignore[attr-defined]
        counts = {f"{index.name} {kind}": sum(len(json.loads((shard / kind / "meta.json").read_text())["segments"])
                            for shard in (index / "shards").iterdir())
                  for index in (whole, segmented) for kind in (PAGES, SECTIONS)}
        indexes = SearchIndex.open(store, whole), SearchIndex.open(store, segmented)
        searches = differ = hits = 0
        examples = []
        for query in queries:
            for scoped in (scopes, None):
                found = [index.search_pages(query, scopes=scoped) for index in indexes]
                searches += 1
                hits += len(found[0].hits)
                if found[0].hits != found[1].hits or found[0].total != found[1].total:
                    differ += 1
                    if len(examples) < 10:
                        pairs = zip(found[0].hits, found[1].hits, strict=False)
                        at = next((at for at, (one, other) in enumerate(pairs) if one != other), None)
                        examples.append({"query": query, "scoped": scoped is not None, "first_differing_hit": at,
                                         "totals": [found[0].total, found[1].total],
                                         **({} if at is None else {"whole": list(found[0].hits[at]),
                                                                   "segmented": list(found[1].hits[at])})})
    result = {"bench": "segment_scores", "date": date.today().isoformat(), "corpus": args.corpus,
              "command": " ".join(["python", "bench/segment_scores.py", *sys.argv[1:]]), "pages": len(store.pages),
              "pages_per_segment": args.pages, "near_pairs": not args.without_near, "segments": counts, "searches": searches, "hits": hits,
              "searches_that_differ": differ, "examples": examples}
    out = HERE / "results" / f"{date.today().isoformat()}-segment-scores-{args.corpus}{'-without-near' if args.without_near else ''}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({key: value for key, value in result.items() if key != "examples"}), f"written to {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
