"""Code syntax as people type it: the tokens of a page's text or of a query that its words alone
would miss (issue 34).

Two kinds of token:

- shaped ones, known by their shape: special names (``__init__``), decorators (``@property``),
  argument unpacking (``*args``, ``**kwargs``);
- operators: whatever punctuation the documentation itself names. The all-punctuation names of
  its general index, glossary and options (the Python docs name ``//``, ``->``, ``:=``, ``**=``,
  ``>>>``, ``{}`` and fifty more; another build names others, or none) are the operators of that
  build. A run of punctuation is read as the longest operators it holds, left to right: in a
  build naming ``//`` and ``//=``, ``x//=y`` holds ``//=``, and ``(**`` holds nothing.

The index build knows a build's operators from its pages' entries (``operator_names``); a query
knows them from the entries index, where every name is (``NamedEntries.names``). Each token is
one term of the pages' ``symbols`` field, where a query looks it up as it is written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache

import tantivy

from ..snapshot.records import Page
from .named_entries import entry_key

#: Special names, decorators, argument unpacking. An alternation whose branches begin with a
#: character lets ``re`` skip to the places where one may start (its charset prefix); a lookahead
#: of those characters in front hid it: the pages of three Sphinx builds took 2.6 times longer.
_SHAPED = re.compile(r"__\w+__|@[A-Za-z_][\w.]*|\*\*?[A-Za-z_]\w*")
#: What no operator holds.
_WORD_CHARACTER = re.compile(r"\w")
#: A run of punctuation: where operators are looked for.
_PUNCTUATION = re.compile(r"[^\w\s]+")
#: The longest operator kept: longer all-punctuation names are not operators anyone types.
MAX_OPERATOR_CHARS = 4
#: What a symbol of a query found as it is written in a page's (or a section's) text adds to its
#: score (its presence: the number of symbols a page holds says nothing of what it is about).
SYMBOL_SCORE = 5.0
#: Quotes: a query's mark a phrase and an apostrophe is part of a word, so none alone is an operator.
_QUOTES = "'\"`"
#: tantivy takes terms shorter than this, in bytes.
MAX_TOKEN_BYTES = 40


def is_operator(key: str) -> bool:
    """Whether a name's key (``entry_key``) is an operator: punctuation only, short, and not
    quotes alone (a query's quotes mark a phrase, and an apostrophe is part of a word)."""
    return 0 < len(key) <= MAX_OPERATOR_CHARS and _PUNCTUATION.fullmatch(key) is not None and key.strip(_QUOTES) != ""


def operator_names(pages: Iterable[Page]) -> frozenset[str]:
    """The operators of a build: the all-punctuation names among those its pages give the entries
    index (titles, headings, and the names and titles of their entries). A name that holds a
    letter, digit or underscore has a key that holds it too, and is passed over before its key
    is made: the keys of every name were most of what planning a shard's build cost."""
    return frozenset(
        key
        for page in pages
        for name in (page.title, *(s.title for s in page.sections), *(n for e in page.entries for n in (e.name, e.title)))
        if _WORD_CHARACTER.search(name) is None and is_operator(key := entry_key(name))
    )


def tokens(text: str, is_known: Callable[[str], bool]) -> list[str]:
    """The code syntax in ``text``, lower-cased, each once: its shaped tokens, then the operators
    (those ``is_known`` says a build names) its runs of punctuation hold, longest first."""
    found = [token.lower() for token in _SHAPED.findall(text)]
    for run in _PUNCTUATION.findall(text):
        start = 0
        while start < len(run):
            for end in range(min(len(run), start + MAX_OPERATOR_CHARS), start, -1):
                if is_known(run[start:end]):
                    found.append(run[start:end])
                    start = end
                    break
            else:
                start += 1
    return kept(found)


def page_tokens(text: str, operators: frozenset[str]) -> list[str]:
    """``tokens`` of a page's text, for the index, whose build knows its ``operators``: one
    regular expression finds them, as ``tokens`` reads runs of punctuation (an operator being
    punctuation alone, no match runs past a run; at each place the longest comes first, then the
    search goes on after it), where ``tokens`` looks at every run."""
    found = [token.lower() for token in _SHAPED.findall(text)]
    if operators:
        found += operator_pattern(operators).findall(text)
    return kept(found)


@lru_cache(maxsize=8)
def operator_pattern(operators: frozenset[str]) -> re.Pattern[str]:
    """Any of ``operators``, the longest first."""
    return re.compile("|".join(map(re.escape, sorted(operators, key=lambda operator: (-len(operator), operator)))))


def kept(found: list[str]) -> list[str]:
    """The tokens ``found``, each once, but those tantivy would not take."""
    return [token for token in dict.fromkeys(found) if len(token.encode()) < MAX_TOKEN_BYTES]


def symbol_query(schema: tantivy.Schema, symbol: str) -> tantivy.Query:
    """The documents of ``schema``'s index whose ``symbols`` field holds ``symbol``, each scoring SYMBOL_SCORE."""
    return tantivy.Query.const_score_query(tantivy.Query.term_query(schema, "symbols", symbol), SYMBOL_SCORE)
