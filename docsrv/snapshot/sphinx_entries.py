"""The names a Sphinx build defines, and where: its object inventory and its general index.

``objects.inv`` lists every object of every domain (``py:function``, ``c:macro``, ``std:term``,
``std:label``, ``std:doc``, ...) with its priority and URL. Its format is Sphinx's own
("Sphinx inventory version 2": four header lines, then zlib-compressed lines of ``name
domain:role priority location display-name``, where ``$`` in the location stands for the name
and a display name ``-`` for the name). It is read here rather than with a library: the format
is six lines of Sphinx's ``InventoryFile.load_v2``, and a reader of our own reports a bad line by
file and line number as every other snapshot input does.

The general index (``genindex.html``, or ``genindex-all.html`` and the pages of each letter when
it is split) lists the entries of ``.. index::`` directives with their targets: a top-level entry
of each list item, its targets the links of the item and of its sub-entries.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

from selectolax.lexbor import LexborNode as Node

from ..errors import CommandError
from .html_input import UnreadablePage, parse_html
from .records import INDEX_ROLE, Entry

INVENTORY = "objects.inv"
_HEADER = b"# Sphinx inventory version 2"
#: Sphinx's own pattern of an inventory line; a role holds a ":" (checked apart, as Sphinx does).
_LINE = re.compile(r"(.+?)\s+(\S+)\s+(-?\d+)\s+?(\S*)\s+(.*)")
#: "add_js_file() (sphinx.application.Sphinx method)": what an index entry qualifies itself with.
_QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")
_SPACE = re.compile(r"\s+")
CATEGORY_TARGETS = 5
#: The most an inventory may inflate to.
MAX_INVENTORY_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class Located:
    """A named entry, and the page it is on: the location as the build links it, without anchor."""

    page: str
    entry: Entry


def read_inventory(path: Path) -> list[Located]:
    """Every object of an ``objects.inv``, in its order. A file of another format, or one that
    does not decompress, is a ``CommandError`` naming it (and the line, for a bad header); one
    that inflates past MAX_INVENTORY_BYTES (a zip bomb) is an UnreadablePage, not inflated further."""
    data = path.read_bytes()
    lines = data.split(b"\n", 4)
    if len(lines) < 5 or lines[0].rstrip() != _HEADER:
        raise CommandError(f"{path}:1: not a Sphinx inventory of version 2 (first line {lines[0][:60]!r})")
    try:
        inflater = zlib.decompressobj()
        inflated = inflater.decompress(lines[4], MAX_INVENTORY_BYTES + 1)
        if len(inflated) > MAX_INVENTORY_BYTES:
            raise UnreadablePage(f"inflates to more than {MAX_INVENTORY_BYTES >> 20} MiB")
        text = inflated.decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as error:
        raise CommandError(f"{path}:5: the compressed part does not decompress: {error}") from None
    found = []
    for line in text.splitlines():
        match = _LINE.match(line.rstrip())
        if match is None:
            continue
        name, role, priority, location, title = match.groups()
        if ":" not in role:  # not "domain:role": a name with spaces that the pattern split wrongly
            continue
        if location.endswith("$"):
            location = location[:-1] + name
        page, _, anchor = location.partition("#")
        found.append(Located(page, Entry(role, name, anchor, int(priority), "" if title in ("-", name) else title)))
    return found


def index_pages(generated: dict[str, Path]) -> list[tuple[str, Path]]:
    """Of the pages Sphinx generated (by URL), those of the general index that hold its entries:
    the page of all entries when the build wrote one, else each letter's page (or the one page of
    an index that is not split)."""
    pages = sorted((url, path) for url, path in generated.items() if url.startswith("genindex"))
    whole = [(url, path) for url, path in pages if url.startswith("genindex-all")]
    return whole or pages


def read_general_index(html: bytes, url: str) -> Iterator[Located]:
    """The entries of one page of the general index (served at ``url``, which its links are
    relative to): each entry at each of its targets and its sub-entries' targets, and each
    sub-entry by its words and its entry's too ("statement" > "with": "with statement"; a
    sub-entry that holds its entry's words already, "import statement", by its own).

    A target in bold is the entry's main one (Sphinx's ``main`` flag, ``.. index:: ! ...``): the
    place that defines it, priority 0 (else 1). An entry of more than ``CATEGORY_TARGETS``
    targets ("module", "built-in function", "configuration value") names a kind of thing, not a
    thing: it is left out."""
    tree = parse_html(html, errors="replace")
    base = "http://build/" + url
    for item in tree.css("table.indextable td > ul > li"):  # genindextable is an indextable too
        top = _entry_name(item)
        yield from _located(top, item.css("a[href]"), base)  # its targets and its sub-entries'
        for sub in item.css("li > ul > li"):
            words = _entry_name(sub)
            if top and words:
                name = words if top.lower() in words.lower() else f"{words} {top}"
                yield from _located(name, sub.css("a[href]"), base)


def _entry_name(item: Node) -> str:
    """The words an item of the general index names (not its targets' "[1]", nor its qualifier)."""
    own = _SPACE.sub(" ", item.text(deep=False) or "").strip(" ,")  # ", " between targets is no name
    if not own:
        first = next((link for link in item.css("a[href]") if link.parent == item), None)
        own = _SPACE.sub(" ", first.text()).strip() if first is not None else ""
    return _QUALIFIER.sub("", own)


def _located(name: str, links: list[Node], base: str) -> Iterator[Located]:
    if not name or not links or len(links) > CATEGORY_TARGETS:
        return
    for link in links:
        target = urljoin(base, link.attributes.get("href") or "")
        if not target.startswith("http://build/"):
            continue
        page, _, anchor = target.removeprefix("http://build/").partition("#")
        yield Located(page, Entry(INDEX_ROLE, name, anchor, 0 if link.css_first("strong") is not None else 1))
