"""Which pages are changelogs, and which queries ask for one.

Changelogs, release notes, "What's New in X.Y" and history pages mention every API once, so by
word counts alone they outrank the page where a name or topic is documented. Search ranks them
after the pages that document what a query asks (``search/query.py``), unless the query names a
release. They are recognised by their title and structure, not by a list of paths:

- a title in a changelog's words ("Changelog", "Release notes", "What's New in 3.10", "History",
  "Changes", "Migrating to 2.0") with a version in the title or in its section headings, or
  such a title alone ("Changelog");
- or most of at least three section headings naming a version ("Release 5.3.0 (released Oct
  16, 2022)", "Version 2.2.2", "1.4.46"): a changelog by any other title.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: A changelog's words in a title or a query.
_WORDS = re.compile(
    r"\b(change ?logs?|changes|release notes?|releases|what['\u2019]?s new|whats new|history|news|migrat(?:e|ion|ing))\b",
    re.IGNORECASE,
)
#: A version: "3.10", "1.4.46", "v2.0", "5.3.0b1".
_VERSION = re.compile(r"(?<![\w.])v?\d+\.\d+(?:\.\d+)*(?:[a-z]+\d*)?(?![\w.]*\w)", re.IGNORECASE)
#: A title that is a changelog's words and nothing else (a project's name aside).
_BARE_TITLE = re.compile(r"^\W*(\w+\s+)?(change ?log|changes|release notes|history|news)\W*$", re.IGNORECASE)
#: What a query says when it asks what changed.
_ASKS = re.compile(r"\b(change ?logs?|release notes?|what['\u2019]?s new|whats new)\b", re.IGNORECASE)
MIN_SECTIONS = 3


def is_changelog(title: str, section_titles: Sequence[str]) -> bool:
    """Whether a page of this title and these section headings is a changelog. (A version holds a
    dot: a heading without one is not searched for a version. The index build asks this of every
    page.)"""
    versioned = sum(1 for heading in section_titles if "." in heading and _VERSION.search(heading))
    if len(section_titles) >= MIN_SECTIONS and 2 * versioned >= len(section_titles):
        return True
    if _WORDS.search(title) is None:
        return False
    return bool(_VERSION.search(title) or versioned or _BARE_TITLE.match(title))


def asks_for_changes(query: str) -> bool:
    """Whether a query names a release or asks what changed ("what's new in 1.4", "2.0
    migration", "changelog"): then changelogs rank as any other page."""
    return bool(_VERSION.search(query) or _ASKS.search(query))
