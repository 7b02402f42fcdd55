"""Full-text search of documentation pages with tantivy: the query, its ranking and its highlight.

Where the index lives and when it is made current is ``location.py``'s business; how it is built,
in shards, ``build.py``'s and ``rebuild.py``'s; its files, and how a server opens them without
writing, ``index_files.py``'s. Only public pages are indexed, so no query can reach a private
one. Page text is not stored in tantivy: the index build writes it, escaped, with where every
word of a page is, to each shard's ``highlight/`` (``highlight.py``).

Each page is one document: its title, headings, text and document name (where it sits in the
documentation: ``BOOSTS``). What pages name (titles, sections, objects, glossary terms, index
entries) is in an index of its own, ``entries/`` (``search/named_entries.py``): a query equal to a
name ranks the pages that define it first; then pages holding every word, then the rest.
Among those, a page with a heading that holds every word of the query weighs more, the more so
the fewer other words the heading has (``HEADING_BOOST``); so does a page whose text holds the
query's words close together, in any of their common forms (a passage: ``PASSAGE_BOOST``),
and its fragments start there; a changelog (``search/changelogs.py``) comes after the pages that are
not, unless the query asks what changed. Code syntax in a query (``__init__``, ``@property``,
``**kwargs``, the operators the documentation names: ``search/code_syntax.py``) is also looked up as it
is written, in the syntax each page's text holds (the ``symbols`` field), where the words alone
would match any page.

Passages are found in the highlight files (``Highlights.passage``), in the pages a search ranks.
Of the ways to find them measured on the tuning sets (issue 34), a window of PASSAGE_BYTES
holding the words, in proportion to how many it holds, is what moved them; a wider window, a
larger boost, more candidates, and leaving stop words out of the page score moved none or cost
some.

Each section of a page is also scored, in an index of its own (``search/sections.py``): a page
ranks by its own score (all of the above) and its best section's together (``rank_score``), and
a hit without a passage has its fragments start at that section. A page holds "every" word of a
query when it holds every word but the stop words (issue 62: a long page holds "how", "do" and
"I" too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import tantivy

from ..store.loaded import Store
from . import code_syntax, named_entries, sections
from .changelogs import asks_for_changes
from .code_syntax import MAX_TOKEN_BYTES
from .highlight import Highlights, ShardedHighlights, Words, query_words
from .index_files import (
    HIGHLIGHT,
    LISTING,
    Listed,
    ListedShard,
    ReadListing,
    answering,
    checked_listing,
    open_index,
    read_listing,
    shard_path,
)
from .named_entries import STOP_WORDS, Scored, filter_clause
from .shards import Layout

#: Weights of DECISIONS.md section 3: a word in the title counts ten times one in the body. The
#: page's Sphinx document name (``tutorial/classes``) says where it sits in the documentation: its
#: words count for holding every word of a query ("classes tutorial"), and little for rank. On
#: the tuning sets 0.3 to 0.5 ranked alike; 0.1 lost a query of the Python set, 1 and more one of
#: Sphinx's ("glossary directive" then found the glossary).
BOOSTS = {"title": 10.0, "headings": 5.0, "body": 1.0, "path": 0.4}
MAX_HITS = 50
#: Passages: a page whose text holds the query's words (two or more, but stop words) within
#: PASSAGE_BYTES of each other weighs 1 + PASSAGE_BOOST times more (in proportion for some of
#: them); a page-level score does not see words standing together.
PASSAGE_BYTES = 40
PASSAGE_BOOST = 2.0
#: The pages of each ranking (those holding every word, then the rest) looked at for a passage,
#: best first: a passage lifts a page a few places, not from the bottom of fifty. On the tuning
#: sets more ranked alike, and each page looked at costs time.
PASSAGE_PAGES = 5
#: The words a page need not hold to hold every word of a query: ours (``STOP_WORDS``) and
#: Lucene's English stop words.
OPTIONAL_WORDS = STOP_WORDS | frozenset("but no not such that their then there these they was will".split())
#: What a page without a passage has.
NO_PASSAGE = (0, -1)
#: What a page none of whose sections a search found has.
NO_SECTION = (0.0, -1)
#: Suffixes a query word may have that ``word_forms`` takes off, and what replaces them.
_INFLECTIONS = (("ies", ("y",)), ("es", ("", "e")), ("s", ("",)), ("ing", ("", "e")), ("ed", ("", "e")))
#: A page's score is multiplied by 1 + HEADING_BOOST x the share of a heading's words the query's
#: are, when the heading holds them all (``NamedEntries.pages_with_heading``).
HEADING_BOOST = 3.0
#: Characters the query language gives a meaning to; a person's query has them read as spaces.
_SYNTAX = re.compile(r"[:+\-!(){}\[\]^~*\\/'<>=&|]")
_WORD = re.compile(r"\w+", re.UNICODE)
#: What tantivy's default tokenizer makes of a word: runs of letters and digits (so
#: "snake_case" is two tokens), lower-cased, and none of MAX_TOKEN_BYTES bytes or more.
_ALNUM = re.compile(r"[^\W_]+")


#: A tantivy index a new index keeps of an earlier one's, or None (``SearchIndex.kept``).
Opened = tantivy.Index | None


class Scope(NamedTuple):
    """A version a search is of: its ``version_scope`` term, which its pages are filtered by, and
    its id, which says the shard that holds them (``search.shards.Layout``)."""

    term: str
    version: int


class Hit(NamedTuple):
    """One page found (a named tuple: a search makes up to a hundred of them)."""

    page_id: int
    #: The page's place in the highlight files.
    slot: int
    score: float
    #: Where its best passage starts (bytes into its text), -1 for none: its fragments start there.
    passage: int = -1


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


def word_forms(word: str) -> tuple[str, ...]:
    """``word`` and the English inflections a passage counts as it ("line": "lines"; "read":
    "reads", "reading"; "dictionary": "dictionaries"). A few suffixes, not a stemmer: the words
    are looked up by their exact spelling in the highlight files."""
    bases = {word}
    for suffix, replacements in _INFLECTIONS:
        if word.endswith(suffix) and len(word) > len(suffix) + 2 and not word.endswith("ss"):
            bases.update(word[: -len(suffix)] + replacement for replacement in replacements)
    forms = dict.fromkeys([word])
    for base in sorted(bases):
        forms.update(dict.fromkeys((base, base + "s", base + "ed", base + "ing")))
        if base.endswith("e"):
            forms.update(dict.fromkeys((base + "d", base[:-1] + "ing")))
        elif base.endswith("y"):
            forms[base[:-1] + "ies"] = None
        elif base.endswith(("s", "x", "ch", "sh")):
            forms[base + "es"] = None
    return tuple(forms)


def needed_parts(parts: list[list[str]]) -> list[int]:
    """Which of a query's words and phrases (their tokens) a page must hold, in some form, to hold
    every word (DECISIONS.md section 3): all but the optional words, unless they are all it has."""
    return [at for at, tokens in enumerate(parts) if len(tokens) > 1 or tokens[0] not in OPTIONAL_WORDS] or list(range(len(parts)))


def rank_score(page: float, section: float, best_page: float) -> float:
    """A page's score from its own ``page`` score and its best section's (as a share of the best
    section's in the search: ``search/sections.py``): its own as a share of the ``best_page`` of
    its ranking, and the section's, weighed together, in the scale of the page scores (the
    best page's of a ranking)."""
    return ((1 - sections.SECTION_WEIGHT) * page / best_page + sections.SECTION_WEIGHT * section) * best_page


def index_tokens(text: str) -> list[str]:
    """The tokens tantivy indexed for ``text`` (already lower-case)."""
    return [token for token in _ALNUM.findall(text) if len(token.encode()) < MAX_TOKEN_BYTES]


class SearchIndex:
    """Queries over one snapshot's index. Every method is safe to call from worker threads.

    Each shard is a tantivy index of its own, scored by its own statistics (how many pages, how
    many tokens a field holds, how many pages hold a word: BM25's), as a search engine's shards
    are: a search of some versions goes to the shards that hold them (``search.shards.Layout``),
    and a search of every page (v1's) to every shard, their hits merged by score. A search of one
    version visits its own shard's segments, not every shard's; and a change of pages costs a
    worker opening their shard alone.
    """

    @classmethod
    def open(cls, store: Store, directory: Path, earlier: SearchIndex | None = None, leftovers: list[Path] | None = None, *,
             check: bool = False) -> SearchIndex:
        """The index built in ``directory`` over ``store``: every file opened now (a server opens it
        before it forks, so its workers never open a file of the snapshot again), as its listing
        says (``Listing``). A shard that ``earlier`` (the index served before a changeset) holds
        alike is kept open, not opened again: its pages' and entries' indexes when they are the same
        files, its highlight files when it is made of the same; the links the others were opened
        through are left in ``leftovers``, when given (``open_index``). With ``check``, as a
        server's start opens a snapshot's index: checked as it is opened, as ``index_problem``
        checks one (ValueError or OSError), not opened twice."""
        read = checked_listing(directory) if check else read_listing(directory, earlier.read if earlier else None)
        if read is None:
            raise ValueError(f"{directory}/{LISTING}: missing, or not a listing of the index")
        listing = read.listing

        def opening(part: Listed) -> tantivy.Index:
            opened = open_index(directory, part, leftovers)
            return answering(opened) if check else opened

        pages, entries, sectioned, highlights = {}, {}, {}, {}
        for key, shard in sorted(listing.shards.items()):
            kept_pages, kept_entries, kept_sections, kept_files = earlier.kept(key, shard) if earlier is not None else (None,) * 4
            pages[key] = kept_pages if kept_pages is not None else opening(shard.pages)
            entries[key] = kept_entries if kept_entries is not None else opening(shard.entries)
            sectioned[key] = kept_sections if kept_sections is not None else opening(shard.sections)
            highlights[key] = kept_files if kept_files is not None else Highlights(shard_path(directory, key) / HIGHLIGHT)
        sharded = ShardedHighlights(highlights)
        return cls(store, read, pages, named_entries.NamedEntries(entries, sharded.page_id), sectioned, sharded)

    def __init__(self, store: Store, read: ReadListing, pages: dict[int, tantivy.Index], named: named_entries.NamedEntries,
                 sectioned: dict[int, tantivy.Index], highlights: ShardedHighlights) -> None:
        #: The listing it was opened by, with its shards' parts as written (``read_listing``).
        self.read = read
        listing = read.listing
        #: Each shard's pages index and its searcher, by key.
        self.pages = pages
        self.searchers = {key: index.searcher() for key, index in pages.items()}
        self.schema = pages[min(pages)].schema
        #: Each shard's sections index (``search/sections.py``) and its searcher, by key.
        self.sectioned = sectioned
        self.section_searchers = {key: index.searcher() for key, index in sectioned.items()}
        self.sections_schema = sectioned[min(sectioned)].schema
        self.layout = Layout(listing.width, store.versions_with_pages)
        self.named = named
        self.highlights = highlights

    def kept(self, key: int, shard: ListedShard) -> tuple[Opened, Opened, Opened, Highlights | None]:
        """What an index listing ``shard`` as its shard ``key`` keeps of this one's: its pages',
        entries' and sections' indexes, if they are the same files, and its highlight files, if it
        is made of the same (None for each it opens)."""
        was = self.read.listing.shards.get(key)
        if was is None:
            return None, None, None, None
        return (self.pages[key] if was.pages == shard.pages else None, self.named.indexes[key] if was.entries == shard.entries else None,
                self.sectioned[key] if was.sections == shard.sections else None,
                self.highlights.shards[key] if was.digest == shard.digest else None)

    def shards_of(self, scopes: list[Scope] | None) -> list[int]:
        """The keys of the shards that hold the pages of ``scopes`` (None: every shard), in order."""
        if scopes is None:
            return list(self.searchers)
        return sorted({key for scope in scopes if (key := self.layout.shard_of(scope.version)) in self.searchers})

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

    def is_operator(self, key: str) -> bool:
        """Whether ``key`` is an operator of this build (``search/code_syntax.py``): a name it holds."""
        return code_syntax.is_operator(key) and self.named.holds_name(key)

    def _passage_words(self, words: list[str], shards: list[int]) -> list[Words]:
        """Each of ``words`` in the forms some page of ``shards`` holds in its text (``word_forms``;
        the word itself always): a form no page holds costs a lookup in every page looked at, and
        finds nothing."""
        searchers = [self.searchers[key] for key in shards]
        return [query_words([form for form in word_forms(word) if form == word or any(s.doc_freq("body", form) for s in searchers)])
                for word in words]

    def _top(self, shards: list[int], query: tantivy.Query, count: bool) -> tuple[list[Scored], int]:
        """The MAX_HITS best (score, shard key, address) of ``query`` in ``shards``, best first, and
        with ``count`` how many pages match (``search.named_entries.best``)."""
        found, total = named_entries.best([self.searchers[key] for key in shards], query, MAX_HITS, count)
        return [(score, shards[at], address) for score, at, address in found], total

    def _fast_values(self, found: list[Scored], field: str, searchers: dict[int, tantivy.Searcher] | None = None) -> list[int]:
        """The fast field ``field`` of each page ``found`` (``_top``; of each section, with the
        sections' ``searchers``), one call a shard."""
        by_shard: dict[int, list[int]] = {}
        for at, (_score, key, _address) in enumerate(found):
            by_shard.setdefault(key, []).append(at)
        values = [0] * len(found)
        searchers = self.searchers if searchers is None else searchers
        for key, places in by_shard.items():
            for at, value in zip(places, searchers[key].fast_field_values(field, [found[at][2] for at in places]), strict=True):
                values[at] = int(value or 0)
        return values

    def _best_sections(self, stemmed: list[list[str]], written: list[str], shards: list[int],
                       scope: tuple | None) -> dict[int, tuple[float, int]]:
        """Of each page one of the SECTION_HITS best sections for ``stemmed`` (the stems of the
        query's words and phrases) and ``written`` (its code syntax) is of, by slot: the best
        one's score, and where its text starts in the page's highlight text (``search/sections.py``)."""
        stemmed = [stems for stems in stemmed if stems]
        if not stemmed and not written:
            return {}
        searchers = [self.section_searchers[key] for key in shards]
        query = sections.query(self.sections_schema, stemmed, written, scope)
        found, _total = named_entries.best(searchers, query, sections.SECTION_HITS)
        found = [(score, shards[at], address) for score, at, address in found]
        best: dict[int, tuple[float, int]] = {}
        for (score, _key, _address), slot, at in zip(found, self._fast_values(found, "slot", self.section_searchers),
                                                      self._fast_values(found, "at", self.section_searchers), strict=True):
            if slot not in best:  # best first
                best[slot] = (score, at)
        return best

    def _stem(self, stem: str) -> tantivy.Query:
        """Pages that hold a word of this stem, in any form; scoring nothing."""
        return tantivy.Query.const_score_query(tantivy.Query.term_query(self.schema, "stems", stem), 0.0)

    def search_pages(self, q: str, *, scopes: list[Scope] | None = None) -> Found:
        """Pages naming ``q`` (``search/named_entries.py``), best name first; then pages matching any
        word of ``q``, those holding every word and phrase first.

        With ``scopes`` (a project's version, and those of its subprojects), only those versions'
        pages, in their shards, narrowed by their terms, which score nothing.
        """
        words, phrases = read_query(q)
        words = list(dict.fromkeys(words))
        written = code_syntax.tokens(q, self.is_operator)
        if not words and not phrases and not written:
            return Found([], 0, query_words(()))
        shards = self.shards_of(scopes)
        terms = [scope.term for scope in scopes] if scopes else None
        scope = filter_clause(self.schema, "scope", terms) if terms else None
        parts = [tokens for tokens in map(index_tokens, words + [" ".join(p) for p in phrases]) if tokens]
        stemmed = [sections.stems(tokens) for tokens in parts]
        as_written = [code_syntax.symbol_query(self.schema, symbol) for symbol in written]
        # The filter goes inside each word of "some": tantivy runs a union of long posting lists
        # through every document before it meets the filter. "Every" is led by the filter as it is.
        # One union of every word in every field: each union tantivy runs has buffers of its own.
        narrowed = [tantivy.Query.boolean_query([(tantivy.Occur.Must, symbol), scope]) if scope else symbol for symbol in as_written]
        some = tantivy.Query.boolean_query(
            [clause for tokens in parts for clause in self._in_fields(tokens, scope)]
            + [(tantivy.Occur.Should, symbol) for symbol in narrowed]
        )
        results = []
        if len(parts) + len(as_written) > 1:  # with one word or phrase, "every" and "some" are the same search
            # A page holds "every" word but the stop words, unless they are all the query has, in
            # some form ("running" holds "run"): scored as it holds them as written.
            needed = needed_parts(parts)
            every = tantivy.Query.boolean_query(
                [*((tantivy.Occur.Must, self._stem(stem)) for at in needed for stem in stemmed[at]),
                 *((tantivy.Occur.Should, tantivy.Query.boolean_query(self._in_fields(parts[at]))) for at in needed),
                 *((tantivy.Occur.Must, symbol) for symbol in as_written),
                 *([scope] if scope is not None else [])]
            )
            results.append(self._top(shards, every, count=False)[0])
        rest, counted = self._top(shards, some, count=True)
        results.append(rest)
        page_id_of = self.highlights.page_id
        changelogs_last = not asks_for_changes(q)
        headed = self.named.pages_with_heading(words, terms, shards) if len(words) > 1 else {}
        # Each word of the query in the forms the pages hold: a passage's groups, and what is highlighted.
        said_words = list(dict.fromkeys(words + [word for phrase in phrases for word in phrase]))
        said = dict(zip(said_words, self._passage_words(said_words, shards), strict=True))
        content = [word for word in words if word not in STOP_WORDS]
        groups = [said[word] for word in content] if len(content) > 1 else []
        #: Of each page looked at: how many of the words its passage holds, and where it starts.
        passages: dict[int, tuple[int, int]] = {}
        best_sections = self._best_sections(stemmed, written, shards, scope)
        best_section = max((score for score, _at in best_sections.values()), default=0.0)
        starts: dict[int, int] = {}  # where each page's highlight starts
        scored: list[Hit] = []
        seen: set[int] = set()
        for found in results:
            slots = self._fast_values(found, "slot")
            changelogs = self._fast_values(found, "changelog") if changelogs_last else [0] * len(found)
            weighed_pages = []
            for place, ((score, _shard, _address), slot, changelog) in enumerate(zip(found, slots, changelogs, strict=True)):
                page_id = page_id_of(slot)
                weighed = score * (1 + HEADING_BOOST * headed.get(page_id, 0.0))
                if groups and place < PASSAGE_PAGES:
                    passage = passages.get(page_id)
                    if passage is None:
                        passage = passages[page_id] = self.highlights.passage(slot, groups, PASSAGE_BYTES)
                    if passage[0] > 1:
                        weighed *= 1 + PASSAGE_BOOST * (passage[0] - 1) / (len(groups) - 1)
                section_score, section_at = best_sections.get(slot, NO_SECTION)
                passage = passages.get(page_id, NO_PASSAGE)
                starts[page_id] = passage[1] if passage[0] > 1 or section_at <= 0 else section_at
                weighed_pages.append((bool(changelog), weighed, section_score, page_id, slot))
            best_page = max((weighed for _changelog, weighed, _section, _page, _slot in weighed_pages), default=0.0) or 1.0
            # Equal scores come back in no set order across index segments: the page id decides.
            ranked = sorted((changelog, -rank_score(weighed, section / best_section if best_section else 0.0, best_page), page_id, slot)
                            for changelog, weighed, section, page_id, slot in weighed_pages)
            for _changelog, negated, page_id, slot in ranked:
                if page_id not in seen:
                    seen.add(page_id)
                    scored.append(Hit(page_id, slot, -negated, starts[page_id]))
        named = self.named.pages_named(q, terms, shards)
        if named:
            scores = {hit.page_id: hit.score for hit in scored}
            first = sorted(named.items(), key=lambda item: (item[1].rank, item[1].depth, -scores.get(item[0], 0.0), item[0]))
            hits = [Hit(page_id, name.slot, scores.get(page_id, 0.0), starts.get(page_id, -1))
                    for page_id, name in first[:MAX_HITS]]
            hits += [hit for hit in scored if hit.page_id not in named][: MAX_HITS - len(hits)]
        else:
            hits = scored[:MAX_HITS]
        total = max(counted, len(seen | named.keys()))
        # Highlighted: the query's words in each form its pages hold ("export" for "exported"), as
        # a page holds them in some form to hold every word.
        return Found(hits, total, query_words(term for forms in said.values() for term in forms.terms))

    def search_anchors(self, q: str) -> list[tuple[int, str]]:
        """(page id, anchor id) of sections, objects and glossary terms whose heading (or name) or
        anchor id contains ``q``, best first."""
        return self.named.anchors(q)

