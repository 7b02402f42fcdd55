"""HTML of a documentation build, parsed within bounds.

lexbor parses in time linear in a page's size but quadratic in its nesting: a page of a few
megabytes nested deep enough does not finish in minutes. No page Sphinx
writes nests more than a few dozen elements deep, so a page is measured before it is parsed
(a scan of its tags, linear) and one past MAX_PAGE_BYTES or MAX_NESTING is not parsed at all:
the import skips it and says why.
"""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser

#: The largest page parsed. The largest page of the Python documentation is about 430 KB.
MAX_PAGE_BYTES = 16 << 20
#: The deepest nesting of elements parsed (Sphinx's deepest pages: a few dozen).
MAX_NESTING = 400
#: A start or end tag (its name), or a self-closing one.
_TAG = re.compile(rb"<(/?)([A-Za-z][A-Za-z0-9-]*)(?:\s[^>]*)?>")
#: Elements that have no end tag.
_VOID = frozenset(b"area base br col embed hr img input link meta param source track wbr".split())


class UnreadablePage(Exception):
    """A page that is not parsed: no main content, too large, or too deeply nested."""


def nesting(html: bytes, most: int) -> int:
    """How deep elements nest in ``html``, counted up to ``most + 1`` (an end tag that closes
    nothing counts for nothing; a self-closing tag opens nothing)."""
    depth = deepest = 0
    for match in _TAG.finditer(html):
        closing, name = match.group(1, 2)
        if closing:
            if depth:
                depth -= 1
        elif name.lower() not in _VOID and not match.group().endswith(b"/>"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > most:
                    break
    return deepest


def parse_html(html: bytes, errors: str = "strict") -> LexborHTMLParser:
    """``html`` (UTF-8, decoded with ``errors``) parsed, or UnreadablePage when it is too large or
    too deeply nested to parse in bounded time."""
    if len(html) > MAX_PAGE_BYTES:
        raise UnreadablePage(f"{len(html) >> 20} MiB of HTML, more than the {MAX_PAGE_BYTES >> 20} MiB a page may have")
    if nesting(html, MAX_NESTING) > MAX_NESTING:
        raise UnreadablePage(f"elements nest more than {MAX_NESTING} deep (no Sphinx page does; parsing it would take minutes)")
    return LexborHTMLParser(html.decode("utf-8", errors))
