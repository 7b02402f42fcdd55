"""Purge keys: what a reply shows, named so that a cache can purge by project, version or build.

Sent as ``Surrogate-Key`` (space separated) and ``Cache-Tag`` (comma separated). A long list
could name thousands of versions, more than caches take in one header (Fastly takes 16 KB,
nginx's default proxy buffers less), so the keys of a reply are kept under MAX_BYTES: past it,
versions and builds are named by their projects, and past that again, the reply carries its
API's key alone. Purging a project's key therefore reaches every reply that shows any of it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..snapshot.records import Build, PageHead, Project, Version
from ..store import Store

MAX_BYTES = 8000


def project_keys(project: Project) -> tuple[str, ...]:
    return (f"project-{project.slug}",)


def version_keys(store: Store, version: Version) -> tuple[str, ...]:
    return version_slug_keys(store.projects[version.project], version.slug)


def version_slug_keys(project: Project, version_slug: str) -> tuple[str, ...]:
    """The keys of a project's version, by its slug (doc search names versions by slug)."""
    return (f"project-{project.slug}", f"version-{project.slug}-{version_slug}")


def build_keys(store: Store, build: Build) -> tuple[str, ...]:
    return (*version_keys(store, store.versions[build.version]), f"build-{build.id}")


def page_keys(store: Store, page: PageHead) -> tuple[str, ...]:
    return version_keys(store, store.versions[page.version])


def purge_keys(keys: Iterable[str]) -> list[str]:
    """The keys to send for a reply that shows ``keys``: all of them while they fit in MAX_BYTES."""
    named = list(dict.fromkeys(keys))
    if size(named) <= MAX_BYTES:
        return named
    coarse = list(dict.fromkeys(k for k in named if not k.startswith(("version-", "build-"))))
    if size(coarse) <= MAX_BYTES:
        return coarse
    return [k for k in named if not k.startswith(("project-", "version-", "build-"))]


def size(keys: list[str]) -> int:
    return sum(len(k) + 1 for k in keys)
