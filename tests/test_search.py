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


def test_import_reports_layout_pages_and_skipped_files(built):
    _, imports = built
    assert "imported 6 pages (html layout) into attrs/latest, replacing 0; skipped 1" in imports["html"].stdout
    assert "skipped broken.html:" in imports["html"].stderr
    assert "imported 6 pages (dirhtml layout) into attrs/stable, replacing 0; skipped 0" in imports["dirhtml"].stdout


def test_reimport_replaces_the_versions_pages(built, tmp_path):
    snapshot, _ = built
    copy = tmp_path / "snap"
    shutil.copytree(snapshot, copy, ignore=shutil.ignore_patterns("index"))
    html = snapshot.parent / "html"
    again = docsrv("snapshot", "import-sphinx", str(html), "--into", str(copy), "--project", "attrs", "--version", "latest")
    assert "imported 6 pages (html layout) into attrs/latest, replacing 6" in again.stdout
    assert "snapshot demo is good" in docsrv("snapshot", "validate", str(copy)).stdout


def test_pages_keep_main_content_only(server):
    page = next(o for o in server.json("/api/v1/file/?limit=0")["objects"] if o["absolute_url"].endswith("attrs/en/latest/security.html"))
    text = server.json("/api/v1/file/search/?q=vulnerability")
    assert any(o["id"] == page["id"] for o in text["objects"])
    assert search(server, "trackingPixel")["results"]["hits"]["total"] == 0  # scripts are not content
    assert search(server, "Navigation")["results"]["hits"]["total"] == 0  # nor is the sidebar
    assert "¶" not in server.get("/api/v2/docsearch/?project=attrs&version=latest&q=security").body.decode()


def test_both_layouts_map_paths_to_urls(server):
    html = search(server, "frobnicator", version="latest")
    assert paths(html)[0] == "guide/frobnication.html"
    assert hits(html)[0]["fields"]["link"] == f"{BASE}/attrs/en/latest/guide/frobnication.html"
    dirhtml = search(server, "frobnicator", version="stable")
    assert paths(dirhtml)[0] == "guide/frobnication/"
    assert hits(dirhtml)[0]["fields"]["link"] == f"{BASE}/attrs/en/stable/guide/frobnication/"
    assert hits(dirhtml)[0]["fields"] | {} == {
        "link": f"{BASE}/attrs/en/stable/guide/frobnication/", "path": ["guide/frobnication/"],
        "project": ["attrs"], "title": ["Frobnication"], "version": ["stable"],
    }


def test_title_heading_and_body_matches_rank_in_that_order(server):
    # "memory": in the title of no page; in a heading of frobnication; in the body of caching.
    assert paths(search(server, "memory"))[:2] == ["guide/frobnication.html", "guide/caching.html"]
    # "caching": the title of one page ranks it first.
    assert paths(search(server, "caching"))[0] == "guide/caching.html"
    assert paths(search(server, "eviction"))[0] == "guide/caching.html"
    assert paths(search(server, "platforms"))[0] == "install.html"


def test_pages_holding_every_word_rank_above_pages_holding_some(server):
    body = search(server, "widget quux")
    assert paths(body)[0] == "guide/frobnication.html"
    assert body["results"]["hits"]["total"] > 1
    scores = [hit["_score"] for hit in hits(body)]
    assert body["results"]["hits"]["max_score"] == max(scores)


def test_phrase_queries_match_the_phrase_only(server):
    assert paths(search(server, '"eviction policy"')) == ["guide/caching.html"]
    assert search(server, '"policy eviction"')["results"]["hits"]["total"] == 0


@pytest.mark.parametrize("q", ['"unbalanced', "a:b", "title:", "(((", "-", "*", "AND OR NOT", '""', "\\", "🎛"])
def test_query_syntax_is_read_leniently(server, q):
    response = server.get(f"/api/v2/docsearch/?project=attrs&version=latest&q={quote(q)}")
    assert response.status == 200
    assert "results" in response.json()


def test_highlights_mark_words_and_escape_page_text(server):
    body = search(server, "template script")
    content = next(h for h in hits(body) if h["fields"]["path"] == ["security.html"])["highlight"]["content"]
    joined = " ".join(content)
    assert "<em>template</em>" in joined
    assert "&lt;<em>script</em>&gt;" in joined
    assert "<script" not in joined and "<b>" not in joined
    assert len(content) <= 3 and all(len(fragment) < 250 for fragment in content)


def test_highlights_are_right_on_non_ascii_text(server):
    content = hits(search(server, "naïve"))[0]["highlight"]["content"]
    assert any("Straße and the French word <em>naïve</em> are" in fragment for fragment in content)
    assert "<em>Übersetzung</em>" in " ".join(hits(search(server, "Übersetzung"))[0]["highlight"]["content"])


def test_a_title_only_match_shows_the_opening_text(server):
    hit = next(h for h in hits(search(server, "Internationalisation")) if h["fields"]["path"] == ["unicode.html"])
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


def test_private_pages_never_appear(server):
    for q in ("widget", "frobnicator", "eviction", "memory"):
        text = server.get(f"/api/v1/file/search/?q={q}").body.decode()
        text += server.get(f"/api/v1/file/anchor/?q={q}").body.decode()
        assert "acme-handbook" not in text and "2.4.0-rc1" not in text
    files = server.get("/api/v1/file/?limit=0").body.decode()
    assert "acme-handbook" not in files and "2.4.0-rc1" not in files


def test_index_command_and_fingerprint(built, tmp_path):
    snapshot, _ = built
    copy = tmp_path / "snap"
    shutil.copytree(snapshot, copy, ignore=shutil.ignore_patterns("index"))
    out = docsrv("index", str(copy)).stdout
    assert "indexed" in out and (copy / "index" / "docsrv-index.json").exists()


def test_a_restart_with_a_current_index_serves_the_same_searches_without_page_text(built, server):
    from conftest import Server
    from docsrv.serving import load_served

    snapshot, _ = built
    queries = ["widget", "naïve", "template script", '"eviction policy"', "Internationalisation"]
    first = [search(server, q) for q in queries] + [server.json("/api/v1/file/search/?q=frobnicator")]
    served = load_served(snapshot, progress=False)
    store = served.store
    assert served.directory == snapshot.resolve()
    assert store.pages_ordered and not any(hasattr(page, "text") for page in store.pages_ordered)
    again = Server(["--snapshot", str(snapshot)])
    try:
        assert [search(again, q) for q in queries] + [again.json("/api/v1/file/search/?q=frobnicator")] == first
    finally:
        again.stop()
