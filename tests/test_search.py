"""Search over a real Sphinx build: import in both layouts, ranking, phrases, highlighting,
escaping, parameter errors, the v1 file and anchor searches, and privacy."""

import shutil
import subprocess
import sys
from urllib.parse import quote

import pytest

from conftest import DEMO, ROOT

SITE = ROOT / "tests" / "sphinx_site"
BASE = "https://docs.example.org/projects"


def docsrv(*args):
    result = subprocess.run([sys.executable, "-m", "docsrv", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The Sphinx site built in both layouts, and a demo snapshot with it imported three times."""
    out = tmp_path_factory.mktemp("sphinx")
    for builder in ("html", "dirhtml"):
        subprocess.run(
            [sys.executable, "-m", "sphinx", "-q", "-b", builder, str(SITE), str(out / builder)],
            check=True, capture_output=True, timeout=300,
        )
    (out / "html" / "broken.html").write_bytes(b"<html><body><div role='main'>\xff\xfe caf\xe9</div></body></html>")
    snapshot = out / "snapshot"
    shutil.copytree(DEMO, snapshot, ignore=shutil.ignore_patterns("index"))
    imports = {
        "html": docsrv("snapshot", "import-sphinx", str(out / "html"), "--into", str(snapshot), "--project", "attrs", "--version", "latest"),
        "dirhtml": docsrv("snapshot", "import-sphinx", str(out / "dirhtml"), "--into", str(snapshot), "--project", "attrs", "--version", "stable"),
        "private project": docsrv("snapshot", "import-sphinx", str(out / "html"), "--into", str(snapshot), "--project", "acme-handbook", "--version", "latest"),
        "private version": docsrv("snapshot", "import-sphinx", str(out / "dirhtml"), "--into", str(snapshot), "--project", "flask", "--version", "2.4.0-rc1"),
    }
    return snapshot, imports


@pytest.fixture(scope="module")
def server(built):
    from conftest import Server

    snapshot, _ = built
    running = Server(["--snapshot", str(snapshot)])
    yield running
    running.stop()


def search(server, q, version="latest", project="attrs"):
    return server.json(f"/api/v2/docsearch/?project={project}&version={version}&q={quote(q)}")


def hits(body):
    return body["results"]["hits"]["hits"]


def paths(body):
    return [hit["fields"]["path"][0] for hit in hits(body)]


def test_import_reports_layout_pages_skipped_files_and_named_entries(built):
    _, imports = built
    # The general index, the module index and the search page are reported, by kind, as generated
    # (not documents); the named entries by kind (a document's title is in the inventory too).
    assert ("imported 9 pages (html layout) into attrs/latest, replacing 0; skipped 4 (1 general index, 1 module index, "
            "1 search page, 1 unreadable); named entries: 9 documents, 4 glossary terms, 10 index entries, 8 objects "
            "(4 on pages not imported)") in imports["html"].stdout
    assert "skipped broken.html:" in imports["html"].stderr
    assert ("imported 9 pages (dirhtml layout) into attrs/stable, replacing 0; skipped 3 (1 general index, 1 module index, "
            "1 search page, 0 unreadable); named entries: 9 documents, 4 glossary terms, 10 index entries, 8 objects "
            "(4 on pages not imported)") in imports["dirhtml"].stdout


@pytest.mark.parametrize(
    ("name", "kind"),
    [("genindex.html", "general index"), ("genindex-A.html", "general index"), ("genindex-all.html", "general index"),
     ("py-modindex.html", "module index"), ("js-modindex.html", "module index"), ("search.html", "search page"),
     ("404.html", "404 page"), ("genindex/index.html", "general index"), ("search/index.html", "search page")],
)
def test_generated_pages_are_not_documents(tmp_path, name, kind):
    from docsrv.snapshot.import_sphinx import content_files

    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("<html></html>")
    (tmp_path / "usage.html").write_text("<html></html>")
    (tmp_path / "indexing.html").write_text("<html></html>")  # a document whose name only starts like one
    pages, generated = content_files(tmp_path)
    assert [p.name for p in pages] == ["indexing.html", "usage.html"] and generated == {tmp_path / name: kind}


def test_generated_pages_are_absent_from_search_and_files(server):
    files = [o["path"] for o in server.json("/api/v1/file/?limit=0")["objects"]]
    assert "api.html" in files and "glossary.html" in files
    assert not [path for path in files if path.startswith(("genindex", "search", "py-modindex"))]
    for q in ("index", "module index", "search", "Python Module Index"):
        assert not [path for path in paths(search(server, q)) if path.startswith(("genindex", "search", "py-modindex"))]


def test_section_numbers_of_a_numbered_toctree_are_not_part_of_titles():
    from docsrv.snapshot.import_sphinx import read_page

    html = (b'<div role="main"><section id="writing-fields"><h1><span class="section-number">4.8.1. </span>Writing fields'
            b'<a class="headerlink" href="#writing-fields">\xc2\xb6</a></h1><p>Body.</p><section id="subclassing">'
            b'<h2><span class="section-number">4.8.1.2. </span>Subclassing</h2><p>More.</p></section></section></div>')
    title, sections, text = read_page(html)
    assert title == "Writing fields"
    assert [(s.id, s.title) for s in sections] == [("writing-fields", "Writing fields"), ("subclassing", "Subclassing")]
    assert text == "Body. More."


def test_a_theme_without_a_main_content_marker_is_narrowed_to_the_documents_sections():
    from docsrv.snapshot.import_sphinx import read_page

    # Django's theme: the site's header (with an h1 of its own) and navigation beside the sections.
    html = (b'<div class="document"><div id="hd"><h1>Django documentation</h1><div id="global-nav">Home | Index</div></div>'
            b'<div id="bd"><div class="yui-g"><div class="section" id="s-making-queries"><span id="making-queries"></span>'
            b'<h1>Making queries</h1><p>Once you have models.</p></div></div><div class="yui-b">Browse: prev | next</div></div></div>')
    title, sections, text = read_page(html)
    assert (title, text) == ("Making queries", "Once you have models.")
    assert [(s.id, s.title) for s in sections] == [("s-making-queries", "Making queries")]


def test_each_section_says_where_its_text_starts_in_the_pages_text():
    """Issue 62: a section's text is the page's from its start to the next section's: the import
    records where each starts, in characters of the text as it is kept (unchanged by the marks)."""
    from docsrv.snapshot.import_sphinx import read_page

    html = ('<div role="main"><section id="top"><h1>Top</h1><p>  Intro   text. </p><section id="one"><h2>One</h2>'
            '<p>First\n  body&nbsp;café.</p></section><section id="empty"><h2>Empty</h2></section>'
            '<section id="two"><h2>Two</h2> <pre>code   here</pre></section></section></div>').encode()
    title, sections, text = read_page(html)
    assert title == "Top" and text == "Intro text. First body café. code here"
    starts = [(s.id, s.title, s.start) for s in sections]
    assert starts == [("top", "Top", 0), ("one", "One", 12), ("empty", "Empty", 29), ("two", "Two", 29)]
    assert [text[start:] for _id, _title, start in starts][1:] == ["First body café. code here", "code here", "code here"]


def test_the_text_kept_with_section_marks_is_the_text_kept_without():
    """The marks ``page_text`` puts where sections start change nothing of the text ``clean``
    makes, wherever spaces stand around them; each start is where the text after its mark begins."""
    import random

    from docsrv.snapshot.import_sphinx import SECTION_MARK, clean, cleaned_text

    rng = random.Random(62)
    for _ in range(2000):
        parts = [rng.choice(["a", "bc", " ", "  ", "\n", "\t ", SECTION_MARK, "d e", " f "]) for _ in range(rng.randint(0, 12))]
        text, starts = cleaned_text(parts)
        assert text == clean("".join(part for part in parts if part != SECTION_MARK)), parts
        assert len(starts) == parts.count(SECTION_MARK)
        for at, start in zip([i for i, part in enumerate(parts) if part == SECTION_MARK], starts, strict=True):
            after = clean("".join(part for part in parts[at:] if part != SECTION_MARK))
            assert text[start:] == after or (not after and start == len(text)), (parts, start)


def test_a_page_is_cut_into_the_sections_it_searches_by():
    """Issue 62: the text before the first section is one with no heading; a section runs to the
    next one's start; a snapshot that says no start (written before sections had one) makes the
    whole text one section with no heading; a start past the text is its end."""
    from docsrv.search.sections import cut
    from docsrv.snapshot.records import Page, Section

    def page(*sections: Section) -> Page:
        return Page(id=1, project=1, version=1, path="p.html", text="Intro. Body one. Body two.", sections=sections)

    assert list(cut(page(Section("a", "A", 7), Section("b", "B", 17)))) == [("", 0, 7), ("A", 7, 17), ("B", 17, 26)]
    assert list(cut(page(Section("top", "Top", 0), Section("a", "A", 0), Section("b", "B", 99)))) == [
        ("Top", 0, 0), ("A", 0, 26), ("B", 26, 26)]
    assert list(cut(page(Section("a", "A"), Section("b", "B")))) == [("", 0, 26)]
    assert list(cut(page())) == [("", 0, 26)]


def inventory(lines: bytes, header: bytes = b"# Sphinx inventory version 2") -> bytes:
    import zlib

    return header + b"\n# Project: X\n# Version: 1\n# The remainder of this file is compressed using zlib.\n" + zlib.compress(lines)


def test_an_inventory_is_read_as_sphinx_writes_it(tmp_path):
    from docsrv.snapshot.records import Entry
    from docsrv.snapshot.sphinx_entries import Located, read_inventory

    path = tmp_path / "objects.inv"
    path.write_bytes(inventory(b"pkg.run py:function 1 api.html#$ -\nthe big label std:label -1 guide/#big Big Label\n"
                               b"no role here 1 x.html -\nkw py:data 2 api.html#kw kw\n"))
    assert read_inventory(path) == [
        Located("api.html", Entry("py:function", "pkg.run", "pkg.run", 1, "")),  # "$" is the name, "-" no title
        Located("guide/", Entry("std:label", "the big label", "big", -1, "Big Label")),  # a name with spaces
        Located("api.html", Entry("py:data", "kw", "kw", 2, "")),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (inventory(b"x py:function 1 a.html -\n", b"# Sphinx inventory version 1"), r"objects\.inv:1: not a Sphinx inventory of version 2"),
        (inventory(b"")[:-4] + b"junk", r"objects\.inv:5: the compressed part does not decompress"),
    ],
)
def test_an_unreadable_inventory_is_refused_by_file_and_line(built, tmp_path, content, message):
    from docsrv.errors import CommandError
    from docsrv.snapshot.import_sphinx import import_sphinx

    snapshot, _ = built
    html = tmp_path / "html"
    shutil.copytree(snapshot.parent / "html", html)
    (html / "objects.inv").write_bytes(content)
    copy = tmp_path / "snap"
    shutil.copytree(snapshot, copy, ignore=shutil.ignore_patterns("index"))
    before = (copy / "pages.jsonl").read_bytes()
    with pytest.raises(CommandError, match=message):
        import_sphinx(html, copy, "attrs", "latest", progress=False)
    assert (copy / "pages.jsonl").read_bytes() == before


def test_reimport_replaces_the_versions_pages(built, tmp_path):
    snapshot, _ = built
    copy = tmp_path / "snap"
    shutil.copytree(snapshot, copy, ignore=shutil.ignore_patterns("index"))
    html = snapshot.parent / "html"
    again = docsrv("snapshot", "import-sphinx", str(html), "--into", str(copy), "--project", "attrs", "--version", "latest")
    assert "imported 9 pages (html layout) into attrs/latest, replacing 9" in again.stdout
    assert "snapshot demo is good" in docsrv("snapshot", "validate", str(copy)).stdout


def test_pages_keep_main_content_only(server):
    page = next(o for o in server.json("/api/v1/file/?limit=0")["objects"] if o["absolute_url"].endswith("attrs/en/latest/security.html"))
    text = server.json("/api/v1/file/search/?q=vulnerability")
    assert any(o["id"] == page["id"] for o in text["objects"])
    assert search(server, "trackingPixel")["results"]["hits"]["total"] == 0  # scripts are not content
    assert search(server, "Navigation")["results"]["hits"]["total"] == 0  # nor is the sidebar
    assert "¶" not in server.get("/api/v2/docsearch/?project=attrs&version=latest&q=security").body.decode()


def test_a_dirhtml_page_is_named_as_its_build_names_it(built):
    """``cli/index.html`` of a dirhtml build is the document ``cli`` (from ``cli.rst``) or
    ``cli/index`` (from ``cli/index.rst``): the build's searchindex.js lists which."""
    from pathlib import PurePosixPath

    from docsrv.snapshot.import_sphinx import document_name, document_names

    snapshot, _ = built
    listed = document_names(snapshot.parent / "dirhtml")
    assert {"index", "install", "api", "guide/caching", "guide/frobnication"} <= listed
    assert document_names(snapshot.parent / "nowhere") == frozenset()
    for broken in (b"Search.setIndex({docnames:[1, null, {}, \"x\"", b"\xff\xfe", b"docnames:[\"a\", 2]"):
        odd = snapshot.parent / f"odd-{len(broken)}"
        odd.mkdir()
        (odd / "searchindex.js").write_bytes(broken)
        assert document_names(odd) <= {"a"}  # unreadable or half-read: no names, never an error
    assert document_name(PurePosixPath("cli/index.html"), "dirhtml", frozenset({"cli/index"})) == "cli/index"
    assert document_name(PurePosixPath("cli/index.html"), "dirhtml", frozenset({"cli"})) == "cli"
    assert document_name(PurePosixPath("cli/index.html"), "dirhtml", frozenset()) == "cli"
    assert document_name(PurePosixPath("index.html"), "dirhtml", listed) == "index"
    assert document_name(PurePosixPath("cli/index.html"), "html", frozenset()) == "cli/index"
    assert document_name(PurePosixPath("guide/caching.html"), "html", listed) == "guide/caching"


def test_both_layouts_map_paths_to_urls(server):
    html = search(server, "frobnicator", version="latest")
    assert paths(html)[0] == "guide/frobnication"
    assert hits(html)[0]["fields"]["link"] == f"{BASE}/attrs/en/latest/guide/frobnication"
    dirhtml = search(server, "frobnicator", version="stable")
    assert paths(dirhtml)[0] == "guide/frobnication"
    assert hits(dirhtml)[0]["fields"]["link"] == f"{BASE}/attrs/en/stable/guide/frobnication"
    assert hits(dirhtml)[0]["fields"] | {} == {
        "link": f"{BASE}/attrs/en/stable/guide/frobnication", "path": ["guide/frobnication"],
        "project": ["attrs"], "title": ["Frobnication"], "version": ["stable"],
    }


def test_title_heading_and_body_matches_rank_in_that_order(server):
    # "memory": in the title of no page; in a heading of frobnication; in the body of caching.
    assert paths(search(server, "memory"))[:2] == ["guide/frobnication", "guide/caching"]
    # "caching": the title of one page ranks it first.
    assert paths(search(server, "caching"))[0] == "guide/caching"
    assert paths(search(server, "eviction"))[0] == "guide/caching"
    assert paths(search(server, "platforms"))[0] == "install"


@pytest.mark.parametrize(
    ("q", "page"),
    [
        ("widgetry.Widget.render", "api"),  # an object by its full name
        ("Widget.render()", "api"),  # by a dotted tail, called
        ("render", "api"),  # by its last name: other pages say "render" in their text
        ("WIDGETRY.RENDER_ALL()", "api"),
        ("RenderError", "api"),
        ("`Render cycle`", "glossary"),  # a glossary term
        ("transliteration", "unicode"),  # an index entry: the word is in no page's text
        ("Memory use", "guide/frobnication"),  # a section title
        ("Installation", "install"),  # a title, numbered "1. Installation" in the build
        ("render all", "api"),  # a name typed with a space for its underscore (issue 27)
        ("widgetry render all", "api"),  # ... and for its dots
        ("render error", "api"),  # a CamelCase class by its words
        ("stale-widget", "glossary"),  # a glossary term typed with a hyphen
    ],
)
def test_a_query_equal_to_a_name_finds_the_page_naming_it_first(server, q, page):
    for version in ("latest", "stable"):  # html and dirhtml builds: the same document names
        found = hits(search(server, q, version=version))
        assert found[0]["fields"]["path"] == [page]
        assert found[0]["fields"]["link"] == f"{BASE}/attrs/en/{version}/{page}"


def test_a_member_named_bare_is_first_found_on_its_shallowest_owner(server):
    """Issue 27: "invalidate" is a method of widgetry.Widget and of widgetry.cache.CachedWidget,
    whose page says the word more often; the shallower owner's page comes first, the other next."""
    assert paths(search(server, "invalidate"))[:2] == ["api", "guide/caching"]
    assert paths(search(server, "CachedWidget.invalidate"))[0] == "guide/caching"


def test_a_name_outranks_pages_that_only_mention_its_words(server):
    # "render" is an object's last name on the API page and a word of the frobnication page's text.
    plain = paths(search(server, "render"))
    assert plain[0] == "api" and "guide/frobnication" in plain[1:]
    # Two words that name nothing: ranked by BM25 alone, pages with both first.
    assert paths(search(server, "widget quux"))[0] == "guide/frobnication"


def test_pages_holding_every_word_rank_above_pages_holding_some(server):
    body = search(server, "widget quux")
    assert paths(body)[0] == "guide/frobnication"
    assert body["results"]["hits"]["total"] > 1
    scores = [hit["_score"] for hit in hits(body)]
    assert body["results"]["hits"]["max_score"] == max(scores)


def test_phrase_queries_match_the_phrase_only(server):
    assert paths(search(server, '"eviction policy"')) == ["guide/caching"]
    assert search(server, '"policy eviction"')["results"]["hits"]["total"] == 0


@pytest.mark.parametrize("q", ['"unbalanced', "a:b", "title:", "(((", "-", "*", "AND OR NOT", '""', "\\", "🎛"])
def test_query_syntax_is_read_leniently(server, q):
    response = server.get(f"/api/v2/docsearch/?project=attrs&version=latest&q={quote(q)}")
    assert response.status == 200
    assert "results" in response.json()


def test_highlights_mark_words_and_escape_page_text(server):
    body = search(server, "template script")
    content = next(h for h in hits(body) if h["fields"]["path"] == ["security"])["highlight"]["content"]
    joined = " ".join(content)
    assert "<em>template</em>" in joined
    assert "&lt;<em>script</em>&gt;" in joined
    assert "<script" not in joined and "<b>" not in joined
    assert len(content) <= 3 and all(len(fragment) < 250 for fragment in content)


def test_fragments_are_exact_windows_of_code_as_the_page_shows_it(server):
    """Pygments writes each token of a code block in a span of its own: the page's text joins
    them as the reader sees them (issue 23: ``-- broker amqp : // localhost``)."""
    content = hits(search(server, "broker"))[0]["highlight"]["content"]
    assert "worker = connect(<em>broker</em>=&quot;amqp://localhost:5672//&quot;" in content[0]


def test_a_title_is_html_as_sphinx_writes_it(server):
    """The in-page search sets the title as HTML: markup in a title is escaped, never sent raw."""
    hit = next(h for h in hits(search(server, "security notes")) if h["fields"]["path"] == ["security"])
    assert hit["fields"]["title"] == ["Security notes: &lt;img src=x onerror=alert(1)&gt; &amp; friends"]
    v1 = server.json("/api/v1/file/search/?q=friends")["objects"][0]
    assert v1["name"] == "security.html"


def test_highlights_are_right_on_non_ascii_text(server):
    content = hits(search(server, "naïve"))[0]["highlight"]["content"]
    assert any("Straße and the French word <em>naïve</em> are" in fragment for fragment in content)
    assert "<em>Übersetzung</em>" in " ".join(hits(search(server, "Übersetzung"))[0]["highlight"]["content"])


def test_a_title_only_match_shows_the_opening_text(server):
    hit = next(h for h in hits(search(server, "Internationalisation")) if h["fields"]["path"] == ["unicode"])
    assert hit["highlight"]["content"] == ["Widgetry speaks many languages. The German word Straße and the French word naïve are rendered"]


@pytest.mark.parametrize(
    ("query", "body"),
    [
        ("version=latest&q=x", {"project": ["This query param is required"]}),
        ("project=attrs&q=x", {"version": ["This query param is required"]}),
        ("project=attrs&version=latest", {"q": ["This query param is required"]}),
        ("project=attrs&version=latest&q=%20%20", {"q": ["This query param is required"]}),
        ("", {k: ["This query param is required"] for k in ("project", "version", "q")}),
    ],
)
def test_missing_parameters_are_400_one_key_each(server, query, body):
    response = server.get(f"/api/v2/docsearch/?{query}")
    assert response.status == 400
    assert response.json() == body


@pytest.mark.parametrize(
    "query",
    ["project=nope&version=latest&q=x", "project=attrs&version=9.9&q=x", "project=acme-handbook&version=latest&q=widget",
     "project=flask&version=2.4.0-rc1&q=widget"],
)
def test_unknown_or_private_project_or_version_is_404(server, query):
    response = server.get(f"/api/v2/docsearch/?{query}")
    assert response.status == 404
    assert response.json() == {"detail": "Not found."}


def test_language_is_accepted_and_ignored(server):
    plain = server.get("/api/v2/docsearch/?project=attrs&version=latest&q=widget")
    assert server.get("/api/v2/docsearch/?project=attrs&version=latest&q=widget&language=de").body == plain.body


def test_v1_file_search_shape_and_highlighting(server):
    body = server.json("/api/v1/file/search/?q=frobnicator")
    assert list(body) == ["objects"]
    first = body["objects"][0]
    assert list(first) == sorted(["id", "name", "path", "absolute_url", "project", "resource_uri", "text"])  # DECISIONS.md section 4
    assert first["path"] == "guide/frobnication.html" and first["project"]["slug"] == "attrs"
    assert '<span class="highlighted">frobnicator</span>' in first["text"]
    assert first["text"].endswith("...") or len(first["text"]) < 220
    assert server.get("/api/v1/file/search/").json() == {"error": "The 'q' parameter is required."}
    assert server.get("/api/v1/file/search/").status == 400


def test_v1_anchor_search(server):
    body = server.json("/api/v1/file/anchor/?q=EVICTION")
    assert body["objects"][:2] == [
        f"{BASE}/attrs/en/latest/guide/caching.html#eviction-policy",
        f"{BASE}/attrs/en/stable/guide/caching/#eviction-policy",
    ]
    assert server.json("/api/v1/file/anchor/?q=from-sour")["objects"][0].endswith("install.html#installing-from-source")
    assert server.get("/api/v1/file/anchor/?q=").status == 400


def test_a_long_anchor_query_is_held_to_every_character_and_costs_no_500(server):
    """The index is searched for a query's first characters and what it finds is held to the
    whole query (issue 28: 500 characters answered 500 with a traceback, 480 took 100 ms)."""
    heading = "Disclosing a vulnerability before its fix is released"
    assert server.json(f"/api/v1/file/anchor/?q={quote(heading.upper())}")["objects"] == [
        f"{BASE}/attrs/en/latest/security.html#disclosing-a-vulnerability-before-its-fix-is-released",
        f"{BASE}/attrs/en/stable/security/#disclosing-a-vulnerability-before-its-fix-is-released",
    ]
    assert server.json(f"/api/v1/file/anchor/?q={quote(heading + ' and then some')}")["objects"] == []
    for length in (480, 500, 5000):
        response = server.get(f"/api/v1/file/anchor/?q={quote(('Disclosing ' * 10_000)[:length])}")
        assert (response.status, response.json()) == (200, {"objects": []}), length
    assert not any("Traceback" in line for line in server.log)


def anchor_search(headings: list[tuple[str, str]]):
    """The anchor search of an entries index of one page whose sections are ``headings`` (anchor
    id, heading), each slot its page id."""
    import tantivy

    from docsrv.search import named_entries
    from docsrv.snapshot.records import Page, Section

    page = Page(id=7, project=1, version=1, path="p.html", title="Page", sections=tuple(Section(*pair) for pair in headings))
    index = named_entries.register_tokenizers(tantivy.Index(named_entries.build_schema()))
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    for document in named_entries.documents(page, "p/latest", 7, False):
        writer.add_json(document)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return named_entries.NamedEntries({0: index}, lambda slot: slot).anchors


def entries_of(pages, deleted_scope: str | None = None):
    """Lookups in an entries index of ``pages`` ((page, scope), in that order; each slot its page
    id), with the documents of ``deleted_scope`` deleted after the commit, as tantivy keeps them
    until a merge: counted in its statistics, found by no search."""
    import tantivy

    from docsrv.search import named_entries

    index = named_entries.register_tokenizers(tantivy.Index(named_entries.build_schema()))
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    for page, scope in pages:
        for document in named_entries.documents(page, scope, page.id, False):
            writer.add_json(document)
    writer.commit()
    writer.wait_merging_threads()
    if deleted_scope is not None:
        writer = index.writer(heap_size=15_000_000, num_threads=1)
        writer.delete_documents_by_term("scope", deleted_scope)
        writer.commit()
        writer.wait_merging_threads()
    index.reload()
    return named_entries.NamedEntries({0: index}, lambda slot: slot)


def widget_pages():
    """Three pages that name "widget": an index entry, a section, a title, in that order."""
    from docsrv.snapshot.records import INDEX_ROLE, Entry, Page, Section

    return [
        Page(id=1, project=1, version=1, path="a.html", title="Gears", entries=(Entry(INDEX_ROLE, "widget", "index-0"),)),
        Page(id=2, project=1, version=1, path="b.html", title="Parts", sections=(Section("widget", "Widget", 0),)),
        Page(id=3, project=1, version=2, path="c.html", title="Widget", sections=(Section("install-configuration", "Install configuration", 0),)),
    ]


def test_a_lookup_of_more_documents_than_it_reads_finds_the_best_ranked(monkeypatch):
    """Of more documents than a lookup reads, it reads the best ranked (a title before a section
    before an index entry), and of headings that hold a query's words, the fewest words first:
    not the first that score best by the index's statistics, which rank no name."""
    from docsrv.search import named_entries
    from docsrv.snapshot.records import Page, Section

    monkeypatch.setattr(named_entries, "LOOKUP_LIMIT", 1)
    first, second, title = widget_pages()
    wordy = Page(id=4, project=1, version=1, path="d.html", title="Guide",
                 sections=(Section("more", "Install the configuration files and much more", 0),))
    named = entries_of([(first, "p/one"), (second, "p/one"), (wordy, "p/one"), (title, "p/two")])
    assert list(named.pages_named("widget", None)) == [3]
    assert named.pages_with_heading(["install", "configuration"], None) == {3: 2 / 3}


def test_an_entries_index_with_a_versions_documents_deleted_answers_as_one_without_them():
    """Every lookup of an entries index whose documents of one version were deleted (still counted
    in its statistics until a merge) answers as an index made without them: names, headings,
    anchors, and whether a name is held at all."""
    first, second, title = widget_pages()
    patched = entries_of([(first, "p/one"), (second, "p/one"), (title, "p/two")], deleted_scope="p/two")
    fresh = entries_of([(first, "p/one"), (second, "p/one")])

    def answers(named):
        return (named.pages_named("widget", None), named.pages_with_heading(["install", "configuration"], None), named.anchors("widget"),
                named.holds_name("widget"), named.holds_name("install configuration"))

    assert answers(patched) == answers(fresh)
    found, headed, anchors, held, unheld = answers(fresh)
    assert (sorted(found), headed, anchors, held, unheld) == ([1, 2], {}, [(2, "widget")], True, False)


def test_an_anchor_query_is_found_as_one_run_of_characters_of_any_length():
    """The index finds a query by its runs of three characters, and what it finds is held to the
    query itself: runs that stand apart in a heading do not match; a query of one or two
    characters, punctuation and all, finds a heading that holds it, however short."""
    anchors = anchor_search([("abcd-xbcy", "Abcd xbcy"), ("ab", "Ab"), ("c-paren", "c(x) -> y.*"), ("naive", "Naïve Bayes")])
    assert anchors("abcy") == []  # "abc" and "bcy" are both in the first heading, apart
    assert anchors("D XBC") == [(7, "abcd-xbcy")]
    assert anchors("ab") == [(7, "ab"), (7, "abcd-xbcy")]  # the exact heading first
    assert anchors("y") == [(7, "abcd-xbcy"), (7, "c-paren"), (7, "naive")]  # shorter headings first
    assert anchors(") -> y.*") == [(7, "c-paren")] and anchors("(") == [(7, "c-paren")]
    assert anchors("ïve b") == [(7, "naive")] and anchors("ï") == [(7, "naive")]
    assert anchors("bayes naïve") == [] and anchors("zz") == []


def test_v1_anchor_search_finds_objects_and_glossary_terms(server):
    assert server.json("/api/v1/file/anchor/?q=render_all")["objects"] == [
        f"{BASE}/attrs/en/latest/api.html#widgetry.render_all",
        f"{BASE}/attrs/en/stable/api/#widgetry.render_all",
    ]
    assert server.json("/api/v1/file/anchor/?q=Render%20Cycle")["objects"] == [
        f"{BASE}/attrs/en/latest/glossary.html#term-render-cycle",
        f"{BASE}/attrs/en/stable/glossary/#term-render-cycle",
    ]
    # An index entry is no anchor to look up: its target is a bare "index-0".
    assert server.json("/api/v1/file/anchor/?q=transliteration")["objects"] == []


def test_private_pages_never_appear(server):
    for q in ("widget", "frobnicator", "eviction", "memory", "render_all", "render cycle"):
        text = server.get(f"/api/v1/file/search/?q={quote(q)}").body.decode()
        text += server.get(f"/api/v1/file/anchor/?q={quote(q)}").body.decode()
        assert "acme-handbook" not in text and "2.4.0-rc1" not in text
    files = server.get("/api/v1/file/?limit=0").body.decode()
    assert "acme-handbook" not in files and "2.4.0-rc1" not in files


def test_import_sphinx_skips_what_cannot_be_read_in_bounded_time_and_says_why(built, tmp_path):
    """An objects.inv that inflates to 100 MB (from about 100 KB), a page of 500,000 nested
    elements (lexbor is quadratic in nesting: it did not finish in two minutes) and a page of
    17 MiB are skipped and named; the rest of the build is imported (issue 28)."""
    import zlib

    snapshot, _ = built
    html = tmp_path / "html"
    shutil.copytree(snapshot.parent / "html", html)
    (html / "broken.html").unlink()
    bomb = zlib.compress(b"bomb py:function 1 api.html#$ -\n" * 3_200_000, 9)
    (html / "objects.inv").write_bytes(b"# Sphinx inventory version 2\n# Project: x\n# Version: 1\n# zlib\n" + bomb)
    (html / "deep.html").write_bytes(b"<html><body><div role='main'>" + b"<div>" * 500_000 + b"</div>" * 500_000 + b"</div></body></html>")
    (html / "huge.html").write_bytes(b"<html><body><div role='main'><p>" + b"big " * (17 << 18) + b"</p></div></body></html>")
    copy = tmp_path / "snap"
    shutil.copytree(snapshot, copy, ignore=shutil.ignore_patterns("index"))
    result = docsrv("snapshot", "import-sphinx", str(html), "--into", str(copy), "--project", "attrs", "--version", "latest")
    assert "skipped objects.inv: inflates to more than 64 MiB" in result.stderr
    assert "skipped deep.html: elements nest more than 400 deep" in result.stderr
    assert "skipped huge.html: 17 MiB of HTML, more than the 16 MiB a page may have" in result.stderr
    assert "imported 9 pages (html layout) into attrs/latest" in result.stdout and "3 unreadable" in result.stdout


def test_index_command_and_fingerprint(built, tmp_path):
    snapshot, _ = built
    copy = tmp_path / "snap"
    shutil.copytree(snapshot, copy, ignore=shutil.ignore_patterns("index"))
    out = docsrv("index", str(copy)).stdout
    assert "indexed" in out and (copy / "index" / "docsrv-index.json").exists()


def test_a_restart_with_a_current_index_serves_the_same_searches_without_page_text(built, server, tmp_path):
    from conftest import Server
    from docsrv.serve.served import load_served

    snapshot, _ = built
    queries = ["widget", "naïve", "template script", '"eviction policy"', "Internationalisation"]
    first = [search(server, q) for q in queries] + [server.json("/api/v1/file/search/?q=frobnicator")]
    copy = tmp_path / "snapshot"  # the index of a copy: the served one is the server's to hold
    shutil.copytree(snapshot, copy)
    served = load_served(copy, progress=False)
    store = served.store
    assert served.directory == copy.resolve()
    assert store.pages_ordered and not any(hasattr(page, "text") for page in store.pages_ordered)
    again = Server(["--snapshot", str(snapshot)])
    try:
        assert [search(again, q) for q in queries] + [again.json("/api/v1/file/search/?q=frobnicator")] == first
    finally:
        again.stop()


@pytest.fixture(scope="module")
def index(built):
    snapshot, _imports = built
    from docsrv.serve.served import load_served

    return load_served(snapshot, progress=False)


@pytest.mark.parametrize(
    ("q", "path"),
    [
        ("render all", "api.html"),  # render_all: a space for the underscore
        ("widgetry render all", "api.html"),  # widgetry.render_all: spaces for the dots too
        ("Render-All", "api.html"),
        ("render error", "api.html"),  # RenderError: a CamelCase class by its words
        ("stale-widget", "glossary.html"),  # the glossary term "stale widget", with a hyphen
    ],
)
def test_names_are_found_as_people_type_them_after_every_exact_name(index, q, path):
    """Issue 27: separators and CamelCase forgiven when a query is matched against the names of
    objects and glossary terms; such a match ranks after any exact one."""
    from docsrv.search.named_entries import LOOSE_RANK

    store = index.store
    forgiving = {store.pages[page].path for page, name in index.search.named.pages_named(q, None).items() if name.rank >= LOOSE_RANK}
    assert path in forgiving
    exact = index.search.named.pages_named("widgetry.render_all", None)
    assert {store.pages[page].path: name.rank < LOOSE_RANK for page, name in exact.items()}["api.html"]


def test_a_changelog_ranks_below_the_page_documenting_what_it_mentions(server):
    """Issue 27: the changelog says "entity tag" five times, the caching page once; the caching
    page documents it, so it comes first, and the changelog before pages that never say it."""
    found = paths(search(server, "entity tag"))
    assert found[:2] == ["guide/caching", "changes"]
    assert paths(search(server, "entity"))[:2] == ["guide/caching", "changes"]


@pytest.mark.parametrize("q", ["backported", "what's new", "changes in 2.1.0", "render_all 2.0.0"])
def test_a_changelog_is_found_when_it_is_the_answer(server, q):
    """The only page saying a word, or a query asking what changed (a version, "what's new")."""
    assert paths(search(server, q))[0] == "changes"


def test_the_changelog_is_recognised_by_title_and_structure():
    from docsrv.search.changelogs import asks_for_changes, is_changelog

    versions = ["Version 2.1.0", "Version 2.0.0", "Version 1.0.0"]
    assert is_changelog("Changelog", [])
    assert is_changelog("Release notes", versions) and is_changelog("What's New In Python 3.10", [])
    assert is_changelog("Widgetry history", versions) and is_changelog("Anything", ["5.3.0", "5.2.1", "Release 5.2.0"])
    assert not is_changelog("Migrations", ["Writing migrations", "Squashing"])
    assert not is_changelog("History and design", ["Origins", "Design"])
    assert not is_changelog("Caching responses", ["Eviction policy", "Cache validators", "Version 2 of the cache"])
    assert asks_for_changes("what's new in 1.4") and asks_for_changes("migrating to 2.0") and asks_for_changes("changelog")
    assert not asks_for_changes("track changes to a model") and not asks_for_changes("entity tag")


def test_a_task_phrase_finds_the_section_whose_heading_holds_its_words(server):
    """Issue 27: "rotate signing keys" is the heading "Rotating signing keys" (stemmed) of the
    security page; the frobnication page repeats "keys" and "signing" in its text and ranks first
    on word counts alone."""
    assert paths(search(server, "rotate signing keys"))[:2] == ["security", "guide/frobnication"]
    assert paths(search(server, "how to rotate the signing keys"))[0] == "security"  # stop words aside


@pytest.mark.parametrize(
    ("q", "page"),
    [
        ("**options", "api"),  # as written in the API page; "options" alone is the caching page's word
        ("->", "api"),  # named by the general index ("-> (arrow)"), and written in the API page
        ("render_all(**options)", "api"),
    ],
)
def test_a_symbol_query_finds_where_the_syntax_is(server, q, page):
    assert paths(search(server, q))[0] == page
    assert paths(search(server, "options"))[0] == "guide/caching"


def test_a_concept_ranks_first_where_the_general_index_marks_its_definition(server):
    """Issue 34: "frobnicate statement" is a sub-entry of "statement" in the general index, its
    main target (``.. index:: !``) the API page's "Colour adjustment" section, whose heading holds
    neither word; the frobnication guide uses the concept in passing, three times, and is indexed
    too, not as the main target."""
    assert paths(search(server, "frobnicate statement"))[:2] == ["api", "guide/frobnication"]


def test_a_called_name_prefers_the_callable_to_a_glossary_term(server):
    """The glossary term "widget" is a whole name, the class ``widgetry.Widget`` is found by its
    tail: the term first, unless the query calls the name."""
    assert paths(search(server, "widget"))[0] == "glossary"
    assert paths(search(server, "Widget()"))[0] == "api"


def test_a_task_phrase_finds_the_passage_that_holds_its_words_together(server):
    """Issue 34: "export colour palette" is one sentence of the installation page, under a heading
    that holds none of the words; the frobnication guide repeats "colour" and "palette" and says
    "export" once, far from them, and ranks first on word counts alone. The hit's first fragment
    is that passage, not the page's first "colour"."""
    found = search(server, "export colour palette")
    assert paths(found)[:2] == ["install", "guide/frobnication"]
    assert hits(found)[0]["highlight"]["content"][0] == (
        "other machine, then run widgetry <em>export</em> on this one: it writes the <em>colour</em> <em>palette</em> beside the "
        "widgets, and"
    )


def test_a_page_whose_section_is_about_a_querys_words_ranks_before_a_page_naming_them_in_passing(server):
    """Issue 62: "chart table": the glossary names a chart and a table in passing, in a line of a
    short page, where the API page's section on composing widgets is about drawing a chart into a
    table. A page ranks by its best section with its whole: the API page first, its fragment that
    section's sentence."""
    found = hits(search(server, "chart table"))
    assert [hit["fields"]["path"][0] for hit in found][:2] == ["api", "glossary"]
    assert found[0]["highlight"]["content"][0] == (
        "Widgets compose with an operator: <em>chart</em> |&gt; <em>table</em> draws the <em>chart</em> into the <em>table</em>."
    )


def test_a_page_holding_the_words_in_other_forms_holds_every_word(server):
    """Issue 62: "exported palettes": the installation page says "export" and "palette", in the
    section on moving a dashboard, never "exported" nor "palettes"; it holds every word of the
    query in some form and is found, after the frobnication guide, whose "Palettes" hold them, its
    fragment marking the words in the forms it holds them."""
    found = hits(search(server, "exported palettes"))
    assert [hit["fields"]["path"][0] for hit in found] == ["guide/frobnication", "install"]
    assert found[1]["highlight"]["content"][0] == (
        "other machine, then run widgetry <em>export</em> on this one: it writes the colour <em>palette</em> beside the widgets, and")


def test_a_hit_without_a_passage_has_its_highlight_start_at_its_best_section(server):
    """Issue 62: "memory" is said first in the frobnication guide's tuning section, in passing;
    its section headed "Memory use" is about it, and is where the hit's fragment starts."""
    found = hits(search(server, "memory"))
    assert found[0]["fields"]["path"] == ["guide/frobnication"]
    assert found[0]["highlight"]["content"][0] == "nest. Frobnication needs little <em>memory</em>: a widget is frobnicated in place."


def test_a_concept_ranks_first_at_the_section_that_defines_it_before_the_glossary(server):
    """Issue 34: "dirty region" is a glossary term and the heading of an API section that the
    general index also names: that section defines it, the glossary's line comes second. "stale
    widget" heads a section of the caching guide that nothing else names: the glossary's
    definition stays first there."""
    assert paths(search(server, "dirty region"))[:2] == ["api", "glossary"]
    assert paths(search(server, "stale widget"))[:2] == ["glossary", "guide/caching"]


def test_a_word_of_where_a_page_sits_counts_with_its_own(server):
    """Issue 34: "caching guide" is the caching page of the guide (``guide/caching``), whose text
    never says "guide"; the index page names both words in passing. The document name's
    words count with the page's: the guide's page first."""
    assert paths(search(server, "caching guide"))[:2] == ["guide/caching", "index"]


def test_an_operator_the_general_index_names_is_searched_as_written(server):
    """Issue 34: the general index names "|>", so the build's text is searched for it as written:
    "|>" alone finds the API page, the one page that writes it, and "chart |> table" finds it
    first, its fragment the sentence that writes it (the API's section on composing widgets)."""
    assert paths(search(server, "|>")) == ["api"]
    found = search(server, "chart |> table")["results"]["hits"]["hits"]
    assert [hit["fields"]["path"][0] for hit in found][:2] == ["api", "glossary"]
    assert found[0]["highlight"]["content"][0] == (
        "Widgets compose with an operator: <em>chart</em> |&gt; <em>table</em> draws the <em>chart</em> into the <em>table</em>."
    )
