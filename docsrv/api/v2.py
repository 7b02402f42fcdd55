"""The v2 API (spec 4.1, DECISIONS.md sections 1 and 2): projects, versions and builds."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, get_args

import orjson

from ..edge.keys import V2_BUILDS, V2_PROJECTS, V2_VERSIONS, build_keys, project_keys, version_keys
from ..http.reply import Reply
from ..snapshot.records import Build, BuildCommand, BuildState, BuildType, Project, Version, VersionType
from ..store.loaded import Store
from .errors import ApiError
from .fields import EmbeddedProjects, Field, attribute, moment, render
from .lists import V2_LIST, listed
from .params import V2_PAGING, boolean, by_id, last, page_link, page_number_link, parse_page, positive_id
from .request import ApiRequest
from .schema import BOOLEAN, DATETIME, INTEGER, STRING, URI, enum, ref
from .state import ApiState

T = TypeVar("T")
NOT_FOUND = {"detail": "Not found."}
#: Projects a page when the project list is paged by number, as the original paged it.
PROJECTS_PER_PAGE = 100
DOWNLOAD_FORMATS = ("pdf", "htmlzip", "epub")


def bad_param(name: str, message: str) -> ApiError:
    return ApiError(400, {name: [message]})


class V2Serializer:
    """The v2 representations, from the tables below.

    A project is embedded in every version, so its encoding is made once and spliced in.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.download_host = store.public_url.split("://", 1)[1]
        self._projects = EmbeddedProjects(PROJECT_FIELDS, orjson.OPT_UTC_Z)

    def project(self, project: Project) -> orjson.Fragment:
        return self._projects.get(self, project)

    def version(self, version: Version) -> dict[str, Any]:
        return render(VERSION_FIELDS, self, version)

    def build(self, build: Build) -> dict[str, Any]:
        return render(BUILD_FIELDS, self, build)

    def command(self, command: BuildCommand) -> dict[str, Any]:
        return render(COMMAND_FIELDS, self, command)

    def docs_url(self, build: Build) -> str:
        return self.store.version_url(self.store.projects[build.project], self.store.versions[build.version].slug)

    def downloads(self, version: Version) -> dict[str, str]:
        """The formats that exist for a version, each ``//<host>/projects/<project>/downloads/<format>/<version>/``."""
        slug = self.store.projects[version.project].slug
        return {
            kind: f"//{self.download_host}/projects/{slug}/downloads/{kind}/{version.slug}/"
            for kind in DOWNLOAD_FORMATS
            if kind in version.downloads
        }


def plain(name: str, schema: dict[str, Any]) -> Field:
    return Field(name, schema, attribute(name))


def when(name: str) -> Field:
    return Field(name, DATETIME, moment(name))


# The fields of each object, in the order of the original service's serializers (DECISIONS.md
# section 2): the same table renders the objects and writes their schemas in /openapi.json.
PROJECT_FIELDS = (
    plain("id", INTEGER), plain("name", STRING), plain("slug", STRING), plain("description", STRING), plain("language", STRING),
    plain("programming_language", STRING), plain("repo", STRING), plain("repo_type", STRING), plain("default_version", STRING),
    plain("default_branch", STRING), plain("documentation_type", STRING),
    Field("users", {"type": "array", "items": INTEGER}, lambda serializer, p: list(p.users)),
    Field("canonical_url", URI, lambda serializer, p: serializer.store.version_url(p, p.default_version)),
)
VERSION_FIELDS = (
    plain("id", INTEGER),
    Field("project", ref("Project"), lambda serializer, v: serializer.project(serializer.store.projects[v.project])),
    plain("slug", STRING), plain("identifier", STRING), plain("verbose_name", STRING), plain("active", BOOLEAN),
    plain("built", BOOLEAN),
    Field("downloads", {"type": "object", "properties": {k: STRING for k in DOWNLOAD_FORMATS}, "additionalProperties": False},
          lambda serializer, v: serializer.downloads(v)),
    plain("type", enum(get_args(VersionType))),
)
COMMAND_FIELDS = (
    plain("id", INTEGER),
    Field("run_time", INTEGER, lambda serializer, c: int((c.end_time - c.start_time).total_seconds())),
    plain("command", STRING), plain("description", STRING), plain("output", STRING), plain("exit_code", INTEGER),
    when("start_time"), when("end_time"), plain("build", INTEGER),
)
BUILD_FIELDS = (
    plain("id", INTEGER),
    Field("commands", {"type": "array", "items": ref("BuildCommand")},
          lambda serializer, b: [serializer.command(c) for c in serializer.store.commands_of(b)]),
    Field("project_slug", STRING, lambda serializer, b: serializer.store.projects[b.project].slug),
    Field("version_slug", STRING, lambda serializer, b: serializer.store.versions[b.version].slug),
    Field("docs_url", URI, lambda serializer, b: serializer.docs_url(b)),
    plain("type", enum(get_args(BuildType))), plain("state", enum(get_args(BuildState))), when("date"),
    plain("success", BOOLEAN), plain("error", STRING), plain("commit", STRING), plain("length", INTEGER),
    plain("project", INTEGER), plain("version", INTEGER),
)
#: Every v2 object by its name in the OpenAPI document.
OBJECTS = {"Project": PROJECT_FIELDS, "Version": VERSION_FIELDS, "BuildCommand": COMMAND_FIELDS, "Build": BUILD_FIELDS}


async def paginated(
    request: ApiRequest, state: ApiState, items: Sequence[T], render: Callable[[T], Any], keys_of: Callable[[T], Iterable[str]],
    list_key: str,
) -> Reply:
    """One page of ``items`` in the v2 list envelope, with absolute next/previous links."""
    page = parse_page(request.query, V2_PAGING, bad_param)
    following = page.next_offset(len(items))
    preceding = page.previous_offset()
    envelope = {
        "count": len(items),
        "next": None if following is None else page_link(request, request.base, page.limit, following),
        "previous": None if preceding is None else page_link(request, request.base, page.limit, preceding),
    }
    return await listed(state, V2_LIST, envelope, page.slice(items), render, keys_of, list_key)


async def project_list(request: ApiRequest, state: ApiState) -> Reply:
    slug = last(request.query, "slug")
    items = state.store.projects_where(slug=slug)
    list_key = V2_PROJECTS.key({"slug": slug})
    if "page" in request.query:
        return await numbered_page(request, state, items, list_key)
    return await paginated(request, state, items, state.serializer(V2Serializer).project, project_keys, list_key)


async def numbered_page(request: ApiRequest, state: ApiState, items: Sequence[Project], list_key: str) -> Reply:
    """Projects as the original paged them: ``page=N``, PROJECTS_PER_PAGE a page (DECISIONS.md section 2)."""
    number = positive_id(last(request.query, "page") or "")
    pages = max(1, -(-len(items) // PROJECTS_PER_PAGE))
    if number is None or number > pages:
        raise ApiError(404, {"detail": "Invalid page."})
    shown = items[(number - 1) * PROJECTS_PER_PAGE : number * PROJECTS_PER_PAGE]
    envelope = {
        "count": len(items),
        "next": page_number_link(request, request.base, number + 1) if number < pages else None,
        "previous": page_number_link(request, request.base, number - 1) if number > 1 else None,
    }
    return await listed(state, V2_LIST, envelope, shown, state.serializer(V2Serializer).project, project_keys, list_key)


async def project_detail(request: ApiRequest, state: ApiState) -> Reply:
    project = by_id(state.store.projects, request.params["id"], NOT_FOUND)
    return state.ok(state.serializer(V2Serializer).project(project), ["v2", *project_keys(project)])


async def active_versions(request: ApiRequest, state: ApiState) -> Reply:
    store = state.store
    project = by_id(store.projects, request.params["id"], NOT_FOUND)
    versions = store.versions_of_project_active.get((project.id, True), [])
    serializer = state.serializer(V2Serializer)
    # The same versions as the version list of the project's active ones, so under its key.
    list_key = V2_VERSIONS.key({"project": project.slug, "active": True})
    keys = ["v2", list_key, *project_keys(project), *(key for v in versions for key in version_keys(store, v))]
    return state.ok({"versions": [serializer.version(v) for v in versions]}, keys, list_key=list_key)


async def version_list(request: ApiRequest, state: ApiState) -> Reply:
    store = state.store
    query = request.query
    active = boolean(query, "active", bad_param)
    slug = last(query, "project__slug")
    items = store.versions_where(projects=store.project_named(slug=slug), active=active)
    list_key = V2_VERSIONS.key({"project": slug, "active": active})
    return await paginated(request, state, items, state.serializer(V2Serializer).version, lambda v: version_keys(store, v), list_key)


async def version_detail(request: ApiRequest, state: ApiState) -> Reply:
    version = by_id(state.store.versions, request.params["id"], NOT_FOUND)
    return state.ok(state.serializer(V2Serializer).version(version), ["v2", *version_keys(state.store, version)])


async def build_list(request: ApiRequest, state: ApiState) -> Reply:
    store = state.store
    query = request.query
    slug, commit = last(query, "project__slug"), last(query, "commit")
    items = store.builds_where(projects=store.project_named(slug=slug), commit=commit)
    list_key = V2_BUILDS.key({"project": slug, "commit": commit})
    return await paginated(request, state, items, state.serializer(V2Serializer).build, lambda b: build_keys(store, b), list_key)


async def build_detail(request: ApiRequest, state: ApiState) -> Reply:
    build = by_id(state.store.builds, request.params["id"], NOT_FOUND)
    return state.ok(state.serializer(V2Serializer).build(build), ["v2", *build_keys(state.store, build)])
