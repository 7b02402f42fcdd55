"""Pages from a real Sphinx HTML build, in either layout, into one version of a snapshot.

``html`` maps ``install.rst`` to ``install.html``; ``dirhtml`` maps it to ``install/index.html``,
served at ``install/``. Of each page only the main content is kept: navigation, sidebars,
tables of contents, scripts, styles and the pilcrows of header links are dropped, and the
headings are kept apart from the body text (as title and section headings). Parsing uses selectolax (the
lexbor engine), which reads a large documentation build in seconds.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec

from ..errors import CommandError
from ..utils.files import link_or_copy
from ..utils.progress import progress_bar, wanted
from .errors import ProblemList, SnapshotError
from .html_input import UnreadablePage, parse_html
from .load import read_manifest, read_records, record_file, record_files
from .records import DOCUMENT_ROLE, INDEX_ROLE, LABEL_ROLE, TERM_ROLE, Entry, Page, Project, Record, Section, Version, document_of
from .sphinx_entries import INVENTORY, Located, index_pages, read_general_index, read_inventory
from .write import SUFFIX, RecordWriter, built_aside, write_manifest

#: Directories of a Sphinx build that hold no pages.
SKIP_DIRS = {"_static", "_sources", "_images", "_downloads", "_modules", ".doctrees"}
#: Pages Sphinx generates from the documents, by kind (the general index and its letters, module
#: indexes of every domain, the search page) and the 404 page: not documents themselves.
GENERATED = {
    "general index": re.compile(r"^genindex(-.+)?$"),
    "module index": re.compile(r"^[a-z]+-modindex$"),
    "search page": re.compile(r"^search$"),
    "404 page": re.compile(r"^404$"),
}
MAIN_CONTENT = ('[role="main"]', "main", "div.body", "article", "div.document")
NOISE = (
    "script, style, noscript, template, nav, header, footer, form, a.headerlink, div.sphinxsidebar, "
    "div.related, div.rst-footer-buttons, div.prev-next-area, div.toc-drawer, div.sidebar-drawer, button, "
    "div.toctree-wrapper"
)
_SPACE = re.compile(r"\s+")
#: What ``page_text`` puts where a section starts: a character no page's text holds as it is read.
SECTION_MARK = "\x00"
#: The list of document names in a ``searchindex.js`` (keys quoted or not, as Sphinx versions write them).
_DOCNAMES = re.compile(r'"?docnames"?\s*:\s*(\[[^\]]*\])')
#: The largest searchindex.js read for document names (a large build's is a few MB).
MAX_SEARCHINDEX_BYTES = 64 << 20


@dataclass
class ImportReport:
    layout: str
    pages: int = 0
    replaced: int = 0
    #: Files that could not be read as a page, with why; pages Sphinx generated (not documents), by kind.
    skipped: list[tuple[str, str]] = field(default_factory=list)
    generated: Counter[str] = field(default_factory=Counter)
    #: Named entries recorded, by kind ("objects", "glossary terms", "labels", "index entries"),
    #: and how many named a page that is not imported.
    entries: Counter[str] = field(default_factory=Counter)
    unplaced: int = 0


def entry_kind(entry: Entry) -> str:
    """The kind of a named entry, as an import counts them."""
    return {TERM_ROLE: "glossary terms", LABEL_ROLE: "labels", DOCUMENT_ROLE: "documents", INDEX_ROLE: "index entries"}.get(
        entry.role, "objects")


def detect_layout(root: Path) -> str:
    """``dirhtml`` when every content page is an ``index.html`` of its own directory."""
    names = [p for p in content_files(root)[0] if p.parent != root]
    if names and all(p.name == "index.html" for p in names):
        return "dirhtml"
    return "html"


def content_files(root: Path) -> tuple[list[Path], dict[Path, str]]:
    """The HTML files of a build that are documents, and those Sphinx generated with their kind
    (see GENERATED)."""
    found: list[Path] = []
    generated: dict[Path, str] = {}
    for path in sorted(root.rglob("*.html")):
        relative = path.relative_to(root)
        if SKIP_DIRS & set(relative.parts[:-1]):
            continue
        stem = relative.parent.name if relative.name == "index.html" and relative.parent.parts else relative.stem
        kind = next((kind for kind, pattern in GENERATED.items() if pattern.match(stem)), None) if len(relative.parts) <= 2 else None
        if kind is None:
            found.append(path)
        else:
            generated[path] = kind
    return found, generated


def named_entries(root: Path, generated: dict[Path, str], layout: str, skipped: list[tuple[str, str]]) -> list[Located]:
    """The objects of the build's inventory, then the entries of its general index that name a
    place no object of the inventory is at (most index entries are the objects themselves), each
    name of a place once.
    An inventory or index page too large to read is added to ``skipped``, with why."""
    inventory: list[Located] = []
    if (root / INVENTORY).is_file():
        try:
            inventory = read_inventory(root / INVENTORY)
        except UnreadablePage as error:
            skipped.append((INVENTORY, str(error)))
    objects = {(located.page, located.entry.anchor) for located in inventory}
    urls = {page_path(PurePosixPath(path.relative_to(root).as_posix()), layout): path for path in generated}
    found = list(inventory)
    named: set[tuple[str, str, str]] = set()
    for url, path in index_pages(urls):
        try:
            index = list(read_general_index(path.read_bytes(), url))
        except UnreadablePage as error:
            skipped.append((url, str(error)))
            continue
        for located in index:
            # A place may have several names ("statement" and "with statement"), each once.
            name = (located.page, located.entry.anchor, located.entry.name)
            if (located.page, located.entry.anchor) not in objects and name not in named:
                named.add(name)
                found.append(located)
    return found


def page_path(relative: PurePosixPath, layout: str) -> str:
    """The page's path under its version's URL."""
    if layout == "dirhtml" and relative.name == "index.html":
        parent = str(relative.parent)
        return "" if parent == "." else parent + "/"
    return str(relative)


def document_names(root: Path) -> frozenset[str]:
    """The document names a build's ``searchindex.js`` lists: what tells a dirhtml page ``cli/``
    made from ``cli/index.rst`` from one made from ``cli.rst``. None when it has none, or one
    that cannot be read or is larger than MAX_SEARCHINDEX_BYTES: the names then come from the
    paths alone."""
    path = root / "searchindex.js"
    try:
        if path.stat().st_size > MAX_SEARCHINDEX_BYTES:
            return frozenset()
        found = _DOCNAMES.search(path.read_text(encoding="utf-8"))
        names = json.loads(found.group(1)) if found else []
    except (OSError, UnicodeDecodeError, ValueError):
        return frozenset()
    return frozenset(name for name in names if isinstance(name, str))


def document_name(relative: PurePosixPath, layout: str, listed: frozenset[str]) -> str:
    """The Sphinx document name of the page in file ``relative`` of a build."""
    name = document_of(str(relative), dirhtml=layout == "dirhtml")
    if layout == "dirhtml" and relative.name == "index.html" and name not in listed and f"{name}/index" in listed:
        return f"{name}/index"
    return name


def clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def read_page(html: bytes) -> tuple[str, tuple[Section, ...], str]:
    """(title, sections, body text) of a Sphinx page."""
    tree = parse_html(html)
    main = next((node for selector in MAIN_CONTENT if (node := tree.css_first(selector)) is not None), None)
    if main is None:
        raise UnreadablePage("no main content (no role=main, main, div.body, article or div.document)")
    first_section = main.css_first("section, div.section")
    if first_section is not None and first_section.parent is not None:
        # The document's sections are its content; a theme without a main-content marker (Django's
        # puts its header, navigation and sidebar beside them in div.document) is narrowed to them.
        main = first_section.parent
    for node in main.css(NOISE):
        node.decompose()
    for node in main.css("span.section-number"):  # "4.8.1. " of a numbered toctree: not part of the title
        node.decompose()
    heading = main.css_first("h1")
    title = clean(heading.text()) if heading is not None else ""
    if not title:
        head_title = tree.css_first("title")
        title = clean(head_title.text()).split(" — ")[0].split(" - ")[0] if head_title is not None else ""
    headed = []
    for node in main.css("section[id], div.section[id]"):
        section_heading = node.css_first("h1, h2, h3, h4, h5, h6")
        if section_heading is not None:
            headed.append((node.mem_id, node.attributes["id"] or "", clean(section_heading.text())))
    # Headings are indexed as the title and section headings, with their own weights.
    for node in main.css("h1, h2, h3, h4, h5, h6"):
        node.decompose()
    text, starts = cleaned_text(page_text(main, {mem_id for mem_id, _id, _title in headed}))
    sections = tuple(Section(id=anchor, title=heading, start=start)
                     for (_mem_id, anchor, heading), start in zip(headed, starts, strict=True))
    return title, sections, text


#: Elements that a browser lays out as blocks (or breaks a line at): their text is apart from
#: the text before them. Text inside other elements runs on as it is written.
BLOCKS = frozenset(
    "address article aside blockquote br caption dd details div dl dt figcaption figure footer header hr li main ol p pre "
    "section summary table tbody td tfoot th thead tr ul".split()
)


def page_text(main: Any, marked: Container[int] = ()) -> list[str]:
    """The text of ``main`` as a reader sees it, in parts: a space where a block starts, and
    nothing added between inline elements, so that ``<span>--</span><span>broker</span>``
    (Pygments' tokens) stays ``--broker`` and fragments of it are exact (DECISIONS.md section 3).
    Where an element of ``marked`` (by ``mem_id``) starts, a part of its own is ``SECTION_MARK``."""
    parts = []
    for node in main.traverse(include_text=True):
        tag = node.tag
        if tag == "-text":
            parts.append(node.text_content)
        elif tag in BLOCKS:
            if node.mem_id in marked:
                parts.append(SECTION_MARK)
            parts.append(" ")
    return parts


def cleaned_text(parts: list[str]) -> tuple[str, list[int]]:
    """The text of ``parts`` (``page_text``) as ``clean`` makes it, and where in it the text
    after each ``SECTION_MARK`` part starts: the text is the one ``clean`` makes of the other
    parts joined."""
    pieces: list[str] = []
    starts: list[int] = []
    length = 0
    ends_in_space = True  # at the start, as after a space: leading spaces are dropped
    for run in "".join(parts).split(SECTION_MARK):
        piece = _SPACE.sub(" ", run)
        if ends_in_space and piece.startswith(" "):
            piece = piece[1:]
        if piece:
            pieces.append(piece)
            length += len(piece)
            ends_in_space = piece.endswith(" ")
        starts.append(length)
    text = "".join(pieces).rstrip(" ")
    # A section's text starts at its first word: past the space a block's start made, if any.
    return text, [min(start + (text[start : start + 1] == " "), len(text)) for start in starts[:-1]]


def import_sphinx(
    html_dir: str | Path,
    snapshot: str | Path,
    project_slug: str,
    version_slug: str,
    *,
    layout: str = "auto",
    progress: bool | None = None,
) -> ImportReport:
    """Replace the pages of one version of ``snapshot`` by the pages of a Sphinx build."""
    root = Path(html_dir)
    directory = Path(snapshot)
    problems = ProblemList(str(directory))
    if not root.is_dir():
        problems.add(str(root), None, "not a directory of HTML")
        problems.raise_if_any()
    manifest = read_manifest(directory, problems)
    projects = read_kind(directory, "projects", Project, problems)
    versions = read_kind(directory, "versions", Version, problems)
    (pages_file,) = record_file(directory, "pages") or [directory / "pages.jsonl"]
    pages = read_records(pages_file, Page, problems) if pages_file.exists() else []
    problems.raise_if_any()
    assert manifest is not None
    project = next((p for p in projects if p.slug == project_slug), None)
    if project is None:
        problems.add("projects.jsonl", None, f"no project {project_slug!r}")
        raise SnapshotError(str(directory), list(problems))
    version = next((v for v in versions if v.project == project.id and v.slug == version_slug), None)
    if version is None:
        problems.add("versions.jsonl", None, f"project {project_slug!r} has no version {version_slug!r}")
        raise SnapshotError(str(directory), list(problems))

    kept = [p for p in pages if p.version != version.id]
    imported, report = read_build(root, project.id, version.id, max((p.id for p in pages), default=0) + 1, layout=layout,
                                  progress=progress)
    report.replaced = len(pages) - len(kept)
    compress = next(kind for kind, suffix in SUFFIX.items() if pages_file.name.endswith(suffix))
    # The new snapshot is built beside the old one (its other files linked, not copied) and swapped in.
    target = Path(os.path.realpath(directory))
    with built_aside(target, replace=True) as partial:
        for path in record_files(target):
            if path.name != pages_file.name:
                link_or_copy(path, partial / path.name)
        with RecordWriter(partial, "pages", compress) as writer:
            writer.write(kept)
            writer.write(imported)
        write_manifest(partial, msgspec.structs.replace(manifest, counts={**manifest.counts, "pages": len(kept) + len(imported)}))
    return report


def read_build(
    root: Path, project: int, version: int, first_id: int, *, layout: str = "auto", progress: bool | None = False
) -> tuple[list[Page], ImportReport]:
    """The pages of the Sphinx build in ``root``, as pages of ``version`` of ``project`` with ids
    from ``first_id`` on, and what was read and skipped. CommandError when it holds no page that
    can be read."""
    report = ImportReport(detect_layout(root) if layout == "auto" else layout)
    files, generated = content_files(root)
    report.generated.update(generated.values())
    if not files:
        raise CommandError(f"{root}: no HTML pages found (not the output directory of a Sphinx build?); the snapshot is unchanged")
    entries: dict[str, list[Entry]] = defaultdict(list)
    for located in named_entries(root, generated, report.layout, report.skipped):
        entries[located.page].append(located.entry)
    imported: list[Page] = []
    listed = document_names(root)
    with progress_bar(len(files), f"import {root.name}", wanted() if progress is None else progress, unit="page") as bar:
        for path in files:
            relative = PurePosixPath(path.relative_to(root).as_posix())
            try:
                title, sections, text = read_page(path.read_bytes())
            except (UnreadablePage, UnicodeDecodeError, OSError) as error:
                report.skipped.append((str(relative), str(error)))
            else:
                path_in_version = page_path(relative, report.layout)
                named = tuple(entries.pop(path_in_version, ()))
                report.entries.update(map(entry_kind, named))
                imported.append(
                    Page(id=first_id + len(imported), project=project, version=version, path=path_in_version,
                         title=title, sections=sections, text=text, entries=named,
                         document=document_name(relative, report.layout, listed))
                )
            if bar is not None:
                bar.update(1)
    if not imported:
        raise CommandError(f"{root}: none of its {len(files)} HTML files could be read as a page; the snapshot is unchanged")
    report.pages = len(imported)
    report.unplaced = sum(map(len, entries.values()))
    return imported, report


def read_kind(directory: Path, kind: str, cls: type[Record], problems: ProblemList) -> list[Any]:
    found = record_file(directory, kind)
    if len(found) != 1:
        problems.add(f"{kind}.jsonl", None, "missing or ambiguous")
        return []
    return read_records(found[0], cls, problems)
