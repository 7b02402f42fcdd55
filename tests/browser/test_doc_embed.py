"""The original's own in-page search, in a real browser, against docsrv (``make test-browser``).

Every docs site the original service hosted carried its ``doc-embed`` bundle: it replaces
Sphinx's ``Search.query`` with a credentialed request to ``{api_host}/api/v2/docsearch/`` and
renders the hits, falling back to Sphinx's own index without a word on any failure. Here a small
Sphinx site (a Sphinx that bundles jQuery, as the original's builds had) is built with
READTHEDOCS_DATA and the bundle (kept verbatim: ``PROVENANCE.md``) in every page, imported into a
snapshot, and served from one loopback origin with its own search index emptied (so only the
API can list results); docsrv serves the API from another. Debian's Chromium runs each search
page and the test reads what the reader sees.
"""

from __future__ import annotations

import hashlib
import html
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest

from chromium import chromium
from conftest import DEMO, ROOT, Server

pytestmark = pytest.mark.browser

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "readthedocs-doc-embed.js"
BUNDLE_SHA256 = "bc8e5c4851ba1e196621b08c3509285a28a983ab5bd4146e6b912f88d798fa0c"
SPHINX_BUILD = Path(os.environ.get("DOCSRV_TEST_SPHINX_BUILD", ROOT / ".venv-sphinx" / "bin" / "sphinx-build"))
PROJECT, VERSION = "pip", "stable"
#: What the site's searchindex.js becomes: an index that loads and finds nothing.
EMPTY_INDEX = ('Search.setIndex({"docnames": [], "envversion": {}, "filenames": [], "objects": {}, "objnames": {}, '
               '"objtypes": {}, "terms": {}, "titles": [], "titleterms": {}})')
QUERIES = ["installation", "broker", "escaping titles", "wheels"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_bundle_is_the_original_s_verbatim():
    assert hashlib.sha256(BUNDLE.read_bytes()).hexdigest() == BUNDLE_SHA256


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    """The site built and served on one origin, docsrv on another, and what each serves."""
    assert SPHINX_BUILD.exists(), f"{SPHINX_BUILD}: no Sphinx for the site (`make test-browser` makes it)"
    root = tmp_path_factory.mktemp("browser")
    api_port, site_port = free_port(), free_port()
    api, site = f"http://localhost:{api_port}", f"http://127.0.0.1:{site_port}"
    source = root / "source"
    shutil.copytree(HERE / "site", source)
    (source / "_static").mkdir()
    shutil.copyfile(BUNDLE, source / "_static" / BUNDLE.name)
    env = {**os.environ, "RTD_PROJECT": PROJECT, "RTD_VERSION": VERSION, "RTD_API_HOST": api}
    subprocess.run([str(SPHINX_BUILD), "-q", "-b", "html", str(source), str(root / "html")], check=True, env=env, timeout=300)

    snapshot = root / "snapshot"
    shutil.copytree(DEMO, snapshot, ignore=shutil.ignore_patterns("index"))
    manifest = json.loads((snapshot / "manifest.json").read_text())
    (snapshot / "manifest.json").write_text(json.dumps({**manifest, "public_url": site}))  # the docs are on the site's origin
    imported = subprocess.run([sys.executable, "-m", "docsrv", "snapshot", "import-sphinx", str(root / "html"), "--into", str(snapshot),
                               "--project", PROJECT, "--version", VERSION], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert imported.returncode == 0, imported.stderr

    docs = root / "www" / "projects" / PROJECT / "en" / VERSION
    shutil.copytree(root / "html", docs)
    (docs / "searchindex.js").write_text(EMPTY_INDEX)
    static = subprocess.Popen([sys.executable, "-m", "http.server", str(site_port), "--bind", "127.0.0.1", "--directory", str(root / "www")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Server(["--snapshot", str(snapshot), "--workers", "1"], port=api_port)
    try:
        yield SimpleNamespace(api=server, site=site, search_page=f"{site}/projects/{PROJECT}/en/{VERSION}/search.html")
    finally:
        server.stop()
        static.terminate()
        static.wait(timeout=30)


def api_hits(server: Server, q: str) -> list[dict]:
    body = server.json(f"/api/v2/docsearch/?project={PROJECT}&version={VERSION}&q={quote(q)}")
    return body["results"]["hits"]["hits"]


def status_of(url: str) -> int:
    parts = url.split("/", 3)
    host, port = parts[2].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", "/" + parts[3])
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


SHOWN = """JSON.stringify([...document.querySelectorAll('ul.search li > a')].map(
    a => ({href: a.href, text: a.textContent, html: a.innerHTML})))"""
DONE = """document.readyState === 'complete' && (document.querySelectorAll('ul.search li > a').length > 0
    || /did not match any/.test(document.body.innerText))"""


def cors_refusals(events: list[dict]) -> list[str]:
    """What the browser said about refused cross-origin reads: console and log lines, failed loads."""
    found = []
    for event in events:
        params = event.get("params", {})
        if event["method"] == "Log.entryAdded":
            found.append(params["entry"].get("text", ""))
        elif event["method"] == "Runtime.consoleAPICalled":
            found.append(" ".join(str(arg.get("value", "")) for arg in params.get("args", [])))
        elif event["method"] == "Network.loadingFailed" and params.get("corsErrorStatus"):
            found.append(f"CORS error {params['corsErrorStatus']}")
    return [text for text in found if "CORS" in text or "Access-Control-Allow" in text]


@pytest.mark.parametrize("q", QUERIES)
async def test_the_original_s_search_lists_docsrv_s_hits(sites, q):
    expected = api_hits(sites.api, q)
    assert expected, f"docsrv finds nothing for {q!r}: the test would prove nothing"
    async with chromium() as page:
        await page.send("Page.navigate", url=f"{sites.search_page}?q={quote(q)}")
        await page.wait_for(DONE)
        shown = json.loads(await page.evaluate(SHOWN))
        assert cors_refusals(page.events) == []
        assert await page.evaluate("window.pwned") is None  # no markup of a title ran
    # Every hit is listed (the bundle runs the search once per Search.init: the list may repeat).
    links = list(dict.fromkeys(item["href"] for item in shown))
    assert links == [hit["fields"]["link"] + ".html?highlight=" + quote(q, safe="!~*'()") for hit in expected]
    titles = {item["href"]: item["text"] for item in shown}
    assert [titles[link] for link in links] == [html.unescape(hit["fields"]["title"][0]) for hit in expected]
    for link in links:  # each opens a page of the site
        assert link.startswith(sites.site + "/projects/") and status_of(link) == 200, link


async def test_a_title_holding_markup_is_shown_as_text_and_does_not_run(sites):
    async with chromium() as page:
        await page.send("Page.navigate", url=f"{sites.search_page}?q=escaping")
        await page.wait_for(DONE)
        shown = json.loads(await page.evaluate(SHOWN))
        assert await page.evaluate("window.pwned") is None
    marked = next(item for item in shown if item["href"].split("?")[0].endswith("/markup.html"))
    assert marked["text"] == "Escaping <img src=x onerror=window.pwned=1> in titles"
    assert "<img" not in marked["html"]
