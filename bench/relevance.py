"""How often search puts the right page first, on real Sphinx documentation, against SQLite FTS5.

    python bench/relevance.py [--corpus django|sphinx|sqlalchemy|python|flask|behave|celery|doit|all] [--show-misses] [--out FILE]

Each corpus is a Sphinx build that Debian ships (installed when missing) imported into a snapshot
of its own, and a set of judged queries in ``bench/judged/<corpus>.tsv``: queries written the
way people search (how-to titles, API names, settings, glossary terms, error names, two- or
three-word tasks), each with the page that should come first. For docsrv (the search index a
server opens, queried in process: the ranking is the one ``/api/v2/docsearch/`` answers with)
and for SQLite FTS5 over the same pages (title, headings and body weighted 10/5/1 by ``bm25``,
the query escaped as Datasette escapes it), it prints the share of queries whose page comes
first (top-1), comes in the first three (top-3), and the mean reciprocal rank of the first right
page within ten (MRR@10); and, of docsrv, the size of the corpus's index and the p50 and p99 of
the time a search of its version takes (its judged queries, in process); and the best top-1 and
top-3 a ranking that follows DECISIONS.md section 3 could reach on the set (``every_word_ceiling``):
pages holding every word of a query rank above those holding some.

The Django, Sphinx, SQLAlchemy and Python sets are tuning sets (issue 34 made the Python set one);
so are Flask (a library) and behave (a tool), written for issue 62 where docsrv had not yet been
run, most of their queries tasks as people type them. The Celery and doit documentation
(``--corpus celery``, ``--corpus doit``) are the held-out checks: their judged sets were written
and judged before docsrv was first run on those builds, and ranking is not tuned on them; they are
measured before a change to ranking and once at its end. Each set's misses (the queries whose
page docsrv does not put first) are listed in the JSON, and those of the tuning sets printed with
``--show-misses`` (a held-out set's are not: reading them is the first step to tuning on them).
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsrv.search import code_syntax, sections
from docsrv.search.build import build_index
from docsrv.search.index_files import version_scope
from docsrv.search.query import Scope, SearchIndex, index_tokens, needed_parts, read_query
from docsrv.store.loaded import Store, load_store
from search import PYTHON_DOCS, sphinx_snapshot

HERE = Path(__file__).resolve().parent

#: corpus: (snapshot name, HTML of the build, Debian package, project slug, version slug)
CORPORA = {
    "django": ("django-docs", Path("/usr/share/doc/python-django-doc/html"), "python-django-doc", "django", "3.2"),
    "sphinx": ("sphinx-docs", Path("/usr/share/doc/sphinx-doc/html"), "sphinx-doc", "sphinx", "5.3"),
    "sqlalchemy": ("sqlalchemy-docs", Path("/usr/share/doc/python-sqlalchemy-doc/html"), "python-sqlalchemy-doc", "sqlalchemy", "1.4"),
    "python": ("python-docs", PYTHON_DOCS, "python3.11-doc", "python", "3.11"),
    "celery": ("celery-docs", Path("/usr/share/doc/python-celery-doc/html"), "python-celery-doc", "celery", "5.2"),
    "flask": ("flask-docs", Path("/usr/share/doc/python-flask-doc/html"), "python-flask-doc", "flask", "2.2"),
    "behave": ("behave-docs", Path("/usr/share/doc/python-behave-doc/html"), "python-behave-doc", "behave", "1.2.6"),
    "doit": ("doit-docs", Path("/usr/share/doc/python-doit-doc/html"), "python-doit-doc", "doit", "0.31"),
}
#: The sets ranking is never tuned on.
HELD_OUT = frozenset({"celery", "doit"})
DEPTH = 10
#: Each judged query is searched this many times for its latency (in process, one thread: the
#: search's own time, without HTTP), before the search whose ranking counts.
LATENCY_ROUNDS = 5
#: Datasette's escaping of a full-text query: each bare word quoted, quoted phrases kept.
_FTS_BITS = re.compile(r'\s+|(".*?")')


@dataclass(frozen=True)
class Judged:
    query: str
    #: The pages that are right first (usually one).
    pages: frozenset[str]
    kind: str


def judged(corpus: str) -> list[Judged]:
    found = []
    for number, line in enumerate((HERE / "judged" / f"{corpus}.tsv").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        query, pages, kind = line.split("\t")
        found.append(Judged(query, frozenset(pages.split("|")), kind))
        assert query.strip(), f"judged/{corpus}.tsv:{number}: an empty query"
    return found


def escape_fts(query: str) -> str:
    if query.count('"') % 2:
        query += '"'
    bits = [bit for bit in _FTS_BITS.split(query) if bit and bit != '""']
    return " ".join(bit if bit.startswith('"') else '"{}"'.format(bit.replace('"', "")) for bit in bits)


class Fts5:
    """The pages in an SQLite FTS5 table, searched as Datasette searches one."""

    def __init__(self, store: Store) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE pages USING fts5(title, headings, body, path UNINDEXED)")
        self.db.executemany(
            "INSERT INTO pages VALUES (?, ?, ?, ?)",
            [(page.title, " ".join(s.title for s in page.sections), page.text, page.path) for page in store.pages_ordered],  # type: ignore[attr-defined]
        )

    def ranked(self, query: str) -> list[str]:
        sql = "SELECT path FROM pages WHERE pages MATCH ? ORDER BY bm25(pages, 10.0, 5.0, 1.0) LIMIT ?"
        try:
            return [path for (path,) in self.db.execute(sql, (escape_fts(query), DEPTH))]
        except sqlite3.OperationalError:
            return []


def scores(ranks: list[int | None]) -> dict[str, float]:
    """Top-1, top-3 (shares, in %) and MRR@10 of the ranks (1-based; None: not in the first ten)."""
    n = len(ranks)
    return {
        "top1": round(100 * sum(rank == 1 for rank in ranks) / n, 1),
        "top3": round(100 * sum(rank is not None and rank <= 3 for rank in ranks) / n, 1),
        "mrr10": round(sum(1 / rank for rank in ranks if rank is not None) / n, 3),
    }


def rank_of(ranked: list[str], right: frozenset[str]) -> int | None:
    return next((place for place, path in enumerate(ranked[:DEPTH], 1) if path in right), None)


def every_word_ceiling(store: Store, index: SearchIndex, queries: list[Judged], scopes: list[Scope]) -> dict[str, float]:
    """The best top-1 and top-3 (in %) DECISIONS.md section 3 leaves a judged set: pages holding
    every word of a query (in some form) rank above pages holding some, so a query whose right
    pages do not hold one of its words comes first only if no other page holds them all, and in
    the first three only if at most two do; unless the query names a right page (named entries
    rank first). Queries with code syntax are left as if they could come first."""
    held = {page.path: set(sections.stems([page.title, *(s.title for s in page.sections), page.text, page.document_name]))
            for page in store.pages_ordered}
    terms = [scope.term for scope in scopes]
    not_first = not_top3 = 0
    for judged_query in queries:
        words, phrases = read_query(judged_query.query)
        parts = [tokens for tokens in map(index_tokens, list(dict.fromkeys(words)) + [" ".join(p) for p in phrases]) if tokens]
        if len(parts) < 2 or code_syntax.tokens(judged_query.query, index.is_operator):
            continue
        needed = [stem for at in needed_parts(parts) for stem in sections.stems(parts[at])]
        every = {path for path, stems in held.items() if stems.issuperset(needed)}
        if not every or every & judged_query.pages:
            continue
        named = {store.pages[page_id].path for page_id in index.named.pages_named(judged_query.query, terms)}
        if named & judged_query.pages:
            continue
        not_first += 1
        not_top3 += len(every) >= 3
    n = len(queries)
    return {"top1": round(100 * (n - not_first) / n, 1), "top3": round(100 * (n - not_top3) / n, 1)}


def measure(corpus: str, show_misses: bool) -> dict:
    name, html, package, project, version = CORPORA[corpus]
    snapshot = sphinx_snapshot(name, html, package, project, version)
    store = load_store(snapshot, progress=False)
    queries = judged(corpus)
    paths = {page.path for page in store.pages_ordered}
    unknown = sorted(page for judged_query in queries for page in judged_query.pages if page not in paths)
    if unknown:
        raise SystemExit(f"judged/{corpus}.tsv names pages the build does not have: {', '.join(unknown)}")
    with tempfile.TemporaryDirectory() as directory:
        build_index(store, Path(directory), print_progress=False)
        index = SearchIndex.open(store, Path(directory))
        fts = Fts5(store)
        searched = store.version_of(store.project_by_slug[project].id, version)
        assert searched is not None
        scopes = [Scope(version_scope(project, version), searched.id)]
        index_bytes = sum(path.stat().st_size for path in Path(directory).rglob("*") if path.is_file())
        ranks: dict[str, list[int | None]] = {"docsrv": [], "fts5": []}
        misses = []
        took = []
        for _round in range(LATENCY_ROUNDS):
            for judged_query in queries:
                started = time.perf_counter()
                index.search_pages(judged_query.query, scopes=scopes)
                took.append(time.perf_counter() - started)
        for judged_query in queries:
            found = index.search_pages(judged_query.query, scopes=scopes)
            ours = [store.pages[hit.page_id].path for hit in found.hits]
            theirs = fts.ranked(judged_query.query)
            ranks["docsrv"].append(rank_of(ours, judged_query.pages))
            ranks["fts5"].append(rank_of(theirs, judged_query.pages))
            if ranks["docsrv"][-1] != 1:
                misses.append({"query": judged_query.query, "kind": judged_query.kind, "rank": ranks["docsrv"][-1],
                               "first": ours[:3], "want": sorted(judged_query.pages)})
            if show_misses and ranks["docsrv"][-1] != 1 and corpus not in HELD_OUT:  # a held-out set's misses stay unread
                print(f"  {corpus}: {judged_query.query!r} ({judged_query.kind}) at {ranks['docsrv'][-1]}; "
                      f"first {ours[:3]}; want {sorted(judged_query.pages)}", file=sys.stderr)
        ceiling = every_word_ceiling(store, index, queries, scopes)
    took.sort()
    return {"queries": len(queries), "held_out": corpus in HELD_OUT, **{system: scores(r) for system, r in ranks.items()},
            "every_word_ceiling": ceiling, "pages": len(store.pages), "index_mb": round(index_bytes / 1e6, 2),
            "search_ms": {"p50": round(1000 * took[len(took) // 2], 3), "p99": round(1000 * took[int(len(took) * 0.99)], 3)},
            "misses": misses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=[*CORPORA, "all"], default="all",
                        help="all: the judged sets ranking may be tuned on, then the held-out ones (Celery, doit)")
    parser.add_argument("--show-misses", action="store_true", help="name each query docsrv does not put first")
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    corpora = list(CORPORA) if args.corpus == "all" else [args.corpus]
    results = {corpus: measure(corpus, args.show_misses) for corpus in corpora}
    for corpus, result in results.items():
        role = "held out" if result["held_out"] else "tuning "
        print(f"{corpus:10} {role} {result['queries']:3} queries   " + "   ".join(
            f"{system}: top-1 {result[system]['top1']:5.1f} %  top-3 {result[system]['top3']:5.1f} %  MRR@10 {result[system]['mrr10']:.3f}"
            for system in ("docsrv", "fts5"))
            + f"   index {result['index_mb']:.1f} MB ({result['pages']} pages), search p50 {result['search_ms']['p50']:.2f} ms"
            f" p99 {result['search_ms']['p99']:.2f} ms; the every-word rule allows at most top-1"
            f" {result['every_word_ceiling']['top1']:.1f} % top-3 {result['every_word_ceiling']['top3']:.1f} %")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
