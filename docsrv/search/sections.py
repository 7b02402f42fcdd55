"""A page's sections as documents of their own: scored, never shown (issue 62).

A whole page's score favours long pages: a reference or a changelog holds every word of most
queries somewhere. So each shard also indexes each section of each page (``sections/``): its
heading, its page's title and its text up to the next section (``Section.start``), words stemmed
(tantivy's ``en_stem``: "installing flask" meets the section "Install Flask"). A search ranks a
page by its whole and by its best section together (``SearchIndex.search_pages``), as the
service's own search ranks pages by their nested sections; a hit is still a page, its highlight
starting at its best section when no passage of the query's words says better.

Proximity is scored here too, with the positions tantivy keeps anyway: each pair of the query's
content words at most NEAR_PAIRS apart in it adds a phrase of the two with SECTION_SLOP moves
allowed, in either order, so a section where they stand close together scores more. (Last
round's phrase queries over the pages' regexes cost much and found little.)

The text before a page's first section, and the whole text of a page whose snapshot says no
section's start (written before sections had one), is a section of its own with no heading:
every page with text has at least one.
"""

from __future__ import annotations

import html
from collections.abc import Iterator

import tantivy

from ..snapshot.records import Page
from . import code_syntax
from .named_entries import STOP_WORDS

#: A section's weights, as ``search.query.BOOSTS`` a page's: its heading, its page's title and
#: document name (which every section of the page shares), and its text. Measured on the tuning
#: sets.
SECTION_BOOSTS = {"heading": 2.0, "page": 2.0, "body": 1.0, "path": 0.4}
#: How far from standing together two words of a query may be in a section's text for their
#: pair to count as near (tantivy's slop: a word between them is a move, the other order two),
#: what a pair adds, and how far apart in the query the words of a pair may be
#: (``near_clauses``).
SECTION_SLOP = 8
NEAR_BOOST = 0.5
NEAR_PAIRS = 3
#: The best sections a search looks at, per search: a page outside them has no section score.
SECTION_HITS = 50
#: A page's rank is (1 - SECTION_WEIGHT) x its own score and SECTION_WEIGHT x its best section's,
#: each as a share of the best of its kind in the search.
SECTION_WEIGHT = 0.75

#: tantivy's ``en_stem``, which the sections' text fields are indexed with: the query's words
#: made into the same stems.
_STEMS = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    .filter(tantivy.Filter.remove_long(40))
    .filter(tantivy.Filter.lowercase())
    .filter(tantivy.Filter.stemmer("english"))
    .build()
)


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("scope", tokenizer_name="raw")
    #: The page's slot (``search.highlight.slot_of``).
    builder.add_integer_field("slot", fast=True)
    #: Where the section's text starts in the page's highlight text, in bytes (escaped, UTF-8).
    builder.add_integer_field("at", fast=True)
    for field in SECTION_BOOSTS:
        builder.add_text_field(field, tokenizer_name="en_stem")
    #: The code syntax of the section's text, one token each (as a page's ``symbols``).
    builder.add_text_field("symbols", tokenizer_name="whitespace")
    return builder.build()


def cut(page: Page) -> Iterator[tuple[str, int, int]]:
    """(heading, start, end) of each section of ``page`` (characters of its text), in the text's
    order: the text before the first section, if any, under no heading; a section as long as the
    text when its snapshot says no start."""
    text_length = len(page.text)
    placed = sorted((min(section.start, text_length), at, section.title)
                    for at, section in enumerate(page.sections) if section.start >= 0)
    first = placed[0][0] if placed else text_length
    if first > 0 or not placed:
        yield "", 0, first
    for at, (start, _order, heading) in enumerate(placed):
        yield heading, start, placed[at + 1][0] if at + 1 < len(placed) else text_length


def documents(page: Page, scope: str, slot: int, symbols: str) -> Iterator[tantivy.Document]:
    """The sections of ``page`` (``cut``) as documents of the sections index, each with those of
    the page's ``symbols`` (its code syntax, as its ``symbols`` field holds it) its text holds: the
    page's, derived once (and kept when it does not change: ``search.build.Recorded``), not the
    text read again for each section."""
    text = page.text
    written = symbols.split()
    escaped_at, read_to = 0, 0
    for heading, start, end in cut(page):
        escaped_at += len(html.escape(text[read_to:start]).encode())
        read_to = start
        body = text[start:end]
        lowered = body.lower() if written else ""  # the symbols of words are lower-case
        yield tantivy.Document(scope=scope, slot=slot, at=escaped_at, heading=heading, page=page.title, body=body,
                               path=page.document_name, symbols=" ".join(symbol for symbol in written if symbol in lowered))


def stems(tokens: list[str]) -> list[str]:
    """The stems of a query's tokens (``search.query.index_tokens``), as ``en_stem`` makes them:
    as the sections index and the pages' ``stems`` field hold them."""
    return _STEMS.analyze(" ".join(tokens))


def query(schema: tantivy.Schema, parts: list[list[str]], written: list[str],
          scope: tuple[tantivy.Occur, tantivy.Query] | None) -> tantivy.Query:
    """The sections holding any of ``parts`` (each the stems of a query's word or phrase), by
    field weight, or any of the code syntax ``written`` in the query as it is written (each
    adding ``search.code_syntax.SYMBOL_SCORE``), and of its content words near each other
    (``near_clauses``); with ``scope`` (a filter clause), narrowed by it inside each clause, as
    ``SearchIndex._in_fields`` narrows a page's."""
    clauses = []
    for tokens in parts:
        for field, boost in SECTION_BOOSTS.items():
            matched = (tantivy.Query.term_query(schema, field, tokens[0]) if len(tokens) == 1
                       else tantivy.Query.phrase_query(schema, field, list(tokens)))
            clauses.append(tantivy.Query.boost_query(matched, boost))
    clauses += near_clauses(schema, parts)
    clauses += [code_syntax.symbol_query(schema, symbol) for symbol in written]
    if scope is not None:
        clauses = [tantivy.Query.boolean_query([(tantivy.Occur.Must, clause), scope]) for clause in clauses]
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, clause) for clause in clauses])


def near_clauses(schema: tantivy.Schema, parts: list[list[str]]) -> list[tantivy.Query]:
    """Each pair of content words of the query (one-word parts, stop words left out) at most
    NEAR_PAIRS apart in it, as phrases of the section's text with SECTION_SLOP moves allowed, in
    either order."""
    words = [tokens[0] for tokens in parts if len(tokens) == 1 and tokens[0] not in STOP_WORDS]
    return [tantivy.Query.boost_query(tantivy.Query.phrase_query(schema, "body", list(pair), SECTION_SLOP), NEAR_BOOST)
            for at, first in enumerate(words) for second in words[at + 1 : at + 1 + NEAR_PAIRS]
            for pair in ([first, second], [second, first])]
