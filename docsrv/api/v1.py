"""The deprecated v1 API (spec 4.2 and 2.7-2.8, DECISIONS.md section 4).

Each resource is a table of Fields. The same table renders the objects and writes the
``schema/`` document, so the two cannot drift apart.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from multidict import MultiMapping

from ..edge.keys import (
    V1_BUILDS,
    V1_FILES,
    V1_PROJECTS,
    V1_USERS,
    V1_VERSIONS,
    build_keys,
    page_keys,
    project_keys,
    user_keys,
    version_keys,
)
from ..http.reply import Reply
from ..snapshot.records import Build, Project, User, Version
from ..store.loaded import Store
from .errors import ApiError
from .fields import EmbeddedProjects, Field, V1Description, Value, attribute, moment, render
from .lists import V1_LIST, listed
from .params import V1_PAGING, boolean, by_id, excerpt, last, page_link, parse_page, positive_id, whole_number
from .request import ApiRequest
from .routing import Handler
from .schema import BOOLEAN, DATETIME, INTEGER, STRING
from .state import V1_JSON, ApiState

T = TypeVar("T")

NOT_FOUND = {"error": "Not found."}
RESERVED = frozenset(("format", "limit", "offset"))
#: v1 shows three build states: the v2 states in between fold into "building".
V1_STATE = {"triggered": "triggered", "building": "building", "installing": "building", "cloning": "building", "finished": "finished"}


def error(message: str, status: int = 400) -> ApiError:
    return ApiError(status, {"error": message})


def param_error(name: str, message: str) -> ApiError:
    return error(f"Invalid '{name}': {message}")


class V1Serializer:
    """Renders v1 objects; the embedded v1 project is encoded once per project."""

    def __init__(self, store: Store) -> None:
        self.store = store
        scheme, host = store.public_url.split("://", 1)
        self.subdomain = f"{scheme}://{{slug}}.{host}/"  # the slug with "_" as "-": a host name takes no underscore
        self._projects = EmbeddedProjects(PROJECT.fields, V1_JSON)

    def project(self, project: Project) -> orjson.Fragment:
        return self._projects.get(self, project)


def uri(resource: str, ident: int) -> str:
    return f"/api/v1/{resource}/{ident}/"


#: The JSON schema of each v1 type, unless a field names its own.
V1_TYPES = {"string": STRING, "boolean": BOOLEAN, "datetime": DATETIME, "integer": INTEGER}


def v1_field(
    name: str, type: str, help_text: str, value: Value, *, unique: bool = False, nullable: bool = False,
    related_type: str | None = None, openapi: dict | None = None,
) -> Field:
    """A field as v1 describes it: its type's name and help text in its schema documents;
    ``openapi``, the JSON schema of its value where its type does not say it."""
    schema = openapi if openapi is not None else V1_TYPES[type]
    return Field(name, schema, value, V1Description(type, help_text, unique, nullable, related_type))


def text(name: str, help_text: str, **kwargs: Any) -> Field:
    return v1_field(name, "string", help_text, attribute(name), **kwargs)


def flag(name: str, help_text: str) -> Field:
    return v1_field(name, "boolean", help_text, attribute(name))


def when(name: str, help_text: str) -> Field:
    return v1_field(name, "datetime", help_text, moment(name))


def ident(resource: str) -> Field:
    return v1_field("id", "string", f"Id of the {resource}.", lambda serializer, item: str(item.id), unique=True)


def resource_uri(resource: str) -> Field:
    return v1_field("resource_uri", "string", f"URI of this {resource}.", lambda serializer, item: uri(resource, item.id), unique=True)


@dataclass(frozen=True)
class Resource:
    name: str
    fields: tuple[Field, ...]
    #: Filterable fields and the lookups each allows.
    filtering: dict[str, tuple[str, ...]] = field(default_factory=dict)
    names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", frozenset(f.name for f in self.fields))

    def accepts(self, key: str) -> bool:
        """Whether a list of this resource reads the query parameter ``key``: the reserved ones,
        and any naming a field (a filter, or an error for a field that allows no filtering)."""
        return key in RESERVED or key.partition("__")[0] in self.names

    def render(self, serializer: V1Serializer, item: Any) -> dict:
        return render(self.fields, serializer, item)

    def schema(self) -> dict:
        return {
            "allowed_detail_http_methods": ["get"],
            "allowed_list_http_methods": ["get"],
            "default_format": "application/json",
            "default_limit": V1_PAGING.default_limit,
            "fields": {f.name: f.v1.document() for f in self.fields if f.v1 is not None},
            "filtering": {name: list(lookups) for name, lookups in self.filtering.items()},
        }

    def filters(self, query: MultiMapping[str]) -> dict[str, str]:
        """The filters a query asks for; a filter on a field that allows none is an error."""
        names = self.names
        chosen: dict[str, str] = {}
        for key in query:
            if key in RESERVED or key in chosen:
                continue
            head, _, lookup = key.partition("__")
            if head in self.filtering and (lookup or "exact") in self.filtering[head]:
                chosen[key] = query.getall(key)[-1]
            elif head in self.filtering:
                raise error(f"'{excerpt(lookup)}' is not an allowed filter on the '{head}' field.")
            elif head in names:
                raise error(f"The '{head}' field does not allow filtering.")
        return chosen


PROJECT = Resource(
    "project",
    (
        ident("project"),
        text("name", "Name of the project."),
        text("slug", "Slug of the project, used in URLs.", unique=True),
        text("description", "Description of the project (reStructuredText)."),
        v1_field("absolute_url", "string", "URI of the project page, not of the API object.",
              lambda serializer, p: f"{serializer.store.public_url}/projects/{p.slug}/"),
        text("analytics_code", "Analytics tracking code."),
        text("copyright", "Copyright."),
        text("crate_url", "URI of the project in a package registry."),
        text("framework_packages_url", "URI of the project in a web-framework package directory."),
        text("default_branch", "Default branch of the repository."),
        text("default_version", "Default version of the documentation."),
        text("documentation_type", "Kind of documentation build."),
        when("modified_date", "Last modified date."),
        when("pub_date", "Last published date."),
        text("project_url", "Project homepage."),
        text("repo", "URI of the repository."),
        text("repo_type", "Type of repository."),
        text("requirements_file", "Requirements file of packages needed to build the docs."),
        resource_uri("project"),
        v1_field("subdomain", "string", "Subdomain of the hosted docs.",
              lambda serializer, p: serializer.subdomain.format(slug=p.slug.replace("_", "-"))),
        text("suffix", "File suffix of doc files."),
        text("theme", "Theme of the documentation generator."),
        flag("use_virtualenv", "Whether the project is built in a virtualenv."),
        v1_field("users", "related", "URIs of the administrators.", lambda serializer, p: [uri("user", u) for u in p.users],
              related_type="to_many", openapi={"type": "array", "items": {"type": "string"}}),
        text("version", "Deprecated."),
    ),
    {"slug": ("exact",), "users": ("exact",)},
)

VERSION = Resource(
    "version",
    (
        ident("version"),
        text("slug", "Uniquely identifies the version within its project."),
        text("verbose_name", "Name of the version; usually the same as slug."),
        text("identifier", "Version control identifier of the version."),
        flag("active", "Whether docs continue to be built for it."),
        flag("built", "Whether docs have been built."),
        flag("uploaded", "Whether docs were uploaded instead of built."),
        v1_field("project", "related", "The project of the version.",
              lambda serializer, v: serializer.project(serializer.store.projects[v.project]), related_type="to_one",
              openapi={"$ref": "#/components/schemas/V1Project"}),
        resource_uri("version"),
    ),
    {"project": ("exact", "slug"), "slug": ("exact",), "active": ("exact",)},
)

BUILD = Resource(
    "build",
    (
        ident("build"),
        when("date", "Date of the build."),
        v1_field("state", "string", "triggered, building or finished.", lambda serializer, b: V1_STATE[b.state]),
        flag("success", "Whether the build succeeded."),
        text("type", "html, pdf, man or epub."),
        text("error", "Error from the documentation build process."),
        text("output", "Output of the build process."),
        text("setup", "Setup output."),
        text("setup_error", "Setup error."),
        v1_field("project", "related", "URI of the project.", lambda serializer, b: uri("project", b.project), related_type="to_one",
              openapi={"type": "string"}),
        v1_field("version", "related", "URI of the version.", lambda serializer, b: uri("version", b.version), related_type="to_one",
              openapi={"type": "string"}),
        resource_uri("build"),
    ),
    {"project": ("slug",)},
)

FILE = Resource(
    "file",
    (
        ident("file"),
        v1_field("name", "string", "File name.", lambda serializer, page: posixpath.basename(page.path.rstrip("/")) or page.path),
        text("path", "Path of the file."),
        v1_field("absolute_url", "string", "URI of the actual file, not of the API object.",
              lambda serializer, page: serializer.store.page_url(page)),
        v1_field("project", "related", "The project of the file.",
              lambda serializer, page: serializer.project(serializer.store.projects[page.project]), related_type="to_one",
              openapi={"$ref": "#/components/schemas/V1Project"}),
        resource_uri("file"),
    ),
)

USER = Resource(
    "user",
    (
        ident("user"),
        text("username", "Username.", unique=True),
        resource_uri("user"),
    ),
    {"username": ("exact",)},
)

RESOURCES = {r.name: r for r in (BUILD, FILE, PROJECT, USER, VERSION)}


def check_format(request: ApiRequest) -> None:
    wanted = last(request.query, "format")
    if wanted is not None and wanted != "json":
        raise error(f"The format '{excerpt(wanted)}' is not served; use format=json or leave it out.")


def endpoint(handler: Handler) -> Handler:
    """A v1 handler: every v1 endpoint takes ``format=json`` and refuses any other format."""

    @functools.wraps(handler)
    async def checked(request: ApiRequest, state: ApiState) -> Reply:
        check_format(request)
        return await handler(request, state)

    return checked


async def listing(
    request: ApiRequest, state: ApiState, resource: Resource, items: Sequence[T], keys_of: Callable[[T], Iterable[str]],
    list_key: str,
) -> Reply:
    """One page of ``items`` in the v1 envelope; next/previous are paths."""
    page = parse_page(request.query, V1_PAGING, param_error)
    shown = page.slice(items)
    following = page.next_offset(len(items))
    preceding = page.previous_offset()
    meta = {
        "limit": page.limit,
        "next": None if following is None else page_link(request, "", page.limit, following),
        "offset": page.offset,
        "previous": None if preceding is None else page_link(request, "", page.limit, preceding),
        "total_count": len(items),
    }
    serializer = state.serializer(V1Serializer)
    return await listed(state, V1_LIST, {"meta": meta}, shown, lambda item: resource.render(serializer, item), keys_of, list_key)


def one(state: ApiState, resource: Resource, item: Any, keys: tuple[str, ...]) -> Reply:
    return state.ok(resource.render(state.serializer(V1Serializer), item), ["v1", *keys], V1_JSON)


def id_of(value: str, name: str) -> int:
    number = positive_id(value)
    if number is None:
        raise param_error(name, f"'{excerpt(value)}' is not an id.")
    return number


# Selecting the objects of a list: every filter is a ready index of the store.


def select_projects(store: Store, filters: dict[str, str]) -> tuple[Sequence[Project], str]:
    """The projects the filters choose, and the key of their list."""
    user = id_of(filters["users"], "users") if "users" in filters else None
    slug = filters.get("slug")
    return store.projects_where(slug=slug, user=user), V1_PROJECTS.key({"slug": slug, "users": user})


def select_versions(store: Store, filters: dict[str, str], query: MultiMapping[str]) -> tuple[Sequence[Version], str]:
    """The versions the filters choose, and the key of their list."""
    active = boolean(query, "active", param_error)
    project_id = id_of(filters["project"], "project") if "project" in filters else None
    project_slug, slug = filters.get("project__slug"), filters.get("slug")
    projects = store.project_named(id=project_id, slug=project_slug)
    list_key = V1_VERSIONS.key({"project_id": project_id, "project": project_slug, "slug": slug, "active": active})
    return store.versions_where(projects=projects, slug=slug, active=active), list_key


# Handlers.


@endpoint
async def root(request: ApiRequest, state: ApiState) -> Reply:
    body = {name: {"list_endpoint": f"/api/v1/{name}/", "schema": f"/api/v1/{name}/schema/"} for name in RESOURCES}
    return state.ok(body, ["v1"], V1_JSON)


def schema_handler(resource: Resource) -> Handler:
    @endpoint
    async def schema(request: ApiRequest, state: ApiState) -> Reply:
        return state.ok(resource.schema(), ["v1"], V1_JSON)

    return schema


@endpoint
async def project_list(request: ApiRequest, state: ApiState) -> Reply:
    items, list_key = select_projects(state.store, PROJECT.filters(request.query))
    return await listing(request, state, PROJECT, items, project_keys, list_key)


@endpoint
async def project_detail(request: ApiRequest, state: ApiState) -> Reply:
    store = state.store
    key = request.params["id"]
    number = whole_number(key)
    project = store.projects.get(number) if number is not None else store.project_by_slug.get(key)
    if project is None:
        raise ApiError(404, NOT_FOUND)
    return one(state, PROJECT, project, project_keys(project))


@endpoint
async def version_list(request: ApiRequest, state: ApiState) -> Reply:
    store = state.store
    items, list_key = select_versions(store, VERSION.filters(request.query), request.query)
    return await listing(request, state, VERSION, items, lambda v: version_keys(store, v), list_key)


@endpoint
async def version_detail(request: ApiRequest, state: ApiState) -> Reply:
    """A version by id, or, for a segment that is not all digits, the versions of that project."""
    store = state.store
    key = request.params["id"]
    number = whole_number(key)
    if number is None:
        items, list_key = select_versions(store, {**VERSION.filters(request.query), "project__slug": key}, request.query)
        return await listing(request, state, VERSION, items, lambda v: version_keys(store, v), list_key)
    version = store.versions.get(number)
    if version is None:
        raise ApiError(404, NOT_FOUND)
    return one(state, VERSION, version, version_keys(store, version))


@endpoint
async def build_list(request: ApiRequest, state: ApiState) -> Reply:
    store = state.store
    slug = BUILD.filters(request.query).get("project__slug")
    items = store.builds_where(projects=store.project_named(slug=slug))
    return await listing(request, state, BUILD, items, lambda b: build_keys(store, b), V1_BUILDS.key({"project": slug}))


@endpoint
async def build_detail(request: ApiRequest, state: ApiState) -> Reply:
    build: Build = by_id(state.store.builds, request.params["id"], NOT_FOUND)
    return one(state, BUILD, build, build_keys(state.store, build))


@endpoint
async def file_list(request: ApiRequest, state: ApiState) -> Reply:
    store = state.store
    FILE.filters(request.query)
    return await listing(request, state, FILE, store.pages_ordered, lambda page: page_keys(store, page), V1_FILES.key({}))


@endpoint
async def file_detail(request: ApiRequest, state: ApiState) -> Reply:
    page = by_id(state.store.pages, request.params["id"], NOT_FOUND)
    return one(state, FILE, page, page_keys(state.store, page))


@endpoint
async def user_list(request: ApiRequest, state: ApiState) -> Reply:
    store = state.store
    filters = USER.filters(request.query)
    items = store.users_ordered
    username = filters.get("username")
    if username is not None:
        found = store.user_by_name.get(username)
        items = [found] if found is not None else []
    return await listing(request, state, USER, items, user_keys, V1_USERS.key({"username": username}))


@endpoint
async def user_detail(request: ApiRequest, state: ApiState) -> Reply:
    """A user by id, or by username for a segment that is not all digits."""
    store = state.store
    key = request.params["id"]
    number = whole_number(key)
    user: User | None = store.users.get(number) if number is not None else store.user_by_name.get(key)
    if user is None:
        raise ApiError(404, NOT_FOUND)
    return one(state, USER, user, user_keys(user))
