"""What a change of pages costs the search index: built whole, against built again shard by shard
from the index before it; and what the shards cost a search, for each count of blocks.

    python bench/index_rebuild.py [--scale medium] [--versions 1 10 100] [--shard-blocks 16 64]
                                  [--queries 300]

For each count of blocks (``search.shards.SHARD_BLOCKS``), the synthetic snapshot of the scale
(``bench/scratch/``, made when missing) is indexed whole (``search/build.py``'s ``build_index``). Then, for
each count of versions, a build's end of that many versions, chosen at random: the product
snapshot (the other record files linked, the pages file written again with every page of those
versions edited, sealed anew) is indexed from the first index (``plan_rebuild``, which reads the
pages file for the shards' digests and the changed shards' pages, then ``rebuild_index``): the
seconds of each, and how many shards and pages were built.

The product of the smallest count is also indexed whole, and every query is asked of both: the
hits, their order, scores and slots, and the totals must be equal (the run fails otherwise).

Search: the queries (one to three words of the pages' titles, seeded) over the index of each
count of blocks, in one process, one after another, three rounds interleaved, over every version
and over one version each (a random one with pages, as the docs' in-page search asks): the
median and 99th percentile of each.
Written to ``bench/results/<date>-index-rebuild-<scale>.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from docsrv.search import rebuild  # noqa: E402
from docsrv.search import shards as shard_layout  # noqa: E402
from docsrv.search.build import build_index  # noqa: E402
from docsrv.search.index_files import version_scope  # noqa: E402
from docsrv.search.query import Scope, SearchIndex  # noqa: E402
from docsrv.search.rebuild import plan_rebuild, rebuild_index  # noqa: E402
from docsrv.snapshot.load import manifest_of, record_file  # noqa: E402
from docsrv.snapshot.records import KINDS  # noqa: E402
from docsrv.snapshot.write import write_manifest  # noqa: E402
from docsrv.store.loaded import Store, load_store  # noqa: E402
from run import WORK, snapshot_path  # noqa: E402


def product_of(snapshot: Path, directory: Path, versions: set[int]) -> None:
    """``directory``: ``snapshot`` with every page of ``versions`` edited, as a build's end uploads them again."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for kind in KINDS:
        for path in record_file(snapshot, kind):
            if kind != "pages":
                (directory / path.name).hardlink_to(path)
    (pages,) = record_file(snapshot, "pages")
    assert pages.suffix == ".jsonl", "the bench edits plain JSON Lines"
    with open(pages, "rb") as source, open(directory / pages.name, "wb") as target:
        for line in source:
            if b'"version":' in line and json.loads(line)["version"] in versions:
                page = json.loads(line)
                page["text"] = page.get("text", "") + " Edited by a build's end: reticulation."
                line = json.dumps(page, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
            target.write(line)
    manifest = manifest_of(snapshot)
    write_manifest(directory, msgspec.structs.replace(manifest, name=f"{manifest.name}-edited"))


def queries_of(store: Store, count: int, rng: random.Random) -> list[str]:
    titles = [page.title.split() for page in rng.sample(store.pages_ordered, min(count * 4, len(store.pages_ordered))) if page.title]
    return [" ".join(rng.sample(words, min(len(words), rng.randrange(1, 4)))) for words in titles[:count]]


def timed(index: SearchIndex, queries: list[str], scopes: list[list[Scope] | None]) -> list[float]:
    seconds = []
    for query, scope in zip(queries, scopes, strict=True):
        started = time.perf_counter()
        index.search_pages(query, scopes=scope)
        seconds.append(time.perf_counter() - started)
    return seconds


def summary(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {"median_ms": round(statistics.median(ordered) * 1000, 3), "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium")
    parser.add_argument("--versions", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--shard-blocks", type=int, nargs="+", default=[shard_layout.SHARD_BLOCKS])
    parser.add_argument("--queries", type=int, default=300)
    options = parser.parse_args()
    rng = random.Random(35)
    snapshot = snapshot_path(options.scale, 1)
    work = WORK / f"index-rebuild-{options.scale}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results: dict = {"scale": options.scale, "cuts": []}
    try:
        store = load_store(snapshot, progress=False)
        results["pages"] = len(store.pages)
        with_pages = sorted(store.versions_with_pages)
        queries = queries_of(store, options.queries, rng)
        products = {}
        for count in options.versions:
            products[count] = work / f"product-{count}"
            product_of(snapshot, products[count], set(rng.sample(with_pages, count)))
        last = options.versions[0]
        for blocks in options.shard_blocks:
            shard_layout.SHARD_BLOCKS = blocks
            whole = work / f"whole-{blocks}"
            seconds = build_index(store, whole, print_progress=False)
            shards = rebuild.read_shards(whole, shard_layout.Layout.of(store).width)
            assert shards is not None
            sizes = sorted(shard.pages for shard in shards.values())
            row: dict = {"shard_blocks": blocks, "whole_seconds": round(seconds, 2), "shards": len(shards),
                         "pages_per_shard": {"median": sizes[len(sizes) // 2], "largest": sizes[-1]}, "rebuilds": []}
            print(f"{options.scale}: {len(store.pages):,} pages indexed whole in {row['whole_seconds']} s in {row['shards']} shards "
                  f"({blocks} to {2 * blocks} blocks of versions; pages a shard: {row['pages_per_shard']})", flush=True)
            for count, product in products.items():
                edited = load_store(product, page_text=False, progress=False)
                started = time.perf_counter()
                plan = plan_rebuild(edited, whole)
                planned = time.perf_counter() - started
                assert plan is not None
                built = rebuild_index(edited, plan, work / f"rebuilt-{blocks}-{count}")
                rebuilt = {"versions": count, "shards_built": len(plan.changed), "pages_built": sum(map(len, plan.changed.values())),
                           "plan_seconds": round(planned, 2), "build_seconds": round(built, 2), "total_seconds": round(planned + built, 2)}
                row["rebuilds"].append(rebuilt)
                print(f"  {count} version(s) edited: {rebuilt['shards_built']} shards of {rebuilt['pages_built']:,} pages built again in "
                      f"{rebuilt['total_seconds']} s (digests and pages read {rebuilt['plan_seconds']} s, "
                      f"shards built {rebuilt['build_seconds']} s)", flush=True)
            edited = load_store(products[last], page_text=False, progress=False)
            build_index(load_store(products[last], progress=False), work / f"product-whole-{blocks}", print_progress=False)
            ours = SearchIndex.open(edited, work / f"rebuilt-{blocks}-{last}")
            theirs = SearchIndex.open(edited, work / f"product-whole-{blocks}")
            differing = [query for query in [*queries, "reticulation"] if ours.search_pages(query) != theirs.search_pages(query)]
            row["equal_to_whole"] = {"queries": len(queries) + 1, "differing": differing}
            print(f"  built again after {last} versions edited, against built whole: {len(differing)} of {len(queries) + 1} queries differ")
            assert not differing, differing[:5]
            del ours, theirs
            results["cuts"].append(row)
        del store
        store = load_store(snapshot, page_text=False, progress=False)
        indexes = {blocks: SearchIndex.open(store, work / f"whole-{blocks}") for blocks in options.shard_blocks}
        versions = [store.versions[identity] for identity in rng.choices(with_pages, k=len(queries))]
        scoped: list[list[Scope] | None] = [[Scope(version_scope(store.projects[v.project].slug, v.slug), v.id)] for v in versions]
        rounds: dict[str, list[float]] = {f"{blocks} blocks, {kind}": [] for blocks in indexes for kind in ("every version", "one version")}
        for _round in range(3):
            for blocks, index in indexes.items():
                rounds[f"{blocks} blocks, every version"] += timed(index, queries, [None] * len(queries))
                rounds[f"{blocks} blocks, one version"] += timed(index, queries, scoped)
        results["search"] = {name: summary(seconds) for name, seconds in rounds.items()}
        print(f"  search, {len(queries)} queries x 3: {json.dumps(results['search'], indent=1)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = HERE / "results" / f"{date.today().isoformat()}-index-rebuild-{options.scale}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")



if __name__ == "__main__":
    main()
