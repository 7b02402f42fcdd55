"""What each part of a shard costs its build: the pages index, the sections index, the named
entries index, and the fields of the entries.

    python bench/shard_parts.py [--scale large] [--pages 2000] [--rounds 3]

Why it matters: a changeset that makes a version private waits for its shard to be built again
whole (``search/build.py``; issue 61's lag), though most of what the build makes is what the
shard held before. A part that a version leaving could leave as it was (its documents deleted,
not made again) is what this says is worth it.

``--pages`` pages of the scale's synthetic snapshot (``bench/scratch/``) are built as one shard by
docsrv's own build (``search.build.build_shard``): whole, without the named entries' documents,
without the sections', and without both. Then the entries' documents alone are added to an entries
index as they are, and without each of their costliest fields. For each: the CPU of every thread
of the process (Python's adding, tantivy's indexing and its commit), a page, and the wall time,
the fastest of ``--rounds``. Written to ``bench/results/<date>-shard-parts-<scale>.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

import orjson
import tantivy

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from segment_open import read_pages  # noqa: E402

from docsrv.search import build, named_entries, sections  # noqa: E402
from docsrv.search.index_files import SCHEMA_VERSION, quiet  # noqa: E402
from docsrv.snapshot.records import Page  # noqa: E402

MADE = "entries' documents made (Python alone)"


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def fastest(rounds: int, run: Callable[[Path], None]) -> tuple[float, float]:
    """The least CPU seconds (every thread) and wall seconds of ``rounds`` runs, each in a new directory."""
    cpu, wall = [], []
    for _round in range(rounds):
        with tempfile.TemporaryDirectory(dir=HERE / "scratch") as scratch:
            started, used = time.perf_counter(), cpu_seconds()
            run(Path(scratch))
            cpu.append(cpu_seconds() - used)
            wall.append(time.perf_counter() - started)
    return min(cpu), min(wall)


def none(*_args: object) -> Iterator[object]:
    return iter(())


def shard_without(pages: list[Page], rounds: int, entries: bool, with_sections: bool) -> tuple[float, float]:
    """A shard of ``pages`` built by docsrv's build, with or without the entries' and the sections' documents."""
    scopes = {page.version: "project/version" for page in pages}
    made = build.Shard(digest="", pages=len(pages), operators=[], schema=SCHEMA_VERSION, width=1, entries="", documents="")
    kept_entries, kept_sections = named_entries.documents, sections.documents
    named_entries.documents = kept_entries if entries else none  # type: ignore[assignment]
    sections.documents = kept_sections if with_sections else none  # type: ignore[assignment]
    try:
        return fastest(rounds, lambda scratch: build.build_shard(scratch, 2, pages, scopes, frozenset(), {}, made)())
    finally:
        named_entries.documents, sections.documents = kept_entries, kept_sections


def entries_without(documents: list[dict], rounds: int, fields: set[str]) -> tuple[float, float]:
    """The entries' ``documents`` (made beforehand) added to an entries index and committed, without ``fields``."""
    lines = [orjson.dumps({name: value for name, value in document.items() if name not in fields}).decode() for document in documents]

    def run(scratch: Path) -> None:
        index = named_entries.register_tokenizers(quiet(tantivy.Index(named_entries.build_schema(), path=str(scratch))))
        writer = index.writer(heap_size=64 << 20, num_threads=1)
        for line in lines:
            writer.add_json(line)
        writer.commit()
        writer.wait_merging_threads()

    return fastest(rounds, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="large", choices=["small", "medium", "large"])
    parser.add_argument("--pages", type=int, default=2000, help="pages of the shard (the large scale's median shard: about 2,000)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pages = read_pages(args.scale, args.pages)
    results: dict[str, dict[str, float]] = {}

    def record(name: str, found: tuple[float, float]) -> None:
        cpu, wall = found
        results[name] = {"cpu_us_per_page": round(cpu / len(pages) * 1e6, 1), "wall_ms": round(wall * 1000, 1)}
        print(f"{name}: {results[name]}", flush=True)

    record("shard whole", shard_without(pages, args.rounds, entries=True, with_sections=True))
    record("shard without entries", shard_without(pages, args.rounds, entries=False, with_sections=True))
    record("shard without sections", shard_without(pages, args.rounds, entries=True, with_sections=False))
    record("shard without either", shard_without(pages, args.rounds, entries=False, with_sections=False))
    started = time.perf_counter()
    made = [line for slot, page in enumerate(pages) for line in named_entries.documents(page, "project/version", slot, False)]
    results[MADE] = {"cpu_us_per_page": round((time.perf_counter() - started) / len(pages) * 1e6, 1)}
    print(f"entries' documents made (Python alone): {results[MADE]}", flush=True)
    documents = [orjson.loads(line) for line in made]
    for name, fields in (("entries index", set()), ("entries index without anchor grams", {named_entries.ANCHOR_GRAMS}),
                         ("entries index without stored heading and anchor", {"heading", "anchor"}),
                         ("entries index without heading words", {"heading_words"})):
        record(name, entries_without(documents, args.rounds, fields))
    report = {"date": date.today().isoformat(), "command": " ".join(["python bench/shard_parts.py", *sys.argv[1:]]),
              "scale": args.scale, "pages": len(pages), "entries": len(documents), "results": results}
    out = HERE / "results" / f"{report['date']}-shard-parts-{args.scale}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
