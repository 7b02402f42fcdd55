"""Purge keys: what a reply shows, named so that a cache can purge by project, version or build.

Sent as ``Surrogate-Key`` (space separated) and ``Cache-Tag`` (comma separated).
"""

from __future__ import annotations

from ..snapshot.records import Build, Page, Project, Version
from ..store import Store


def project_keys(project: Project) -> tuple[str, ...]:
    return (f"project-{project.slug}",)


def version_keys(store: Store, version: Version) -> tuple[str, ...]:
    slug = store.projects[version.project].slug
    return (f"project-{slug}", f"version-{slug}-{version.slug}")


def build_keys(store: Store, build: Build) -> tuple[str, ...]:
    return (*version_keys(store, store.versions[build.version]), f"build-{build.id}")


def page_keys(store: Store, page: Page) -> tuple[str, ...]:
    return version_keys(store, store.versions[page.version])
