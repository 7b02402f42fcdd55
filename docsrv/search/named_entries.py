"""What pages name, for search: a query equal to a name finds the page that defines it first.

A page names its title, the headings of its sections, and the entries its Sphinx build recorded
(``records.Entry``: API objects, glossary terms, section labels, general index entries). They
are kept in an index of their own (``index/entries/``), apart from the pages' index, so that
their documents change nothing of the pages' BM25 statistics (the number of documents, the mean
length of a field). The same index answers the v1 anchor search: sections, objects and
glossary terms are the anchors a person looks up.

A query matches a name when both are equal once lower-cased, spaces collapsed, call
parentheses and surrounding punctuation dropped (``entry_key``); an object's name also matches
by any dotted tail (``QuerySet.filter`` and ``filter`` both find
``django.db.models.query.QuerySet.filter``). Of the pages a query names, a page title comes
first, then a page that defines it (a section headed with the name that another of its names
points to: ``DEFINED_PLACE``), then objects and glossary terms, then sections and labels, then
index entries; within a kind a whole name before a tail, then the inventory's priority.

Objects and glossary terms are also found by their names as people type them (``loose_key``):
dots, underscores, hyphens, spaces and none alike (``render all`` finds ``render_all``,
``shortcuts get object or 404`` finds ``django.shortcuts.get_object_or_404``, ``session maker``
finds ``sessionmaker``), and so a CamelCase name by its words (``render error`` finds
``RenderError``). Such a forgiving match ranks after every exact one.
"""

from __future__ import annotations

import heapq
import itertools
import re
import string
from collections.abc import Callable, Iterator, Sequence
from enum import IntEnum
from typing import NamedTuple

import orjson
import tantivy

from ..snapshot.records import DOCUMENT_ROLE, INDEX_ROLE, LABEL_ROLE, TERM_ROLE, Page
from .changelogs import asks_for_changes

#: How many documents of one name a lookup reads ("get" is the tail of hundreds of methods): the
#: best ranked of them (``NamedEntries``).
LOOKUP_LIMIT = 1000
#: How many anchor matches the anchor search ranks before it keeps the best 50.
ANCHOR_CANDIDATES = 2000
MAX_ANCHORS = 50
#: How much of an anchor query the index is searched for (the rest is checked on what it finds).
ANCHOR_QUERY_CHARS = 32
#: The tokenizer of ``anchor_grams``: an anchor's heading and id, lower-cased, as every run of
#: one to ANCHOR_GRAM characters (``register_tokenizers``). A query of ANCHOR_GRAM characters or
#: more finds the documents holding each of its runs of that many (then held to the query
#: itself); a shorter one is a run itself. A regular expression of the query over the headings
#: and ids themselves read every one of them in every segment, whatever it found.
ANCHOR_GRAMS = "anchor_grams"
ANCHOR_GRAM = 3
#: Longer keys are not names anyone types; tantivy takes terms of at most 65,530 bytes.
MAX_KEY_CHARS = 200
_SPACE = re.compile(r"\s+")
_CALL = re.compile(r"\(\s*\)")
_EDGES = string.punctuation.replace("_", "") + " "
_SEPARATORS = re.compile(r"[._\-\s]+")
#: Added to the rank of a forgiving match: after every exact one (``pack_rank`` stays below it).
LOOSE_RANK = 64
#: Added to the rank of a name on a changelog (``search/changelogs.py``): after every other page's
#: names, forgiving ones too, unless the query asks what changed.
CHANGELOG_RANK = 128
#: Words a heading match does without: "how to ..." matches a heading that says "...".
STOP_WORDS = frozenset(
    "a an and are as at be by can do does for from how i if in into is it its my of on or so the this to "
    "what when where which why with you your".split()
)
#: The words of a heading or query a heading match compares: tantivy's ``en_stem`` (words
#: lower-cased and stemmed, as the ``heading_words`` field indexes them, so "reflecting tables"
#: meets the heading "Reflect Tables"), stop words left out.
_CONTENT_STEMS = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    .filter(tantivy.Filter.remove_long(40))
    .filter(tantivy.Filter.lowercase())
    .filter(tantivy.Filter.custom_stopword(sorted(STOP_WORDS)))
    .filter(tantivy.Filter.stemmer("english"))
    .build()
)


class Kind(IntEnum):
    """What a name is, in the order its page ranks."""

    TITLE = 0
    OBJECT = 1
    #: A glossary term: a line of definition, after the page documenting an object of its name.
    TERM = 2
    SECTION = 3
    INDEX = 4


def kind_of(role: str) -> Kind:
    if role == LABEL_ROLE:
        return Kind.SECTION
    if role == INDEX_ROLE:
        return Kind.INDEX
    if role == DOCUMENT_ROLE:
        return Kind.TITLE
    if role == TERM_ROLE:
        return Kind.TERM
    return Kind.OBJECT  # every domain's objects


def entry_key(text: str) -> str:
    """What a name and a query are compared by: lower case, one space between words, no call
    parentheses, no punctuation at either end ("`QuerySet.filter()`" -> "queryset.filter"),
    unless it is all punctuation: a symbol the general index names ("**", "->", "@")."""
    key = _CALL.sub("", _SPACE.sub(" ", text.lower())).strip()
    return (key.strip(_EDGES) or key)[:MAX_KEY_CHARS]


def loose_key(text: str) -> str:
    """A name or query as a forgiving match reads it: its key without separators, so that dots,
    underscores, hyphens, spaces and none are alike ("session maker" and "sessionmaker",
    "render error" and "RenderError", "stale-widget" and "stale widget")."""
    return _SEPARATORS.sub("", entry_key(text))


def dotted_tails(key: str) -> list[str]:
    """The shorter names an object's dotted name is known by: "a.b.c" -> ["b.c", "c"]."""
    parts = key.split(".")
    return [tail for tail in (".".join(parts[i:]) for i in range(1, len(parts))) if tail]


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("scope", tokenizer_name="raw")
    #: The page's highlight slot, which says its id (``ShardedHighlights.page_id``): no page id
    #: is held here, so that a version's pages uploaded again under new ids, with the same names,
    #: make the same documents, and a shard built again keeps its entries (``search/build.py``).
    builder.add_integer_field("slot", fast=True)
    #: See ``pack_rank``.
    builder.add_integer_field("rank", fast=True)
    #: How many dotted parts an object's whole name has (1 for any other name): see ``Named``.
    builder.add_integer_field("depth", fast=True)
    builder.add_text_field("name", tokenizer_name="raw")
    #: The words of a title, or of a page's title and a section heading, stemmed; and how many
    #: different stems they are (``pages_with_heading``).
    builder.add_text_field("heading_words", tokenizer_name="en_stem")
    builder.add_integer_field("heading_stems", fast=True)
    builder.add_text_field("loose", tokenizer_name="raw")
    builder.add_text_field("anchored", tokenizer_name="raw")
    builder.add_text_field("heading", stored=True, tokenizer_name="raw")
    builder.add_text_field("anchor", stored=True, tokenizer_name="raw")
    builder.add_text_field(ANCHOR_GRAMS, tokenizer_name=ANCHOR_GRAMS, index_option="basic")
    return builder.build()


def register_tokenizers(index: tantivy.Index) -> tantivy.Index:
    """``index`` (an entries index to write) with the tokenizers its schema names."""
    index.register_tokenizer(ANCHOR_GRAMS, tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.ngram(1, ANCHOR_GRAM, False)).build())
    return index


def documents(page: Page, scope: str, slot: int, changelog: bool) -> Iterator[str]:
    """The named entries of one page as documents of the entries index, in JSON (``add_json``):
    one a name, and for an object with a dotted name one more holding its tails (so one lookup
    ranks whole names first). The names of a changelog (``search/changelogs.py``) rank after every other
    page's. A dictionary encoded and read by tantivy at once costs a fifth less than a
    ``tantivy.Document`` filled a field at a time (the entries are most of a shard's build)."""
    after = CHANGELOG_RANK if changelog else 0

    def entry(
        kind: Kind,
        priority: int,
        names: list[str],
        tail: bool = False,
        anchor: str = "",
        heading: str = "",
        loose: Sequence[str] = (),
        words: str = "",
        depth: int = 1,
    ) -> str:
        document: dict[str, object] = {"scope": scope, "slot": slot, "rank": pack_rank(kind, tail, priority) + after, "depth": depth,
                                       "name": list(dict.fromkeys(filter(None, names)))}
        if words:
            document["heading_words"] = words
            document["heading_stems"] = len(content_stems(words))
        if loose:
            document["loose"] = list(dict.fromkeys(loose))
        if anchor and heading:
            document.update(anchored="1", anchor=anchor, heading=heading, anchor_grams=[heading.lower(), anchor.lower()])
        return orjson.dumps(document).decode()

    yield entry(Kind.TITLE, 1, [entry_key(page.title)])
    for section in page.sections:
        words = f"{page.title} {section.title}"
        yield entry(Kind.SECTION, 1, [entry_key(section.title)], anchor=section.id, heading=section.title, words=words)
    for named in page.entries:
        kind = kind_of(named.role)
        if kind is Kind.TITLE:  # the title a document has in the inventory is its page's title
            continue
        key = entry_key(named.name)
        names = [key, entry_key(named.title)]
        if kind is Kind.OBJECT:
            parts = named.name.split(".")
            depth = len(parts)
            yield entry(kind, named.priority, names, anchor=named.anchor, heading=named.name, loose=[loose_key(named.name)], depth=depth)
            tails = [".".join(parts[i:]) for i in range(1, len(parts))]
            if tails and (exact_tails := dotted_tails(key)):
                yield entry(kind, named.priority, exact_tails, tail=True, loose=[loose_key(tail) for tail in tails], depth=depth)
        elif kind is Kind.TERM:
            yield entry(kind, named.priority, names, anchor=named.anchor, heading=named.title or named.name, loose=[loose_key(named.name)])
        else:  # labels are sections (anchored as sections), index entries are no anchors to look up
            yield entry(kind, named.priority, names)


def content_stems(text: str) -> list[str]:
    """The stems of the words of ``text`` but stop words, each once."""
    return list(dict.fromkeys(_CONTENT_STEMS.analyze(text)))


def pack_rank(kind: Kind, tail: bool, priority: int) -> int:
    """(kind, whole name 0 or tail 1, priority 0-2) in one integer that sorts as the tuple does."""
    return kind * 8 + tail * 4 + min(max(priority, 0), 2)


def filter_clause(schema: tantivy.Schema, field: str, values: list[str]) -> tuple[tantivy.Occur, tantivy.Query]:
    """A clause that narrows a search to documents whose ``field`` holds one of ``values``, and
    adds nothing to their scores (``_score`` is relevance alone)."""
    terms = [tantivy.Query.term_query(schema, field, value) for value in values]
    either = terms[0] if len(terms) == 1 else tantivy.Query.boolean_query([(tantivy.Occur.Should, term) for term in terms])
    return tantivy.Occur.Must, tantivy.Query.const_score_query(either, 0.0)


class Named(NamedTuple):
    """A page a query names: the rank of the best name it holds (``pack_rank``: lower first), and
    of names of one rank, how many dotted parts the shortest has; and its highlight slot. A
    member named bare ("bulk_save_objects") that several owners have is first found on the
    shallowest owner's page ("Session", before "scoping.scoped_session" that proxies it)."""

    rank: int
    depth: int
    slot: int


#: The place of a name a query equals, by (kind, tail), lower first: a page's title; an object's
#: whole name or a glossary term; an object's tail; a section or label; a general index entry.
NAME_PLACES = {(Kind.TITLE, 0): 0, (Kind.OBJECT, 0): 4, (Kind.TERM, 0): 4, (Kind.OBJECT, 1): 6, (Kind.SECTION, 0): 8, (Kind.INDEX, 0): 10}
#: A called query ("relationship()") wants a callable: a glossary term comes after every object.
CALLED_PLACES = {**NAME_PLACES, (Kind.TERM, 0): 7}
#: The place of a page that defines what the query names: a section or label headed with it and
#: another name of it besides (an object, a glossary term, an index entry), such as the reference
#: section "__slots__" documenting ``object.__slots__``. It comes before a glossary's line of
#: definition and before an object's page.
DEFINED_PLACE = 2


class Reading(NamedTuple):
    """What a query says of the names it wants."""

    #: Not asking what changed: a changelog's names rank after every other page's.
    changelogs_last: bool
    #: Called ("relationship()"): a callable, not a glossary term of its name.
    called: bool

    def rank(self, stored: int, defined: bool = False) -> int:
        """The rank a name's stored rank (``pack_rank``, + CHANGELOG_RANK) has for this query:
        its place (``NAME_PLACES``, ``CALLED_PLACES``, or ``DEFINED_PLACE`` on a page that
        ``defined`` it), then its priority."""
        changelog, packed = divmod(stored, CHANGELOG_RANK)
        kind, rest = divmod(packed, 8)
        tail, priority = divmod(rest, 4)
        place = (CALLED_PLACES if self.called else NAME_PLACES)[Kind(kind), tail]
        if defined and place > DEFINED_PLACE:
            place, priority = DEFINED_PLACE, 0
        return place * 4 + priority + (changelog * CHANGELOG_RANK if self.changelogs_last else 0)


class NamedEntries:
    """Lookups in one snapshot's entries indexes, one a shard, each searched on its own (as
    ``search.query.SearchIndex`` searches the pages): a lookup in some shards (``shards``, by key, in
    order; None: every shard) finds the best of what each finds, as many as one index of them
    all would (``best``). Safe to call from worker threads."""

    def __init__(self, indexes: dict[int, tantivy.Index], page_id_of: Callable[[int], int]) -> None:
        #: Each shard's entries index and its searcher, by key.
        self.indexes = indexes
        self.searchers = {key: index.searcher() for key, index in indexes.items()}
        self.schema = indexes[min(indexes)].schema
        #: The id of the page in a highlight slot.
        self.page_id_of = page_id_of

    def _term(self, field: str, value: str) -> tantivy.Query:
        return tantivy.Query.term_query(self.schema, field, value)

    def _searchers(self, shards: list[int] | None) -> list[tantivy.Searcher]:
        return list(self.searchers.values()) if shards is None else [self.searchers[key] for key in shards]

    def holds_name(self, key: str) -> bool:
        """Whether some page has a name whose key (``entry_key``) is ``key``: a document found,
        not a term's frequency, which counts deleted documents too."""
        query = self._term("name", key)
        return any(searcher.search(query, 1, count=False).hits for searcher in self.searchers.values())

    def pages_named(self, q: str, scopes: list[str] | None, shards: list[int] | None = None) -> dict[int, Named]:
        """The pages holding a name equal to ``q`` (of the versions ``scopes`` names, if any), each
        with the rank of its best name; then those whose objects or terms ``q`` names forgivingly.
        Changelogs' names come last, unless ``q`` asks what changed; a glossary term ranks as an
        object does, unless ``q`` is called ("relationship()"): then after every object."""
        key = entry_key(q)
        if not key:
            return {}
        reading = Reading(changelogs_last=not asks_for_changes(q), called=_CALL.search(q) is not None)
        scope = filter_clause(self.schema, "scope", scopes) if scopes else None
        searchers = self._searchers(shards)
        named = self._lookup(searchers, "name", key, scope, 0, reading)
        loose = loose_key(q)
        if loose:
            for page, found in self._lookup(searchers, "loose", loose, scope, LOOSE_RANK, reading).items():
                if page not in named or found[:2] < named[page][:2]:
                    named[page] = found
        return named

    def pages_with_heading(self, words: list[str], scopes: list[str] | None, shards: list[int] | None = None) -> dict[int, float]:
        """The pages with a heading holding every one of ``words`` but stop words (stemmed), each
        with the share of that heading's words the query's are (the best heading's): a section's
        heading read with its page's title ("Cascades: delete-orphan").
        None for fewer than two such words (one word is a name, or any page's)."""
        stems = content_stems(" ".join(words))
        if len(stems) < 2:
            return {}
        clauses = [(tantivy.Occur.Must, self._term("heading_words", stem)) for stem in stems]
        if scopes:
            clauses.append(filter_clause(self.schema, "scope", scopes))
        shares: dict[int, float] = {}
        # The headings of fewest words first: those the query's are the largest share of.
        for searcher, addresses in _best(self._searchers(shards), tantivy.Query.boolean_query(clauses), LOOKUP_LIMIT, "heading_stems"):
            for page, length in zip(self._pages(searcher, addresses), searcher.fast_field_values("heading_stems", addresses), strict=True):
                share = len(stems) / max(int(length or 0), len(stems))
                if share > shares.get(page, 0.0):
                    shares[page] = share
        return shares

    def _pages(self, searcher: tantivy.Searcher, addresses: list[tantivy.DocAddress]) -> list[int]:
        """The id of the page of each document at ``addresses``."""
        page_id_of = self.page_id_of
        return [page_id_of(int(slot or 0)) for slot in searcher.fast_field_values("slot", addresses)]

    def _lookup(
        self, searchers: list[tantivy.Searcher], field: str, key: str, scope: tuple[tantivy.Occur, tantivy.Query] | None, offset: int,
        reading: Reading,
    ) -> dict[int, Named]:
        query = self._term(field, key)
        if scope is not None:
            query = tantivy.Query.boolean_query([(tantivy.Occur.Must, query), scope])
        named: dict[int, Named] = {}
        for searcher, addresses in _best(searchers, query, LOOKUP_LIMIT, "rank"):  # a page is in one shard alone
            slots = [int(slot or 0) for slot in searcher.fast_field_values("slot", addresses)]
            pages = [self.page_id_of(slot) for slot in slots]
            ranks = [int(stored or 0) for stored in searcher.fast_field_values("rank", addresses)]
            depths = searcher.fast_field_values("depth", addresses)
            kinds: dict[int, set[int]] = {}
            for page, stored in zip(pages, ranks, strict=True):
                kinds.setdefault(page, set()).add(stored % CHANGELOG_RANK // 8)
            for page, slot, stored, depth in zip(pages, slots, ranks, depths, strict=True):
                held = kinds[page]
                defined = Kind.SECTION in held and len(held - {Kind.TITLE}) > 1
                candidate = Named(reading.rank(stored, defined) + offset, int(depth or 1), slot)
                found = named.get(page)
                if found is None or candidate[:2] < found[:2]:
                    named[page] = candidate
        return named

    def anchors(self, q: str) -> list[tuple[int, str]]:
        """(page id, anchor id) of sections, objects and glossary terms whose heading (or name)
        or anchor id contains ``q``, best first."""
        needle = q.strip().lower()
        if not needle:
            return []
        # The index is searched for the needle's first ANCHOR_QUERY_CHARS characters, and what it
        # finds is held to the whole needle: runs of characters may stand apart in a heading.
        probe = needle[:ANCHOR_QUERY_CHARS]
        grams = list(dict.fromkeys(probe[at:at + ANCHOR_GRAM] for at in range(max(1, len(probe) - ANCHOR_GRAM + 1))))
        # Scored alike: the first matches in the shards' order, and each shard's.
        matches = tantivy.Query.const_score_query(
            tantivy.Query.boolean_query([(tantivy.Occur.Must, self._term(ANCHOR_GRAMS, gram)) for gram in grams]), 1.0
        )
        query = tantivy.Query.boolean_query([(tantivy.Occur.Must, self._term("anchored", "1")), (tantivy.Occur.Must, matches)])
        found = []
        left = ANCHOR_CANDIDATES
        for searcher in self.searchers.values():
            addresses = [address for _score, address in searcher.search(query, left, count=False).hits]
            for address, page_id in zip(addresses, self._pages(searcher, addresses), strict=True):
                document = searcher.doc(address)  # text is stored, not fast: a fast field holds numbers here
                heading, anchor = document["heading"][0], document["anchor"][0]
                heading_lower, anchor_lower = heading.lower(), anchor.lower()
                if needle in heading_lower or needle in anchor_lower:
                    found.append((anchor_rank(needle, heading_lower, anchor_lower), page_id, anchor))
            left -= len(addresses)
            if left <= 0:
                break
        found.sort()
        return list(dict.fromkeys((page_id, anchor) for _rank, page_id, anchor in found))[:MAX_ANCHORS]


#: A document a query found in one of several shards: its score, the shard's place, its address.
Scored = tuple[float, int, tantivy.DocAddress]


def best(searchers: list[tantivy.Searcher], query: tantivy.Query, limit: int, count: bool = False,
         least: str | None = None) -> tuple[list[Scored], int]:
    """The ``limit`` best documents ``query`` finds in the shards of ``searchers``, best first (of
    equal scores, in the shards' order, then tantivy's): as many as in one index of every shard,
    however many shards there are; and with ``count``, how many it finds. Each shard's are merged
    as they come, not sorted together: a lookup of every shard's (v1's) finds up to ``limit`` in
    each of hundreds. With ``least`` (an integer fast field), the best are those of its least
    values, each "score" its value: what is found then reads none of the index's statistics,
    which count the documents a delete left until a merge."""
    found: list[tuple[int, list[tuple[float, tantivy.DocAddress]]]] = []
    total = 0
    for at, searcher in enumerate(searchers):
        result = (searcher.search(query, limit, count=count) if least is None
                  else searcher.search(query, limit, count=count, order_by_field=least, order=tantivy.Order.Asc))
        if result.hits:
            found.append((at, result.hits))
        if count:
            total += result.count or 0  # type: ignore[attr-defined]  # tantivy-py's stub lacks it
    if len(found) == 1:
        at, hits = found[0]
        return [(score, at, address) for score, address in hits], total
    hits_of = dict(found)
    sign = 1 if least is not None else -1
    merged = heapq.merge(*(_in_order(at, hits, sign) for at, hits in found))
    return [(sign * key, at, hits_of[at][place][1]) for key, at, place in itertools.islice(merged, limit)], total


def _in_order(at: int, hits: list[tuple[float, tantivy.DocAddress]], sign: int) -> Iterator[tuple[float, int, int]]:
    """(score times ``sign``, so that the best is least; shard; place) of each of one shard's
    ``hits``, in their order: what ``best`` merges."""
    for place, (score, _address) in enumerate(hits):
        yield sign * score, at, place


def _best(searchers: list[tantivy.Searcher], query: tantivy.Query, limit: int,
          least: str) -> list[tuple[tantivy.Searcher, list[tantivy.DocAddress]]]:
    """``best``'s documents of the least ``least`` by shard, each shard's in its order."""
    by_shard: dict[int, list[tantivy.DocAddress]] = {}
    for _score, at, address in best(searchers, query, limit, least=least)[0]:
        by_shard.setdefault(at, []).append(address)
    return [(searchers[at], by_shard[at]) for at in sorted(by_shard)]


def anchor_rank(needle: str, heading: str, anchor: str) -> tuple:
    """Exact heading or anchor first, then prefixes, then any match; shorter headings first."""
    exact = needle in (heading, anchor)
    prefix = heading.startswith(needle) or anchor.startswith(needle)
    return (not exact, not prefix, len(heading), heading)
