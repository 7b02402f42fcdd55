"""The v2 API (spec 4.1, DECISIONS.md sections 1 and 2): projects, versions and builds."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import orjson
from aiohttp import web

from ..http.purge import build_keys, project_keys, version_keys
from ..http.reply import Reply
from ..snapshot.records import Build, BuildCommand, Project, Version
from ..store import Store
from ..utils.timefmt import utc
from .errors import ApiError
from .params import boolean, by_id, last, page_link, page_number_link, parse_page, positive_id
from .state import ApiState, encoded_each

T = TypeVar("T")
NOT_FOUND = {"detail": "Not found."}
#: Projects a page when the project list is paged by number, as the original paged it.
PROJECTS_PER_PAGE = 100
DOWNLOAD_FORMATS = ("pdf", "htmlzip", "epub")


def bad_param(name: str, message: str) -> ApiError:
    return ApiError(400, {name: [message]})


def not_found() -> ApiError:
    return ApiError(404, NOT_FOUND)


class V2Shapes:
    """The v2 representations, in the field order of the original service.

    A project is embedded in every version, so its encoding is made once and spliced in.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.download_host = store.public_url.split("://", 1)[1]
        self._projects: dict[int, orjson.Fragment] = {}

    def project(self, project: Project) -> orjson.Fragment:
        found = self._projects.get(project.id)
        if found is None:
            found = self._projects[project.id] = orjson.Fragment(
                orjson.dumps(
                    {
                        "id": project.id,
                        "name": project.name,
                        "slug": project.slug,
                        "description": project.description,
                        "language": project.language,
                        "programming_language": project.programming_language,
                        "repo": project.repo,
                        "repo_type": project.repo_type,
                        "default_version": project.default_version,
                        "default_branch": project.default_branch,
                        "documentation_type": project.documentation_type,
                        "users": list(project.users),
                        "canonical_url": self.store.version_url(project, project.default_version),
                    }
                )
            )
        return found

    def version(self, version: Version) -> dict:
        project = self.store.projects[version.project]
        return {
            "id": version.id,
            "project": self.project(project),
            "slug": version.slug,
            "identifier": version.identifier,
            "verbose_name": version.verbose_name,
            "active": version.active,
            "built": version.built,
            "downloads": {
                kind: f"//{self.download_host}/projects/{project.slug}/downloads/{kind}/{version.slug}/"
                for kind in DOWNLOAD_FORMATS
                if kind in version.downloads
            },
            "type": version.type,
        }

    def build(self, build: Build) -> dict:
        project = self.store.projects[build.project]
        version = self.store.versions[build.version]
        return {
            "id": build.id,
            "commands": [self.command(c) for c in self.store.commands_of(build)],
            "project_slug": project.slug,
            "version_slug": version.slug,
            "docs_url": self.store.version_url(project, version.slug),
            "type": build.type,
            "state": build.state,
            "date": utc(build.date),
            "success": build.success,
            "error": build.error,
            "commit": build.commit,
            "length": build.length,
            "project": build.project,
            "version": build.version,
        }

    @staticmethod
    def command(command: BuildCommand) -> dict:
        return {
            "id": command.id,
            "run_time": int((command.end_time - command.start_time).total_seconds()),
            "command": command.command,
            "description": command.description,
            "output": command.output,
            "exit_code": command.exit_code,
            "start_time": utc(command.start_time),
            "end_time": utc(command.end_time),
            "build": command.build,
        }


async def paginated(
    request: web.BaseRequest, state: ApiState, items: Sequence[T], render: Callable[[T], Any], keys_of: Callable[[T], Iterable[str]]
) -> Reply:
    """One page of ``items`` in the v2 list envelope, with absolute next/previous links."""
    page = parse_page(request.query, default_limit=10, max_limit=1000, zero_limit_means_max=False, error=bad_param)
    shown = page.slice(items)
    base = state.fixed_base or f"{request.scheme}://{request.host.lower()}"
    following = page.next_offset(len(items))
    preceding = page.previous_offset()
    envelope = {
        "count": len(items),
        "next": None if following is None else page_link(request, base, page.limit, following),
        "previous": None if preceding is None else page_link(request, base, page.limit, preceding),
    }

    def make() -> tuple[dict, list[str]]:
        return {**envelope, "results": encoded_each(render, shown)}, ["v2", *(key for item in shown for key in keys_of(item))]

    return await state.rendered(len(shown), make)


async def project_list(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    items = state.store.projects_where(slug=last(request.query, "slug"))
    if "page" in request.query:
        return await numbered_page(request, state, items)
    return await paginated(request, state, items, state.shapes(V2Shapes).project, project_keys)


async def numbered_page(request: web.BaseRequest, state: ApiState, items: list[Project]) -> Reply:
    """Projects as the original paged them: ``page=N``, PROJECTS_PER_PAGE a page (DECISIONS.md section 2)."""
    number = positive_id(last(request.query, "page") or "")
    pages = max(1, -(-len(items) // PROJECTS_PER_PAGE))
    if number is None or number > pages:
        raise ApiError(404, {"detail": "Invalid page."})
    shown = items[(number - 1) * PROJECTS_PER_PAGE : number * PROJECTS_PER_PAGE]
    base = state.fixed_base or f"{request.scheme}://{request.host.lower()}"
    envelope = {
        "count": len(items),
        "next": page_number_link(request, base, number + 1) if number < pages else None,
        "previous": page_number_link(request, base, number - 1) if number > 1 else None,
    }
    render = state.shapes(V2Shapes).project

    def make() -> tuple[dict, list[str]]:
        return {**envelope, "results": encoded_each(render, shown)}, ["v2", *(key for p in shown for key in project_keys(p))]

    return await state.rendered(len(shown), make)


async def project_detail(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    project = by_id(state.store.projects, params["id"], not_found)
    return state.ok(state.shapes(V2Shapes).project(project), ["v2", *project_keys(project)])


async def active_versions(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    store = state.store
    project = by_id(store.projects, params["id"], not_found)
    versions = store.versions_of_project_active.get((project.id, True), [])
    shapes = state.shapes(V2Shapes)
    keys = ["v2", *project_keys(project), *(key for v in versions for key in version_keys(store, v))]
    return state.ok({"versions": [shapes.version(v) for v in versions]}, keys)


async def version_list(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    store = state.store
    query = request.query
    active = boolean(query, "active", bad_param)
    items = store.versions_where(projects=store.project_named(slug=last(query, "project__slug")), active=active)
    return await paginated(request, state, items, state.shapes(V2Shapes).version, lambda v: version_keys(store, v))


async def version_detail(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    version = by_id(state.store.versions, params["id"], not_found)
    return state.ok(state.shapes(V2Shapes).version(version), ["v2", *version_keys(state.store, version)])


async def build_list(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    store = state.store
    query = request.query
    items = store.builds_where(projects=store.project_named(slug=last(query, "project__slug")), commit=last(query, "commit"))
    return await paginated(request, state, items, state.shapes(V2Shapes).build, lambda b: build_keys(store, b))


async def build_detail(request: web.BaseRequest, state: ApiState, params: dict[str, str]) -> Reply:
    build = by_id(state.store.builds, params["id"], not_found)
    return state.ok(state.shapes(V2Shapes).build(build), ["v2", *build_keys(state.store, build)])
