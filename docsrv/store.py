"""The loaded snapshot as it is served: public records only, indexed once, never changed.

Private projects and versions, and every build, command and page under them, are dropped
here, so no handler can show them by mistake. Every ordering and filter an endpoint offers
is a ready list: a request slices one, it never scans or sorts.
"""

from __future__ import annotations

import gc
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Sequence
from datetime import datetime
from operator import attrgetter
from pathlib import Path
from typing import Any, Generic, TypeVar

from .snapshot.binary import write_binary
from .snapshot.commands import CommandFile
from .snapshot.load import read_snapshot, record_files
from .snapshot.records import Build, BuildCommand, Manifest, PageHead, Project, User, Version
from .snapshot.validate import check_snapshot
from .snapshot.verified import record_check

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class Store:
    """One snapshot's public records, by id and by slug, in every served order."""

    def __init__(
        self,
        manifest: Manifest,
        records: dict[str, list],
        commands: CommandFile,
        *,
        path: Path | None = None,
        load_seconds: float = 0.0,
    ) -> None:
        self.manifest = manifest
        self.path = path
        self.load_seconds = load_seconds
        #: Whether the load trusted a record of an earlier check of the same files.
        self.trusted = False
        self.name: str = manifest.name
        self.created_at: datetime = manifest.created_at
        self.public_url: str = manifest.public_url.rstrip("/")

        users: list[User] = sorted(records["users"], key=attrgetter("id"))
        self.users: dict[int, User] = {u.id: u for u in users}
        self.users_ordered = users
        self.user_by_name: dict[str, User] = {u.username: u for u in users}

        projects = sorted((p for p in records["projects"] if p.privacy_level == "public"), key=attrgetter("slug"))
        self.projects: dict[int, Project] = {p.id: p for p in projects}
        self.projects_ordered: list[Project] = projects
        self.project_by_slug: dict[str, Project] = {p.slug: p for p in projects}
        self.projects_of_user: dict[int, list[Project]] = {}
        for project in projects:
            for user in project.users:
                self.projects_of_user.setdefault(user, []).append(project)

        #: Public subprojects of each public project, by alias (or slug): searched with it.
        self.subprojects: dict[int, list[Project]] = {}
        for relation in sorted(records["relationships"], key=lambda r: (r.alias or "", r.id)):
            if relation.parent in self.projects and relation.child in self.projects:
                self.subprojects.setdefault(relation.parent, []).append(self.projects[relation.child])

        versions = [v for v in records["versions"] if v.privacy_level == "public" and v.project in self.projects]
        versions.sort(key=attrgetter("id"))
        versions.sort(key=attrgetter("verbose_name"), reverse=True)
        self.versions: dict[int, Version] = {v.id: v for v in versions}
        self.versions_ordered: list[Version] = versions
        self.versions_of_project: dict[int, list[Version]] = group(versions, attrgetter("project"))
        self.versions_by_active: dict[bool, list[Version]] = group(versions, attrgetter("active"))
        self.versions_of_project_active: dict[tuple[int, bool], list[Version]] = group(versions, attrgetter("project", "active"))
        self.version_by_slug: dict[tuple[int, str], Version] = {(v.project, v.slug): v for v in versions}
        self.versions_by_slug: dict[str, list[Version]] = group(versions, attrgetter("slug"))
        self.versions_by_slug_active: dict[tuple[str, bool], list[Version]] = group(versions, attrgetter("slug", "active"))

        builds = [b for b in records["builds"] if b.version in self.versions]
        builds.sort(key=attrgetter("id"), reverse=True)
        builds.sort(key=attrgetter("date"), reverse=True)
        self.builds: dict[int, Build] = {b.id: b for b in builds}
        self.builds_ordered: list[Build] = builds
        self.builds_of_project: dict[int, list[Build]] = group(builds, attrgetter("project"))
        self.builds_by_commit: FewPerKey[str, Build] = FewPerKey(builds, attrgetter("commit"))
        #: The builds of the commits that several builds share, by project: of any other commit, a
        #: project's build is the commit's one build if it is the project's.
        self.shared_commit_builds_of_project: dict[tuple[int, str], list[Build]] = group(
            [build for shared in self.builds_by_commit.shared.values() for build in shared], attrgetter("project", "commit")
        )

        self.commands = commands
        public_commands = commands.ranges.commands_of_builds(self.builds)

        pages = sorted((p for p in records["pages"] if p.version in self.versions), key=attrgetter("id"))
        self.pages: dict[int, PageHead] = {p.id: p for p in pages}
        self.pages_ordered: list[PageHead] = pages

        #: How many public records of each kind are served.
        self.counts = {
            "users": len(self.users),
            "projects": len(self.projects),
            "relationships": sum(map(len, self.subprojects.values())),
            "versions": len(self.versions),
            "builds": len(self.builds),
            "build_commands": public_commands,
            "pages": len(self.pages),
        }

    # Every filter of both APIs, answered from the ready indexes above (a request never scans).

    def project_named(self, *, id: int | None = None, slug: str | None = None) -> list[Project] | None:
        """The project a filter names by id, slug or both: None when neither is given (no
        filter), an empty list when they name nothing public (or two different projects)."""
        if id is None and slug is None:
            return None
        by_id = self.projects.get(id) if id is not None else None
        by_slug = self.project_by_slug.get(slug) if slug is not None else None
        if (id is not None and by_id is None) or (slug is not None and by_slug is None):
            return []
        if by_id is not None and by_slug is not None and by_id is not by_slug:
            return []
        found = by_id or by_slug
        return [found] if found is not None else []

    def projects_where(self, *, slug: str | None = None, user: int | None = None) -> list[Project]:
        if slug is not None:
            found = self.project_by_slug.get(slug)
            return [found] if found is not None and (user is None or user in found.users) else []
        if user is not None:
            return self.projects_of_user.get(user, [])
        return self.projects_ordered

    def versions_where(
        self, *, projects: list[Project] | None = None, slug: str | None = None, active: bool | None = None
    ) -> list[Version]:
        """Versions of ``projects`` (None: of any project), by slug and by whether they are active."""
        if projects is not None:
            if not projects:
                return []
            project = projects[0]
            if slug is not None:
                found = self.version_by_slug.get((project.id, slug))
                return [found] if found is not None and active in (None, found.active) else []
            if active is None:
                return self.versions_of_project.get(project.id, [])
            return self.versions_of_project_active.get((project.id, active), [])
        if slug is not None:
            if active is None:
                return self.versions_by_slug.get(slug, [])
            return self.versions_by_slug_active.get((slug, active), [])
        return self.versions_ordered if active is None else self.versions_by_active.get(active, [])

    def builds_where(self, *, projects: list[Project] | None = None, commit: str | None = None) -> list[Build]:
        """Builds of ``projects`` (None: of any project), by commit."""
        if projects is not None:
            if not projects:
                return []
            if commit is None:
                return self.builds_of_project.get(projects[0].id, [])
            project = projects[0].id
            if commit in self.builds_by_commit.shared:
                return self.shared_commit_builds_of_project.get((project, commit), [])
            return [build for build in self.builds_by_commit.get(commit) if build.project == project]
        return self.builds_ordered if commit is None else self.builds_by_commit.get(commit)

    def commands_of(self, build: Build) -> list[BuildCommand]:
        """The commands of a public build, by start time (read from disk)."""
        return self.commands.of_build(build.id)

    def version_url(self, project: Project, version_slug: str) -> str:
        """Where the hosted documentation of one version of a project lives."""
        return f"{self.public_url}/projects/{project.slug}/{project.language}/{version_slug}/"

    def page_url(self, page: PageHead) -> str:
        project = self.projects[page.project]
        return self.version_url(project, self.versions[page.version].slug) + page.path


def group(items: Sequence[T], key: Callable[[T], Hashable]) -> dict[Any, list[T]]:
    """Index ``items`` by ``key(item)`` (an ``attrgetter``: no Python call per item), keeping
    the order of ``items``."""
    index: dict = defaultdict(list)
    for item, found in zip(items, map(key, items), strict=True):
        index[found].append(item)
    return dict(index)


class FewPerKey(Generic[K, T]):
    """``items`` by a key that most of them have alone (a build's commit): the first item of
    each key in one dict, and lists only for the keys that several items share. At the large
    scale, 2M builds grouped by commit into lists took 1.6 s and a list per build (about 170 MB
    for each such grouping); this takes a dict built in C."""

    def __init__(self, items: Sequence[T], key: Callable[[T], K]) -> None:
        keys = list(map(key, items))
        #: Built from the end, so that the first item of a key is the one kept.
        self.first: dict[K, T] = dict(zip(reversed(keys), reversed(items), strict=True))
        self.shared: dict[K, list[T]] = {}
        if len(self.first) < len(keys):
            several = {found for found, count in Counter(keys).items() if count > 1}
            for item, found in zip(items, keys, strict=True):
                if found in several:
                    self.shared.setdefault(found, []).append(item)

    def get(self, key: K) -> list[T]:
        """The items of ``key``, in their order."""
        shared = self.shared.get(key)
        if shared is not None:
            return shared
        item = self.first.get(key)
        return [item] if item is not None else []


def load_store(
    path: str | Path, *, progress: bool | None = None, page_text: bool = True, trust: bool = True, digests_checked: bool = False
) -> Store:
    """Read, check and index a snapshot directory; raise SnapshotError if it cannot be served.
    Without ``page_text``, pages keep all but their text (see ``serving.load_served``). With
    ``trust``, a record that the same files were checked before spares checking them again; a
    check that passes leaves such a record (``snapshot/verified.py``).

    The collector is paused while millions of objects are made, and what was loaded is then
    frozen out of its reach: the store never changes, and forked workers keep sharing its pages.
    There is no full collection first: it walked every container of the store (1.6 s at the
    large scale) to find a few dozen objects that the load left in cycles.
    """
    started = time.perf_counter()
    enabled = gc.isenabled()
    gc.disable()
    try:
        raw = read_snapshot(path, progress=progress, page_text=page_text, trust=trust, digests_checked=digests_checked)
        if not raw.trusted:
            check_snapshot(raw)
        # Records known right and held as a server holds them are kept in MessagePack for the next
        # load of the same files, and the record of the check lists them (snapshot/binary.py).
        written = write_binary(raw.path, raw.records) if trust and not page_text and not raw.binary else []
        if not raw.trusted or written:
            record_check(raw.path, raw.manifest_bytes, record_files(raw.path) + written, raw.commands.ranges, raw.commands.total)
        store = Store(raw.manifest, raw.records, raw.commands, path=raw.path)
        store.trusted = raw.trusted
        del raw
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    store.load_seconds = time.perf_counter() - started
    return store
