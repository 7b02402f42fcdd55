"""Every route docsrv serves: its path, its handler and its documentation, in one list.

A route reads the query parameters its documentation lists (every other one is dropped before its
handler sees the request, and is no part of the reply's cache key: DECISIONS.md section 1), unless
it says otherwise; /openapi.json is assembled from the same list.
"""

from __future__ import annotations

from functools import cache

from ..http.reply import Reply
from . import docsearch, openapi, ops, v1, v2
from .openapi import v1_detail, v1_list, v1_schema
from .request import ApiRequest
from .routing import Route, params, route
from .state import ApiState


async def openapi_document(request: ApiRequest, state: ApiState) -> Reply:
    return state.ok(document(), ["openapi"])


@cache
def document() -> bytes:
    return openapi.build_document({r.template: r.doc for r in ROUTES})


ROUTES: tuple[Route, ...] = (
    route("/api/v2/project/", v2.project_list, openapi.PROJECT_LIST),
    route("/api/v2/project/{id}/", v2.project_detail, openapi.PROJECT_DETAIL),
    route("/api/v2/project/{id}/active_versions/", v2.active_versions, openapi.ACTIVE_VERSIONS),
    route("/api/v2/version/", v2.version_list, openapi.VERSION_LIST),
    route("/api/v2/version/{id}/", v2.version_detail, openapi.VERSION_DETAIL),
    route("/api/v2/build/", v2.build_list, openapi.BUILD_LIST),
    route("/api/v2/build/{id}/", v2.build_detail, openapi.BUILD_DETAIL),
    # ``language`` is documented (the original takes it) but changes nothing, so it is no part of the key.
    route("/api/v2/docsearch/", docsearch.docsearch, openapi.DOCSEARCH, accepts=params("project", "version", "q")),
    route("/api/v1/file/search/", docsearch.file_search, openapi.FILE_SEARCH),
    route("/api/v1/file/anchor/", docsearch.anchor_search, openapi.ANCHOR_SEARCH),
    route("/api/v1/", v1.root, openapi.v1_root()),
    # v1 lists read every parameter naming a field: a filter, or an error for a field that allows none.
    route("/api/v1/build/", v1.build_list, v1_list(v1.BUILD), accepts=v1.BUILD.accepts),
    route("/api/v1/build/schema/", v1.schema_handler(v1.BUILD), v1_schema(v1.BUILD)),
    route("/api/v1/build/{id}/", v1.build_detail, v1_detail(v1.BUILD)),
    route("/api/v1/file/", v1.file_list, v1_list(v1.FILE), accepts=v1.FILE.accepts),
    route("/api/v1/file/schema/", v1.schema_handler(v1.FILE), v1_schema(v1.FILE)),
    route("/api/v1/file/{id}/", v1.file_detail, v1_detail(v1.FILE)),
    route("/api/v1/project/", v1.project_list, v1_list(v1.PROJECT), accepts=v1.PROJECT.accepts),
    route("/api/v1/project/schema/", v1.schema_handler(v1.PROJECT), v1_schema(v1.PROJECT)),
    route("/api/v1/project/{id}/", v1.project_detail, v1_detail(v1.PROJECT)),
    route("/api/v1/project/{id}", v1.project_detail, v1_detail(v1.PROJECT)),
    route("/api/v1/user/", v1.user_list, v1_list(v1.USER), accepts=v1.USER.accepts),
    route("/api/v1/user/schema/", v1.schema_handler(v1.USER), v1_schema(v1.USER)),
    route("/api/v1/user/{id}/", v1.user_detail, v1_detail(v1.USER)),
    route("/api/v1/version/", v1.version_list, v1_list(v1.VERSION), accepts=v1.VERSION.accepts),
    route("/api/v1/version/schema/", v1.schema_handler(v1.VERSION), v1_schema(v1.VERSION)),
    # A project slug in place of the id lists that project's versions, filtered as the list is.
    route("/api/v1/version/{id}/", v1.version_detail, v1_detail(v1.VERSION), accepts=v1.VERSION.accepts),
    route("/api/v1/version/{id}", v1.version_detail, v1_detail(v1.VERSION), accepts=v1.VERSION.accepts),
    route("/healthz", ops.healthz, openapi.HEALTHZ, checks_host=False),
    route("/readyz", ops.readyz, openapi.READYZ, checks_host=False),
    route("/metrics", ops.metrics, openapi.METRICS, checks_host=False),
    route("/openapi.json", openapi_document, openapi.DOCUMENT),
)
