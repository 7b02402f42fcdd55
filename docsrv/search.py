"""Full-text search of documentation pages with tantivy: schema, build, query, highlight.

Where the index lives and when it is rebuilt is ``serving.py``'s business. Only public pages are
indexed, so no query can reach a private one. Page text is not stored in tantivy: the index build writes it, escaped,
with where every word of a page is, to ``index/highlight/`` (see ``highlight.py``).

Each page is one document (kind ``page``), each section one more (kind ``section``) for the
v1 anchor search, which matches a substring of the heading or anchor id.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import tantivy

from .highlight import Highlights, HighlightWriter, Words, query_words
from .snapshot.records import Page
from .store import Store
from .utils.progress import progress_bar, wanted

#: Changes whenever what the index holds changes: an index of another schema is rebuilt.
SCHEMA_VERSION = 2
#: Weights of DECISIONS.md section 3: a word in the title counts ten times one in the body.
BOOSTS = {"title": 10.0, "headings": 5.0, "body": 1.0}
MAX_HITS = 50
#: How many section matches the anchor search ranks before it keeps the best 50.
ANCHOR_CANDIDATES = 2000
#: Characters the query language gives a meaning to; a person's query has them read as spaces.
_SYNTAX = re.compile(r"[:+\-!(){}\[\]^~*\\/'<>=&|]")
_WORD = re.compile(r"\w+", re.UNICODE)
#: What tantivy's default tokenizer makes of a word: runs of letters and digits (so
#: "snake_case" is two tokens), lower-cased, and none of MAX_TOKEN_BYTES bytes or more.
_ALNUM = re.compile(r"[^\W_]+")
MAX_TOKEN_BYTES = 40
_REGEX_META = set(r"\.+*?()|[]{}^$#&-~")


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("kind", tokenizer_name="raw")
    builder.add_text_field("scope", tokenizer_name="raw")
    builder.add_integer_field("page", stored=True, indexed=True, fast=True)
    builder.add_integer_field("slot", fast=True)
    builder.add_text_field("title")
    builder.add_text_field("headings")
    builder.add_text_field("body")
    builder.add_text_field("anchor", stored=True, tokenizer_name="raw")
    builder.add_text_field("heading_lower", tokenizer_name="raw")
    builder.add_text_field("anchor_lower", tokenizer_name="raw")
    return builder.build()


def build_index(store: Store, directory: Path, print_progress: bool | None = None) -> float:
    """Index every public page of ``store`` into ``directory``, new or empty; return the seconds
    taken. (``serving.build_index_aside`` builds beside the index in use and swaps.)"""
    started = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(build_schema(), path=str(directory))
    writer = index.writer(heap_size=256 << 20, num_threads=2)
    if print_progress is None:
        print_progress = wanted()
    with progress_bar(len(store.pages), "index pages", print_progress, unit="page") as bar, HighlightWriter(
        directory / "highlight"
    ) as highlights:
        for page in store.pages_ordered:
            if not isinstance(page, Page):
                raise TypeError("the index is built from a store loaded with the pages' text")
            writer.add_document(
                tantivy.Document(
                    kind="page",
                    scope=version_scope(store.projects[page.project].slug, store.versions[page.version].slug),
                    page=page.id,
                    slot=highlights.add(page.id, page.text),
                    title=page.title,
                    headings=" ".join(section.title for section in page.sections),
                    body=page.text,
                )
            )
            for section in page.sections:
                writer.add_document(
                    tantivy.Document(
                        kind="section",
                        page=page.id,
                        anchor=section.id,
                        heading_lower=section.title.lower(),
                        anchor_lower=section.id.lower(),
                    )
                )
            if bar is not None:
                bar.update(1)
    writer.commit()
    writer.wait_merging_threads()
    return time.perf_counter() - started


def version_scope(project: str, version: str) -> str:
    """The one term a page is filtered by: its project and version (a project slug holds no "/")."""
    return f"{project}/{version}"


class Hit(NamedTuple):
    """One page found (a named tuple: a search makes up to a hundred of them)."""

    page_id: int
    #: The page's place in the highlight files.
    slot: int
    score: float


@dataclass(frozen=True, slots=True)
class Found:
    hits: list[Hit]
    total: int
    #: The query's words (a phrase's words too), for highlighting.
    words: Words


def read_query(text: str) -> tuple[list[str], list[list[str]]]:
    """The words and "quoted phrases" of what a person typed, without query syntax.

    An unbalanced quote is dropped; every other character the query language would read as
    syntax is read as a space, so no input is an error.
    """
    parts = text.split('"')
    if len(parts) % 2 == 0:  # an odd number of quotes: the last one opens nothing
        parts[-2:] = [parts[-2] + " " + parts[-1]]
    words: list[str] = []
    phrases: list[list[str]] = []
    for index, part in enumerate(parts):
        tokens = [t.lower() for t in _WORD.findall(_SYNTAX.sub(" ", part))]
        if index % 2 == 1 and len(tokens) > 1:
            phrases.append(tokens)
        else:
            words.extend(tokens)
    return words, phrases


def index_tokens(text: str) -> list[str]:
    """The tokens tantivy indexed for ``text`` (already lower-case)."""
    return [token for token in _ALNUM.findall(text) if len(token.encode()) < MAX_TOKEN_BYTES]


class SearchIndex:
    """Queries over one snapshot's index. Every method is safe to call from worker threads."""

    @classmethod
    def open(cls, store: Store, directory: Path) -> SearchIndex:
        """The index built in ``directory`` over ``store``: every file opened now (a server opens it
        before it forks, so its workers never open a file of the snapshot again)."""
        return cls(store, tantivy.Index.open(str(directory)), Highlights(directory / "highlight"))

    def __init__(self, store: Store, index: tantivy.Index, highlights: Highlights) -> None:
        self.store = store
        self.index = index
        self.schema = index.schema
        self.searcher = index.searcher()
        self.highlights = highlights
        self.pages_only = self._filter("kind", "page")

    def _term(self, field: str, value: str) -> tantivy.Query:
        return tantivy.Query.term_query(self.schema, field, value)

    def _filter(self, field: str, value: str) -> tuple[tantivy.Occur, tantivy.Query]:
        """A clause that narrows a search and adds nothing to its scores: ``_score`` is relevance alone."""
        return tantivy.Occur.Must, tantivy.Query.const_score_query(self._term(field, value), 0.0)

    def _filter_any(self, field: str, values: list[str]) -> tuple[tantivy.Occur, tantivy.Query]:
        """Like ``_filter``, for any of several values."""
        if len(values) == 1:
            return self._filter(field, values[0])
        either = tantivy.Query.boolean_query([(tantivy.Occur.Should, self._term(field, value)) for value in values])
        return tantivy.Occur.Must, tantivy.Query.const_score_query(either, 0.0)

    def _in_fields(self, tokens: list[str], scope: tuple | None = None) -> list[tuple[tantivy.Occur, tantivy.Query]]:
        """One word (a phrase when it makes several tokens) or phrase in each field, by field weight,
        as clauses of a union; with ``scope`` (a filter clause), each narrowed by it.

        Queries are built here, not parsed: tantivy's query parser lets go of the GIL, and a
        search thread that lets go of it waits to get it back from the event loop.
        """
        schema = self.schema
        one = len(tokens) == 1
        clauses = []
        for field, boost in BOOSTS.items():
            matched = tantivy.Query.term_query(schema, field, tokens[0]) if one else tantivy.Query.phrase_query(schema, field, list(tokens))
            query = tantivy.Query.boost_query(matched, boost)
            if scope is not None:
                query = tantivy.Query.boolean_query([(tantivy.Occur.Must, query), scope])
            clauses.append((tantivy.Occur.Should, query))
        return clauses

    def search_pages(self, q: str, *, scopes: list[str] | None = None) -> Found:
        """Pages matching any word of ``q``; pages holding every word and phrase rank first.

        With ``scopes`` (``version_scope`` terms: a project's version, and those of its
        subprojects), only those versions' pages, narrowed by terms that score nothing.
        """
        words, phrases = read_query(q)
        words = list(dict.fromkeys(words))
        if not words and not phrases:
            return Found([], 0, query_words(()))
        scope = self._filter_any("scope", scopes) if scopes else self.pages_only
        searcher = self.searcher
        parts = [tokens for tokens in map(index_tokens, words + [" ".join(p) for p in phrases]) if tokens]
        # The filter goes inside each word of "some": tantivy runs a union of long posting lists
        # through every document before it meets the filter (the medium snapshot: 2.5 ms
        # against 1.0 ms). "Every" is led by the filter as it is.
        # One union of every word in every field: each union tantivy runs costs 16 KB of buffers.
        some = tantivy.Query.boolean_query([clause for tokens in parts for clause in self._in_fields(tokens, scope)])
        results = []
        if len(parts) > 1:  # with one word or phrase, "every" and "some" are the same search
            every = tantivy.Query.boolean_query(
                [*((tantivy.Occur.Must, tantivy.Query.boolean_query(self._in_fields(tokens))) for tokens in parts), scope]
            )
            results.append(searcher.search(every, MAX_HITS, count=False).hits)
        rest = searcher.search(some, MAX_HITS, count=True)
        results.append(rest.hits)
        page_ids = self.highlights.page_ids
        hits: list[Hit] = []
        seen: set[int] = set()
        for found in results:
            slots = searcher.fast_field_values("slot", [address for _score, address in found])
            # Equal scores come back in no set order across index segments: the page id decides.
            pairs = zip(found, slots, strict=True)
            ranked = sorted((-score, page_ids[int(slot or 0)], int(slot or 0)) for (score, _address), slot in pairs)
            for negated, page_id, slot in ranked:
                if page_id not in seen and len(hits) < MAX_HITS:
                    seen.add(page_id)
                    hits.append(Hit(page_id, slot, -negated))
        counted: int = rest.count or 0  # type: ignore[attr-defined]  # tantivy-py's stub lacks it
        return Found(hits, max(counted, len(hits)), query_words(words + [word for phrase in phrases for word in phrase]))

    def search_anchors(self, q: str) -> list[tuple[int, str]]:
        """(page id, anchor id) of sections whose heading or anchor id contains ``q``, best first."""
        needle = q.strip().lower()
        if not needle:
            return []
        pattern = ".*" + "".join("\\" + c if c in _REGEX_META else c for c in needle) + ".*"
        query = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, self._term("kind", "section")),
                (
                    tantivy.Occur.Must,
                    tantivy.Query.boolean_query(
                        [
                            (tantivy.Occur.Should, tantivy.Query.regex_query(self.schema, "heading_lower", pattern)),
                            (tantivy.Occur.Should, tantivy.Query.regex_query(self.schema, "anchor_lower", pattern)),
                        ]
                    ),
                ),
            ]
        )
        searcher = self.searcher
        found = []
        for _score, address in searcher.search(query, ANCHOR_CANDIDATES, count=False).hits:
            doc = searcher.doc(address)  # the anchor is a stored text field: a fast field holds numbers only
            page_id = doc["page"][0]
            anchor = doc["anchor"][0]
            page = self.store.pages[page_id]
            heading = next((s.title for s in page.sections if s.id == anchor), anchor)
            found.append((anchor_rank(needle, heading.lower(), anchor.lower()), page_id, anchor))
        found.sort()
        return [(page_id, anchor) for _rank, page_id, anchor in found[:MAX_HITS]]


def anchor_rank(needle: str, heading: str, anchor: str) -> tuple:
    """Exact heading or anchor first, then prefixes, then any match; shorter headings first."""
    exact = needle in (heading, anchor)
    prefix = heading.startswith(needle) or anchor.startswith(needle)
    return (not exact, not prefix, len(heading), heading)
