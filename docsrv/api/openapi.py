"""The OpenAPI 3.1 document of every endpoint docsrv serves: the schemas, and the operation of
each route, which the route carries (``routes.py``) and this module assembles.

Each operation's parameters carry an ``example``; the request they make is answered, in the
bundled demo snapshot, by the response ``example`` stored in ``openapi-examples.json``. A
test replays every example against the real server, so the document cannot drift from what
is served. After a deliberate change of shape, rewrite the examples with
``python tests/record_openapi_examples.py``.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from . import v1, v2
from .params import V1_PAGING, V2_PAGING
from .schema import DATETIME, INTEGER, NULLABLE_URI, STRING, obj, ref

EXAMPLES_FILE = Path(__file__).with_name("openapi-examples.json")
#: The public URL the examples were recorded with (it shows in their next/previous links).
EXAMPLES_PUBLIC_URL = "https://api.example.org"



SCHEMAS: dict[str, dict] = {
    **{name: obj({field.name: field.schema for field in fields}) for name, fields in v2.OBJECTS.items()},
    "ActiveVersions": obj({"versions": {"type": "array", "items": ref("Version")}}),
    "Detail": obj({"detail": STRING}),
    "FieldErrors": {"type": "object", "additionalProperties": {"type": "array", "items": STRING}, "minProperties": 1},
    "Redirect": obj({"detail": STRING, "location": STRING}),
    "Health": obj({"status": STRING}),
    "Starting": obj({"status": {"type": "string", "enum": ["starting"]}, "problem": STRING}),
    "Ready": obj(
        {
            "status": {"type": "string", "enum": ["ready", "degraded"]},
            "problem": {"type": ["string", "null"]},
            "snapshot": STRING,
            "sequence": {**INTEGER, "description": "Where the snapshot stands in its origin's sequence (docsrv snapshot publish): "
                         "a base, or the product of a changeset; 0 for a snapshot never published."},
            "created_at": DATETIME,
            "age_seconds": INTEGER,
            "load_seconds": {"type": "number"},
            "counts": {"type": "object", "additionalProperties": INTEGER},
            "worker": INTEGER,
            "workers": INTEGER,
            "workers_wanted": INTEGER,
            "reloads": INTEGER,
            "reload_failures": INTEGER,
            "last_reload_error": {"type": ["string", "null"]},
            "draining_workers": {**INTEGER, "description": "Workers of an earlier snapshot still finishing their requests: "
                                 "until it is 0, a kept-alive connection may still be answered from that snapshot. Purge the "
                                 "caches in front once every replica names the new snapshot with 0 here (docsrv fleet wait)."},
            "follow_problem": {"type": ["string", "null"], "description": "Why the worker answering does not apply the "
                               "changesets after the state it serves (--watch), in one line; null while it follows. It serves "
                               "on what it has: its sequence stays behind."},
            "waiting_for": {"type": ["integer", "null"], "description": "The changeset the worker answering waits for the "
                            "pull's snapshot of (one it does not apply in memory): until the sidecar's fold takes it in, the "
                            "replica is behind; null while it is not."},
        }
    ),
}
for _resource in v1.RESOURCES.values():
    _title = f"V1{_resource.name.title()}"
    SCHEMAS[_title] = obj({f.name: f.schema for f in _resource.fields})
    SCHEMAS[f"{_title}List"] = obj(
        {
            "meta": obj(
                {
                    "limit": INTEGER,
                    "next": {"type": ["string", "null"]},
                    "offset": INTEGER,
                    "previous": {"type": ["string", "null"]},
                    "total_count": INTEGER,
                }
            ),
            "objects": {"type": "array", "items": ref(_title)},
        }
    )
_ENDPOINT = obj({"list_endpoint": STRING, "schema": STRING})
SCHEMAS["V1Root"] = obj({name: _ENDPOINT for name in v1.RESOURCES})
SCHEMAS["V1Schema"] = obj(
    {
        "allowed_detail_http_methods": {"type": "array", "items": STRING},
        "allowed_list_http_methods": {"type": "array", "items": STRING},
        "default_format": STRING,
        "default_limit": INTEGER,
        "fields": {"type": "object", "additionalProperties": {"type": "object"}},
        "filtering": {"type": "object", "additionalProperties": {"type": "array", "items": STRING}},
    }
)
SCHEMAS["V1Error"] = obj({"error": STRING})
SCHEMAS["V1FileSearchItem"] = obj({**SCHEMAS["V1File"]["properties"], "text": STRING})
SCHEMAS["V1FileSearch"] = obj({"objects": {"type": "array", "maxItems": 50, "items": ref("V1FileSearchItem")}})
SCHEMAS["V1AnchorSearch"] = obj({"objects": {"type": "array", "maxItems": 50, "items": {"type": "string", "format": "uri"}}})
_LIST_OF_STRING = {"type": "array", "items": STRING}
SCHEMAS["DocSearch"] = obj(
    {
        "results": obj(
            {
                "hits": obj(
                    {
                        "hits": {
                            "type": "array",
                            "maxItems": 50,
                            "items": obj(
                                {
                                    "_score": {"type": "number"},
                                    "fields": obj(
                                        {
                                            "link": {
                                                "type": "string", "format": "uri",
                                                "description": "The version's docs URL and the page's document name: "
                                                "the in-page search adds the builder's file suffix.",
                                            },
                                            "path": {**_LIST_OF_STRING, "description": "The page's Sphinx document name "
                                                     "(install, cli/pip_install, index), without the builder's suffix."},
                                            "project": _LIST_OF_STRING,
                                            "title": {**_LIST_OF_STRING, "description": "The page title as HTML, as Sphinx "
                                                      "writes it: &, < and > escaped."},
                                            "version": _LIST_OF_STRING,
                                        }
                                    ),
                                    "highlight": obj({"content": {
                                        "type": "array", "maxItems": 3, "items": STRING,
                                        "description": "Windows of about 100 characters of the page's text, exact (nothing "
                                        "added, dropped or re-spaced), HTML-escaped, the matched words in <em>.",
                                    }}),
                                }
                            ),
                        },
                        "max_score": {"type": "number"},
                        "total": INTEGER,
                    }
                )
            }
        )
    }
)

for _name in ("Project", "Version", "Build"):
    SCHEMAS[f"{_name}List"] = obj(
        {"count": INTEGER, "next": NULLABLE_URI, "previous": NULLABLE_URI, "results": {"type": "array", "items": ref(_name)}}
    )


def json_response(description: str, schema: dict) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


NOT_FOUND = json_response("Nothing public has that id, or the path is unknown.", ref("Detail"))
SEARCH_BUSY = json_response(
    "Too many searches are waiting in this worker; retry after the seconds in Retry-After.", ref("Detail")
)
BAD_PARAMETER = json_response("A known query parameter has a malformed value; the body names it.", ref("FieldErrors"))


def query(name: str, description: str, schema: dict | None = None, example: object = None) -> dict:
    parameter = {"name": name, "in": "query", "required": False, "description": description, "schema": schema or STRING}
    if example is not None:
        parameter["example"] = example
    return parameter


def path_id(example: int) -> dict:
    return {"name": "id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}, "example": example}


def pagination(limit_example: int | None = None, offset_example: int | None = None) -> list[dict]:
    return [
        query("limit", V2_PAGING.limit_help(), {"type": "integer", "minimum": 1, "default": V2_PAGING.default_limit}, limit_example),
        query("offset", "Index of the first item, default 0.", {"type": "integer", "minimum": 0, "default": 0}, offset_example),
    ]


def operation(summary: str, parameters: list[dict], ok: dict, *, tag: str, errors: dict | None = None) -> dict:
    """The OpenAPI operation object of a GET route."""
    return {"summary": summary, "tags": [tag], "parameters": parameters, "responses": {"200": ok, **(errors or {})}}


V1_NOT_FOUND = json_response("No public object is found there.", ref("V1Error"))
V1_BAD_PARAMETER = json_response("A malformed parameter, a filter a field does not allow, or a format other than json.", ref("V1Error"))
V1_FORMAT = query("format", "Only json is served.", {"type": "string", "enum": ["json"]})
#: For each v1 resource: its filters (with an example for the list) and an example id or name for the detail.
V1_EXAMPLES = {
    "build": ({"project__slug": "celery"}, "130"),
    "file": ({}, "5003"),
    "project": ({"slug": "flask"}, "pip"),
    "user": ({"username": "hynek"}, "davidism"),
    "version": ({"project__slug": "attrs", "active": "true"}, "14"),
}
V1_BY_NAME = {"project": "an id or a slug", "user": "an id or a username", "version": "an id (a project slug lists its versions)"}


def v1_root() -> dict:
    return operation(
        "The v1 resources, with their list and schema endpoints.", [V1_FORMAT], json_response("The root.", ref("V1Root")),
        tag="v1", errors={"400": V1_BAD_PARAMETER},
    )


def v1_list(resource: v1.Resource) -> dict:
    filters, _detail = V1_EXAMPLES[resource.name]
    names = [field if lookup == "exact" else f"{field}__{lookup}" for field, lookups in resource.filtering.items() for lookup in lookups]
    limit = query("limit", V1_PAGING.limit_help(), {"type": "integer", "minimum": 0, "default": V1_PAGING.default_limit})
    offset = query("offset", "Index of the first item, default 0.", {"type": "integer", "minimum": 0, "default": 0})
    return operation(
        f"v1 {resource.name}s (deprecated).",
        [*(query(f, f"Exact {f}.", example=filters.get(f)) for f in names), V1_FORMAT, limit, offset],
        json_response(f"A page of {resource.name}s.", ref(f"V1{resource.name.title()}List")),
        tag="v1",
        errors={"400": V1_BAD_PARAMETER},
    )


def v1_schema(resource: v1.Resource) -> dict:
    return operation(
        f"The schema of v1 {resource.name}s.", [V1_FORMAT], json_response("The schema.", ref("V1Schema")), tag="v1",
        errors={"400": V1_BAD_PARAMETER},
    )


def v1_detail(resource: v1.Resource) -> dict:
    name = resource.name
    title = f"V1{name.title()}"
    _filters, example = V1_EXAMPLES[name]
    return operation(
        f"One v1 {name}, by {V1_BY_NAME.get(name, 'id')}.",
        [{"name": "id", "in": "path", "required": True, "schema": STRING, "example": example}, V1_FORMAT],
        json_response(f"The {name}.", ref(title) if name != "version" else {"oneOf": [ref(title), ref(f"{title}List")]}),
        tag="v1",
        errors={"400": V1_BAD_PARAMETER, "404": V1_NOT_FOUND},
    )


ACTIVE = {"type": "string", "enum": ["true", "false", "True", "False", "TRUE", "FALSE", "1", "0"]}
PROJECT_LIST = operation(
    "Projects, by slug.",
    [
        query("slug", "Exact project slug.", example="pip"),
        *pagination(),
        query("page", "Page number, as the original service paged projects: 100 a page; limit and offset are then "
              "ignored, and next/previous carry page.", {"type": "integer", "minimum": 1}),
    ],
    json_response("A page of projects.", ref("ProjectList")),
    tag="v2",
    errors={"400": BAD_PARAMETER, "404": json_response("A page that is not a positive integer, or past the last page.", ref("Detail"))},
)
PROJECT_DETAIL = operation(
    "One project.", [path_id(1)], json_response("The project.", ref("Project")), tag="v2", errors={"404": NOT_FOUND}
)
ACTIVE_VERSIONS = operation(
    "The active versions of a project, in version-list order (not paginated).",
    [path_id(5)],
    json_response("The active versions.", ref("ActiveVersions")),
    tag="v2",
    errors={"404": NOT_FOUND},
)
VERSION_LIST = operation(
    "Versions, by verbose_name descending, then id.",
    [
        query("project__slug", "Exact slug of the versions' project.", example="requests"),
        query("active", "true/false/1/0, any case.", ACTIVE, example="true"),
        *pagination(2, 1),
    ],
    json_response("A page of versions.", ref("VersionList")),
    tag="v2",
    errors={"400": BAD_PARAMETER},
)
VERSION_DETAIL = operation(
    "One version.", [path_id(2)], json_response("The version.", ref("Version")), tag="v2", errors={"404": NOT_FOUND}
)
BUILD_LIST = operation(
    "Builds, most recent first.",
    [
        query("project__slug", "Exact slug of the builds' project.", example="attrs"),
        query("commit", "Exact version-control identifier."),
        *pagination(1),
    ],
    json_response("A page of builds.", ref("BuildList")),
    tag="v2",
    errors={"400": BAD_PARAMETER},
)
BUILD_DETAIL = operation(
    "One build, with its commands.", [path_id(101)], json_response("The build.", ref("Build")), tag="v2", errors={"404": NOT_FOUND}
)
DOCSEARCH = operation(
    "Search the pages of one version of a project.",
    [
        {**query("project", "Project slug.", example="requests"), "required": True},
        {**query("version", "Version slug.", example="latest"), "required": True},
        {**query("q", 'Words and "quoted phrases"; pages holding every word rank first.', example="session pooling"), "required": True},
        query("language", "Accepted and ignored."),
    ],
    json_response("At most 50 hits, best first.", ref("DocSearch")),
    tag="search",
    errors={"400": BAD_PARAMETER, "404": NOT_FOUND, "503": SEARCH_BUSY},
)
FILE_SEARCH = operation(
    "Search every public page (v1).",
    [{**query("q", "The search term.", example="timeouts"), "required": True}],
    json_response("At most 50 files, best first, each with a highlighted text snippet.", ref("V1FileSearch")),
    tag="search",
    errors={"400": V1_BAD_PARAMETER, "503": SEARCH_BUSY},
)
ANCHOR_SEARCH = operation(
    "Sections whose heading or anchor id contains the term (v1).",
    [{**query("q", "The search term.", example="config"), "required": True}],
    json_response("At most 50 page URLs with their anchors, best first.", ref("V1AnchorSearch")),
    tag="search",
    errors={"400": V1_BAD_PARAMETER, "503": SEARCH_BUSY},
)
HEALTHZ = operation("Liveness.", [], json_response("The process answers.", ref("Health")), tag="operations")
READYZ = operation(
    "Readiness: the snapshot being served, and how reloads went.",
    [],
    json_response("A snapshot is loaded.", ref("Ready")),
    tag="operations",
    errors={"503": json_response(
        "The snapshot's files changed on disk under the server, and it is being reloaded (Ready); or no worker serves yet, "
        "while the first snapshot loads or every worker is being replaced, and the master answers (Starting).",
        {"oneOf": [ref("Ready"), ref("Starting")]},
    )},
)
METRICS = {
    "summary": "Prometheus metrics of every worker: requests, latency, snapshot, reloads.",
    "tags": ["operations"],
    "parameters": [],
    "responses": {"200": {"description": "Prometheus text format 0.0.4.", "content": {"text/plain": {"schema": STRING}}}},
}
DOCUMENT = operation("This document.", [], json_response("The OpenAPI document.", {"type": "object"}), tag="operations")

#: Operations whose responses change from moment to moment, so they have no example.
LIVE = {"/healthz", "/readyz", "/metrics", "/openapi.json"}


def build_document(operations: dict[str, dict]) -> bytes:
    """The document of the routes whose operations, by template, are ``operations``."""
    examples = orjson.loads(EXAMPLES_FILE.read_bytes()) if EXAMPLES_FILE.exists() else {}
    paths = orjson.loads(orjson.dumps({template: {"get": operation} for template, operation in operations.items()}))
    for template, example in examples.items():
        paths[template]["get"]["responses"]["200"]["content"]["application/json"]["example"] = example
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "docsrv: documentation-hosting API (read replica)",
            "version": "2",
            "description": "The read-only JSON API of a documentation-hosting service, served from a snapshot. "
            "Every response is JSON; every 200 carries ETag, Last-Modified, Cache-Control, Surrogate-Key and Cache-Tag. "
            "Surrogate-Key (space separated) and Cache-Tag (comma separated) name the same purge keys: the API (v1, v2, "
            "search, openapi); each object shown (project-<slug>, version-<project>-<version>, build-<id>, file-<id>, "
            "user-<id>); on a list page, the list: list-<api>-<resource> and its filters without paging, e.g. "
            "list-v2-version-project-pip-active-true (a value other than letters, digits, '.', '_' and '-' stands as ~ and a "
            "BLAKE2b digest); and on a page whose keys would pass 8 KB, big-<list key>, with projects named instead of finer "
            "objects. `docsrv snapshot diff OLD NEW` prints the keys of every reply two snapshots answer differently. "
            "CORS: a request whose Origin is a docs origin (http or https, the docs host, a subdomain of it, or a project's "
            "canonical host, any port) gets Access-Control-Allow-Origin: <that origin> and Access-Control-Allow-Credentials: "
            "true, as the original's in-page search needs (it sends credentials); any other gets Access-Control-Allow-Origin: *. "
            "Every response carries Vary: Origin (and Accept-Encoding for a 200). "
            "Unknown query parameters are ignored (and left out of links). On every API path: a Host header the server "
            "may not name (when it has no public URL) gets 400 {\"detail\": \"Invalid Host header.\"}; an HTTP version "
            "other than 1.0 and 1.1 gets 505; a record whose file changed on disk under the server gets 503. While no worker "
            "serves (the first snapshot loading), /healthz answers 200 and every other path 503 "
            "{\"detail\": \"Not ready: ...\"} with Retry-After.",
        },
        "paths": paths,
        "components": {"schemas": SCHEMAS},
    }
    return orjson.dumps(document)

