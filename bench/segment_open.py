"""What a shard made of segments costs a server: opening it, and a search of it.

    python bench/segment_open.py [--scale large] [--pages 2000] [--segments 4 8] [--shards 20]

Why it matters: a changeset that makes versions private waits for their shards to be built again
whole (``search/build.py``; issue 61's lag). Shards cut into segments by ranges of version ids,
each built apart and listed in one ``meta.json`` (``bench/segment_scores.py`` says they would
score as the whole build cut alike), would have a change build the segments it touches alone.
What they would cost in return is here: each segment is files a server opens and a search visits.

``--pages`` pages of the scale's synthetic snapshot (``bench/scratch/``) are indexed as docsrv's
pages index holds them (``search.index_files.build_schema``), ``--shards`` times over: as one
segment, and as each count of ``--segments`` built apart (one index each, their files linked, one
``meta.json`` listing them in order). For each: the fastest of three opens of every shard (the
index and a searcher, as a server opens a shard's pages index; its sections and entries indexes
are two more alike), and the median time of a two-word search of one shard. Written to
``bench/results/<date>-segment-open-<scale>.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import tantivy

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from docsrv.search.build import PAGE_DECODER  # noqa: E402
from docsrv.search.index_files import build_schema, quiet  # noqa: E402
from docsrv.snapshot.records import Page  # noqa: E402
from run import snapshot_path  # noqa: E402

#: Where the pages are taken from in the pages file: past the first versions' (the bench's own
#: changesets make those private).
FIRST_LINE = 300_000


def read_pages(scale: str, count: int) -> list[Page]:
    with open(snapshot_path(scale, 1) / "pages.jsonl", "rb") as file:
        return [PAGE_DECODER.decode(line) for line in itertools.islice(file, FIRST_LINE, FIRST_LINE + count)]


def add_pages(writer: tantivy.IndexWriter, pages: list[Page], first_slot: int) -> None:
    for slot, page in enumerate(pages, start=first_slot):
        headings = " ".join(section.title for section in page.sections)
        writer.add_document(tantivy.Document(scope="project/version", slot=slot, changelog=0, title=page.title, headings=headings,
                                             body=page.text, path=page.document_name, symbols="",
                                             stems=[page.title, headings, page.text, page.document_name]))


def build_segmented(directory: Path, pages: list[Page], segments: int) -> None:
    """An index of ``pages`` in ``directory`` made of ``segments`` segments, each built apart."""
    directory.mkdir(parents=True)
    size = -(-len(pages) // segments)
    listed: list[dict] = []
    meta: dict = {}
    for part in range(segments):
        apart = directory.parent / f"{directory.name}-{part}"
        apart.mkdir()
        writer = quiet(tantivy.Index(build_schema(), path=str(apart))).writer(heap_size=64 << 20, num_threads=1)
        add_pages(writer, pages[part * size:(part + 1) * size], part * size)
        writer.commit()
        writer.wait_merging_threads()
        meta = json.loads((apart / "meta.json").read_text())
        listed += meta["segments"]
        for name in os.listdir(apart):
            if not name.startswith(".") and name != "meta.json":
                os.link(apart / name, directory / name)
    (directory / "meta.json").write_text(json.dumps({**meta, "segments": listed}))


def measure(root: Path, pages: list[Page], segments: int, shards: int) -> dict:
    for shard in range(shards):
        build_segmented(root / str(shard), pages, segments)
    os.sync()
    opens = []
    for _round in range(3):
        started = time.perf_counter()
        opened = []
        for shard in range(shards):
            index = tantivy.Index.open(str(root / str(shard)))
            opened.append((index, index.searcher()))
        opens.append(time.perf_counter() - started)
    index, searcher = opened[0]
    assert searcher.num_segments == segments and searcher.num_docs == len(pages)
    query = index.parse_query("install configuration", ["title", "body"])
    searches = []
    for _round in range(2000):
        started = time.perf_counter()
        searcher.search(query, 10)
        searches.append(time.perf_counter() - started)
    found = {"segments": segments, "open_ms_per_shard": round(min(opens) / shards * 1000, 3),
             "search_us_median": round(statistics.median(searches) * 1e6, 1)}
    print(found, flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="large", choices=["small", "medium", "large"])
    parser.add_argument("--pages", type=int, default=2000, help="pages a shard holds (the large scale's median shard: about 2,000)")
    parser.add_argument("--segments", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--shards", type=int, default=20)
    args = parser.parse_args()
    pages = read_pages(args.scale, args.pages)
    with tempfile.TemporaryDirectory(dir=HERE / "scratch") as scratch:
        counts = [measure(Path(scratch) / str(segments), pages, segments, args.shards) for segments in (1, *args.segments)]
    report = {"date": date.today().isoformat(), "command": " ".join(["python bench/segment_open.py", *sys.argv[1:]]),
              "scale": args.scale, "pages": len(pages), "shards": args.shards, "counts": counts}
    out = HERE / "results" / f"{report['date']}-segment-open-{args.scale}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
