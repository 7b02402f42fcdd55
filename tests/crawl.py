"""Every kind of URL docsrv serves, for the records of a snapshot (and of the one after it): what
an edge cache in front of it holds after real traffic."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from snapshot_change import read


def crawl(*snapshots: Path, projects_kept: set[int] | None = None, per_project: int | None = None,
          users_kept: frozenset[int] = frozenset()) -> list[str]:
    """The URLs of every object of the snapshots; with ``projects_kept``, of those projects only
    (and at most ``per_project`` versions and builds of each) and of the first 50 users and those
    ``users_kept``, as a sample of a large snapshot."""
    projects = {p["id"]: p for s in snapshots for p in read(s, "projects") if projects_kept is None or p["id"] in projects_kept}
    versions = sample({v["id"]: v for s in snapshots for v in read(s, "versions") if v["project"] in projects}, per_project)
    builds = sample({b["id"]: b for s in snapshots for b in read(s, "builds") if b["project"] in projects}, per_project)
    pages = sample({p["id"]: p for s in snapshots for p in read(s, "pages") if p["project"] in projects}, per_project)
    users = {u["id"]: u for s in snapshots for u in read(s, "users")}
    if projects_kept is not None:
        users = {identity: user for number, (identity, user) in enumerate(users.items()) if number < 50 or identity in users_kept}
    urls = ["/api/v1/", "/openapi.json"]
    for paging in ("", "?limit=5", "?limit=5&offset=5", "?offset=1000", "?limit=1000"):
        urls += [f"/api/v2/{kind}/{paging}" for kind in ("project", "version", "build")]
        urls += [f"/api/v1/{kind}/{paging}" for kind in ("project", "version", "build", "file", "user")]
    urls += ["/api/v2/project/?page=1", "/api/v2/version/?active=true", "/api/v2/version/?active=false&limit=3"]
    for kind in ("project", "version", "build", "file", "user"):
        urls.append(f"/api/v1/{kind}/schema/")
    for project in projects.values():
        slug = quote(project["slug"])
        pid = project["id"]
        urls += [
            f"/api/v2/project/{pid}/", f"/api/v2/project/{pid}/active_versions/", f"/api/v2/project/?slug={slug}",
            f"/api/v2/version/?project__slug={slug}", f"/api/v2/version/?project__slug={slug}&active=true",
            f"/api/v2/build/?project__slug={slug}", f"/api/v2/build/?project__slug={slug}&limit=2",
            f"/api/v1/project/{pid}/", f"/api/v1/project/{slug}/", f"/api/v1/project/?slug={slug}",
            f"/api/v1/version/{slug}/", f"/api/v1/version/?project__slug={slug}&active=true", f"/api/v1/version/?project={pid}",
            f"/api/v1/build/?project__slug={slug}",
        ]
        urls += [f"/api/v1/project/?users={user}" for user in project.get("users", [])]
    for version in versions.values():
        urls += [f"/api/v2/version/{version['id']}/", f"/api/v1/version/{version['id']}/"]
        project = projects.get(version["project"])
        if project is not None:
            urls.append(f"/api/v2/docsearch/?project={quote(project['slug'])}&version={quote(version['slug'])}&q=install")
    for build in builds.values():
        urls += [f"/api/v2/build/{build['id']}/", f"/api/v1/build/{build['id']}/"]
        if build.get("commit"):
            urls.append(f"/api/v2/build/?commit={build['commit']}")
    for page in pages.values():
        urls.append(f"/api/v1/file/{page['id']}/")
    for user in users.values():
        urls += [f"/api/v1/user/{user['id']}/", f"/api/v1/user/{quote(user['username'])}/", f"/api/v1/user/?username={quote(user['username'])}"]
    urls += ["/api/v1/file/search/?q=install", "/api/v1/file/anchor/?q=install", "/api/v1/file/search/?q=project"]
    return list(dict.fromkeys(urls))


def sample(items: dict[int, dict], per_project: int | None) -> dict[int, dict]:
    """At most ``per_project`` items of each project, the newest (highest ids) first."""
    if per_project is None:
        return items
    kept: dict[int, list[dict]] = {}
    for item in sorted(items.values(), key=lambda i: -i["id"]):
        group = kept.setdefault(item["project"], [])
        if len(group) < per_project:
            group.append(item)
    return {item["id"]: item for group in kept.values() for item in group}
