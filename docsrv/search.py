"""Full-text search of documentation pages with tantivy: schema, build, open, query, highlight.

The index lives in ``<snapshot>/index/`` and records a fingerprint of the content it was built
from (the page, version and project files, and this module's schema version); when the
fingerprint differs, the index is rebuilt. Only public pages are indexed, so no query can
reach a private one. Page text is not stored in the index: the store holds it already, and
highlighting reads it from there.

Each page is one document (kind ``page``), each section one more (kind ``section``) for the
v1 anchor search, which matches a substring of the heading or anchor id.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tantivy

from .snapshot.load import record_file
from .store import Store
from .utils.progress import progress_bar, wanted

log = logging.getLogger("docsrv")

SCHEMA_VERSION = 1
FINGERPRINT_FILE = "docsrv-index.json"
#: Weights of DECISIONS.md section 3: a word in the title counts ten times one in the body.
BOOSTS = {"title": 10.0, "headings": 5.0, "body": 1.0}
MAX_HITS = 50
#: How much of a page's text highlighting looks at for matches (like Elasticsearch's max_analyzed_offset):
#: the first matches of a long page are found in it, and a huge page costs no more than a long one.
HIGHLIGHT_SCAN_CHARS = 50_000
#: How many places a word is looked at inside other words ("os" in "those") before giving up.
FIND_TRIES = 64
#: How many section matches the anchor search ranks before it keeps the best 50.
ANCHOR_CANDIDATES = 2000
#: Characters the query language gives a meaning to; a person's query has them read as spaces.
_SYNTAX = re.compile(r"[:+\-!(){}\[\]^~*\\/'<>=&|]")
_WORD = re.compile(r"\w+", re.UNICODE)
_REGEX_META = set(r"\.+*?()|[]{}^$#&-~")


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("kind", tokenizer_name="raw")
    builder.add_text_field("project", tokenizer_name="raw")
    builder.add_text_field("version", tokenizer_name="raw")
    builder.add_integer_field("page", stored=True, indexed=True, fast=True)
    builder.add_text_field("title")
    builder.add_text_field("headings")
    builder.add_text_field("body")
    builder.add_text_field("anchor", stored=True, tokenizer_name="raw")
    builder.add_text_field("heading_lower", tokenizer_name="raw")
    builder.add_text_field("anchor_lower", tokenizer_name="raw")
    return builder.build()


def fingerprint(store: Store) -> str:
    """A digest of everything the index is made from: it changes when the indexed content does."""
    assert store.path is not None
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"schema {SCHEMA_VERSION}".encode())
    for kind in ("projects", "versions", "pages"):
        for path in record_file(store.path, kind):
            digest.update(path.name.encode())
            with open(path, "rb") as data:
                digest.update(hashlib.file_digest(data, "blake2b").digest())
    return digest.hexdigest()


def build_index(store: Store, directory: Path, print_progress: bool | None = None) -> float:
    """Index every public page of ``store`` into ``directory`` (emptied first); return the seconds taken."""
    started = time.perf_counter()
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    index = tantivy.Index(build_schema(), path=str(directory))
    writer = index.writer(heap_size=256 << 20, num_threads=2)
    if print_progress is None:
        print_progress = wanted()
    with progress_bar(len(store.pages), "index pages", print_progress, unit="page") as bar:
        for page in store.pages_ordered:
            project = store.projects[page.project].slug
            version = store.versions[page.version].slug
            writer.add_document(
                tantivy.Document(
                    kind="page",
                    project=project,
                    version=version,
                    page=page.id,
                    title=page.title,
                    headings=" ".join(section.title for section in page.sections),
                    body=page.text,
                )
            )
            for section in page.sections:
                writer.add_document(
                    tantivy.Document(
                        kind="section",
                        project=project,
                        version=version,
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


def write_marker(directory: Path, digest: str, store: Store) -> None:
    """Record what the index in ``directory`` was built from."""
    marker = {"fingerprint": digest, "schema_version": SCHEMA_VERSION, "snapshot": store.name, "pages": len(store.pages)}
    (directory / FINGERPRINT_FILE).write_text(json.dumps(marker))


def index_directory(store: Store) -> Path:
    assert store.path is not None
    return store.path / "index"


def ensure_index(store: Store) -> Path:
    """The directory of an index that matches ``store``'s content, built first when there is none.

    A snapshot directory that cannot be written to gets its index in a temporary directory.
    """
    want = fingerprint(store)
    for directory in (index_directory(store), Path(tempfile.gettempdir()) / f"docsrv-index-{want}"):
        marker = directory / FINGERPRINT_FILE
        try:
            if marker.exists() and json.loads(marker.read_text()).get("fingerprint") == want:
                return directory
            seconds = build_index(store, directory)
            write_marker(directory, want, store)
            log.info("built the search index of %s pages in %.1f s at %s", len(store.pages), seconds, directory)
            return directory
        except (OSError, ValueError) as error:
            log.warning("cannot use %s for the search index: %s", directory, error)
    raise RuntimeError("no usable directory for the search index")


def open_index(store: Store, directory: Path | None = None) -> SearchIndex:
    """Open the index of ``store`` (found or built by ensure_index when no directory is given)."""
    return SearchIndex(store, tantivy.Index.open(str(directory or ensure_index(store))))


@dataclass(frozen=True, slots=True)
class Hit:
    page_id: int
    score: float


@dataclass(frozen=True, slots=True)
class Found:
    hits: list[Hit]
    total: int
    #: Finds the words of the query (a phrase's words too) in page text, for highlighting.
    matcher: WordMatcher | None


class WordMatcher:
    """The words of a query in page text, as whole words, in any case.

    Finding where the first matches are is most of a highlighter's work on long pages, and
    Python's regular expressions (and lower-casing a long text) are slow at it; ``str.find``
    is many times faster. The regular expression then marks the words inside each window only.
    """

    def __init__(self, terms: set[str]) -> None:
        self.terms = sorted(terms, key=len, reverse=True)
        self.variants = list(dict.fromkeys(v for t in self.terms for v in (t, t.capitalize(), t.upper())))
        self.pattern = re.compile(r"\b(?:" + "|".join(re.escape(t) for t in self.terms) + r")\b", re.IGNORECASE)

    def first_positions(self, text: str, limit: int) -> list[int]:
        """Where whole-word matches start in the first HIGHLIGHT_SCAN_CHARS of ``text``, in order.

        Looks for each word as written in the query, capitalised and in capitals: the cases
        that text holds; a match in another mix of cases still gets marked inside a window.
        """
        stop = min(len(text), HIGHLIGHT_SCAN_CHARS)
        positions = []
        for variant in self.variants:
            found = tries = 0
            at = text.find(variant, 0, stop)
            while at >= 0 and found < limit and tries < FIND_TRIES:
                tries += 1
                end = at + len(variant)
                if (at == 0 or not is_word(text[at - 1])) and (end == len(text) or not is_word(text[end])):
                    positions.append(at)
                    found += 1
                at = text.find(variant, end, stop)
        positions.sort()
        return positions


def is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def word_matcher(words: list[str], phrases: list[list[str]]) -> WordMatcher | None:
    terms = set(words) | {w for phrase in phrases for w in phrase}
    return WordMatcher(terms) if terms else None


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


class SearchIndex:
    """Queries over one snapshot's index. Every method is safe to call from worker threads."""

    def __init__(self, store: Store, index: tantivy.Index) -> None:
        self.store = store
        self.index = index
        self.schema = index.schema
        self.searcher = index.searcher()

    def _term(self, field: str, value: str) -> tantivy.Query:
        return tantivy.Query.term_query(self.schema, field, value)

    def _text_query(self, words: list[str], phrases: list[list[str]], conjunction: bool) -> tantivy.Query:
        parts = list(dict.fromkeys(words)) + ['"' + " ".join(p) + '"' for p in phrases]
        query, _errors = self.index.parse_query_lenient(
            " ".join(parts), list(BOOSTS), field_boosts=BOOSTS, conjunction_by_default=conjunction
        )
        return query

    def search_pages(self, q: str, *, project: str | None = None, version: str | None = None) -> Found:
        """Pages matching any word of ``q``; pages holding every word and phrase rank first."""
        words, phrases = read_query(q)
        if not words and not phrases:
            return Found([], 0, None)
        filters = [(tantivy.Occur.Must, self._term("kind", "page"))]
        if project is not None:
            filters.append((tantivy.Occur.Must, self._term("project", project)))
        if version is not None:
            filters.append((tantivy.Occur.Must, self._term("version", version)))
        every = tantivy.Query.boolean_query([(tantivy.Occur.Must, self._text_query(words, phrases, True)), *filters])
        some = tantivy.Query.boolean_query([(tantivy.Occur.Must, self._text_query(words, phrases, False)), *filters])
        searcher = self.searcher
        first = searcher.search(every, MAX_HITS, count=False)
        rest = searcher.search(some, MAX_HITS, count=True)
        hits: list[Hit] = []
        seen: set[int] = set()
        for result in (first, rest):
            pages = searcher.fast_field_values("page", [address for _score, address in result.hits])
            # Equal scores come back in no set order across index segments: the page id decides.
            for score, page_id in sorted(zip((score for score, _ in result.hits), pages), key=lambda hit: (-hit[0], hit[1])):
                if page_id not in seen and len(hits) < MAX_HITS:
                    seen.add(page_id)
                    hits.append(Hit(page_id, score))
        return Found(hits, max(rest.count or 0, len(hits)), word_matcher(words, phrases))

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


def fragments(text: str, matcher: WordMatcher | None, *, count: int, width: int, open_tag: str, close_tag: str, ellipsis: bool) -> list[str]:
    """Up to ``count`` windows of about ``width`` characters around the first matches in ``text``.

    The text is HTML-escaped piece by piece and only our own tags are added, so nothing in a
    page can inject markup. Works on Python strings: offsets are characters, not bytes. Only
    the first HIGHLIGHT_SCAN_CHARS characters are looked at, so a huge page costs no more
    than a large one.
    """
    if matcher is None or not text:
        return []
    windows: list[tuple[int, int]] = []
    for position in matcher.first_positions(text, count * 4):
        if windows and position < windows[-1][1]:
            continue
        if len(windows) == count:
            break
        start = max(0, position - width // 3)
        space = text.rfind(" ", 0, start + 1)
        start = space + 1 if start > 0 and space >= 0 and position - space < width else start
        end = min(len(text), start + width)
        space = text.find(" ", end, end + 20)
        end = space if space >= 0 else end
        windows.append((start, end))
    out = []
    for start, end in windows:
        pieces = []
        cursor = start
        for match in matcher.pattern.finditer(text, start, end):
            pieces.append(html.escape(text[cursor : match.start()]))
            pieces.append(open_tag + html.escape(match.group()) + close_tag)
            cursor = match.end()
        pieces.append(html.escape(text[cursor:end]))
        fragment = "".join(pieces).strip()
        if ellipsis:
            fragment = ("..." if start > 0 else "") + fragment + ("..." if end < len(text) else "")
        out.append(fragment)
    return out


def opening(text: str, width: int) -> str:
    """The first ``width`` characters of ``text`` or so, escaped: the highlight of a title-only match."""
    if len(text) <= width:
        return html.escape(text)
    cut = text.rfind(" ", 0, width)
    return html.escape(text[: cut if cut > width // 2 else width])
