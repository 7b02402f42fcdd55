"""The search endpoints: v2 doc search (spec 2.6) and v1 file and anchor search (DECISIONS 3, 4).

A search and its highlighting run in the search thread, in turn, through the worker's bounded
search queue (``admission.py``), so that a slow query does not hold up the event loop.
"""

from __future__ import annotations

import html

from ..edge.keys import V1_ANCHOR_SEARCH, V1_FILE_SEARCH, V2_DOCSEARCH, page_keys, version_slug_keys
from ..http.reply import Reply
from ..search.index_files import version_scope
from ..search.query import Scope
from ..snapshot.records import Project
from .errors import ApiError
from .params import last
from .request import ApiRequest
from .state import V1_JSON, ApiState
from .v1 import FILE, V1Serializer
from .v1 import error as v1_error
from .v2 import NOT_FOUND

HIGHLIGHT_FRAGMENTS = 3
HIGHLIGHT_WIDTH = 100
V1_SNIPPET_WIDTH = 200


async def docsearch(request: ApiRequest, state: ApiState) -> Reply:
    query = request.query
    values = {name: (last(query, name) or "").strip() for name in ("project", "version", "q")}
    missing = {name: ["This query param is required"] for name, value in values.items() if not value}
    if missing:
        raise ApiError(400, missing)
    store = state.store
    version = values["version"]
    project = store.project_by_slug.get(values["project"])
    if project is None or store.version_of(project.id, version) is None:
        raise ApiError(404, NOT_FOUND)
    # The project and its public subprojects that have the same version (DECISIONS.md section 3).
    searched = [project, *(child for child in store.subprojects.get(project.id, ()) if store.version_of(child.id, version) is not None)]
    body = await state.searches.run(request, docsearch_body, state, searched, version, values["q"])
    list_key = V2_DOCSEARCH.key({"project": project.slug, "version": version})
    keys = ["search", "v2", list_key, *(key for p in searched for key in version_slug_keys(p, version))]
    return state.ok(body, keys, list_key=list_key)


def docsearch_body(state: ApiState, searched: list[Project], version: str, q: str) -> dict:
    """The search and its highlighting, done together off the event loop. A hit is shaped for the
    original's in-page search (DECISIONS.md section 3): ``path`` the page's Sphinx document name,
    ``link`` the version's docs URL and that name (the client adds the builder's suffix), and
    ``title`` HTML as Sphinx writes it (the client sets it as HTML)."""
    store = state.store
    scopes = [Scope(version_scope(p.slug, version), held.id) for p in searched if (held := store.version_of(p.id, version)) is not None]
    found = state.search.search_pages(q, scopes=scopes)
    highlights = state.search.highlights
    bases = {p.id: store.version_url(p, version) for p in searched}  # every hit is a page of one of these
    hits = []
    for hit in found.hits:
        page = store.pages[hit.page_id]
        owner = store.projects[page.project]
        document = page.document_name
        marked = highlights.fragments(
            hit.slot, found.words, count=HIGHLIGHT_FRAGMENTS, width=HIGHLIGHT_WIDTH, open_tag=b"<em>", close_tag=b"</em>", ellipsis=False,
            passage=hit.passage,
        )
        hits.append(
            {
                "_score": hit.score,
                "fields": {
                    "link": bases[owner.id] + document,
                    "path": [document],
                    "project": [owner.slug],
                    "title": [html.escape(page.title, quote=False)],
                    "version": [version],
                },
                "highlight": {"content": marked or [highlights.opening(hit.slot, HIGHLIGHT_WIDTH)]},
            }
        )
    max_score = max((hit.score for hit in found.hits), default=0.0)
    return {"results": {"hits": {"hits": hits, "max_score": max_score, "total": found.total}}}


def v1_query(request: ApiRequest) -> str:
    q = (last(request.query, "q") or "").strip()
    if not q:
        raise v1_error("The 'q' parameter is required.")
    return q


async def file_search(request: ApiRequest, state: ApiState) -> Reply:
    objects, keys = await state.searches.run(request, file_search_body, state, v1_query(request))
    return state.ok({"objects": objects}, ["search", "v1", V1_FILE_SEARCH.key({}), *keys], V1_JSON, V1_FILE_SEARCH.key({}))


def file_search_body(state: ApiState, q: str) -> tuple[list[dict], list[str]]:
    store = state.store
    found = state.search.search_pages(q)
    highlights = state.search.highlights
    serializer = state.serializer(V1Serializer)
    objects: list[dict] = []
    keys: list[str] = []
    for hit in found.hits:
        page = store.pages[hit.page_id]
        snippet = highlights.fragments(
            hit.slot, found.words, count=1, width=V1_SNIPPET_WIDTH, open_tag=b'<span class="highlighted">', close_tag=b"</span>",
            ellipsis=True, passage=hit.passage,
        )
        objects.append({**FILE.render(serializer, page), "text": snippet[0] if snippet else highlights.opening(hit.slot, V1_SNIPPET_WIDTH)})
        keys.extend(page_keys(store, page))
    return objects, keys


async def anchor_search(request: ApiRequest, state: ApiState) -> Reply:
    q = v1_query(request)
    store = state.store
    found = await state.searches.run(request, state.search.search_anchors, q)
    keys = ["search", "v1", V1_ANCHOR_SEARCH.key({})]
    urls = []
    for page_id, anchor in found:
        page = store.pages[page_id]
        urls.append(f"{store.page_url(page)}#{anchor}")
        keys.extend(page_keys(store, page))
    return state.ok({"objects": urls}, keys, V1_JSON, V1_ANCHOR_SEARCH.key({}))
