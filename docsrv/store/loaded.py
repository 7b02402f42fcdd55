"""The loaded snapshot as it is served: public records only, indexed once, never changed.

Private projects and versions, and every build, command and page under them, are dropped
here, so no handler can show them by mistake. Every ordering and filter an endpoint offers
is a ready list: a request slices one, it never scans or sorts.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from operator import attrgetter
from pathlib import Path
from typing import Any, TypeVar

from ..snapshot.binary import Derived, Undecoded, write_binary
from ..snapshot.commands import ChangedCommands, CommandFile
from ..snapshot.load import RawSnapshot, read_snapshot
from ..snapshot.records import Build, BuildCommand, Manifest, PageHead, Project, ProjectRelationship, Record, User, Version
from ..snapshot.validate import check_snapshot
from ..snapshot.verified import record_check
from ..utils.heap import give_back_free_memory
from ..utils.sequences import Grouping, PatchedOrder, SortedOrder, chunked

log = logging.getLogger("docsrv")
#: A server that checked a snapshot whole for longer than this says so as a warning (an INFO line
#: for a small one, the bundled demo among them, where preparing saves nothing worth a warning).
UNPREPARED_WARNING_SECONDS = 1.0

T = TypeVar("T")
R = TypeVar("R", bound=Record)


class Store:
    """One snapshot's public records, by id and by slug, in every served order."""

    def __init__(
        self,
        manifest: Manifest,
        records: dict[str, Sequence[Any]],
        commands: CommandFile,
        *,
        path: Path | None = None,
        derived: dict[str, Derived] | None = None,
        load_seconds: float = 0.0,
    ) -> None:
        """``records``: the served ones (``served_records``). ``derived``: what an earlier store
        of the same records derived from them (``snapshot/binary.py``); what is not there is
        computed, and ``self.derived`` holds all of it until the load has kept it."""
        self.manifest = manifest
        self.path = path
        self.load_seconds = load_seconds
        #: Whether the load trusted a record of an earlier check of the same files.
        self.trusted = False
        #: When the changeset that made this state in memory was published (``store/changes.py``).
        self.published_at: datetime | None = None
        self.name: str = manifest.name
        self.created_at: datetime = manifest.created_at
        self.public_url: str = manifest.public_url.rstrip("/")
        self.derived: dict[str, Derived] = {kind: Derived() for kind in records} if derived is None else derived

        # A changeset applied in memory may change users, and edit projects and versions in place
        # (``store/changes.py``): their dictionaries may then be overlays of the loaded ones, and
        # their ordered lists ``Replaced`` views or new lists. A list longer than a piece is kept
        # in pieces (``chunked``), so that a change cuts the pieces it touches, copying none of
        # the records they keep.
        users: Sequence[User] = records["users"]
        self.users: Mapping[int, User] = {u.id: u for u in users}
        self.users_ordered: Sequence[User] = chunked(users)
        self.user_by_name: Mapping[str, User] = {u.username: u for u in users}

        projects: Sequence[Project] = records["projects"]
        self.projects: Mapping[int, Project] = {p.id: p for p in projects}
        self.projects_ordered: Sequence[Project] = chunked(projects)
        self.project_by_slug: Mapping[str, Project] = {p.slug: p for p in projects}
        projects_of_user: dict[int, list[Project]] = {}
        for project in projects:
            for user in project.users:
                projects_of_user.setdefault(user, []).append(project)
        self.projects_of_user: Mapping[int, Sequence[Project]] = projects_of_user

        relationships: Sequence[ProjectRelationship] = records["relationships"]
        self.relationships: Mapping[int, ProjectRelationship] = {r.id: r for r in relationships}
        self.relationships_of_parent: Mapping[int, Sequence[ProjectRelationship]] = self._grouped("relationships", relationships, "parent")
        #: The parents of each subproject, found without a pass over every relationship when a
        #: changeset edits projects (``store.changes.projects_changed``).
        self.relationships_of_child: Mapping[int, Sequence[ProjectRelationship]] = self._grouped("relationships", relationships, "child")
        #: Public subprojects of each public project, by alias (or slug): searched with it.
        self.subprojects: Mapping[int, list[Project]] = {
            parent: [self.projects[r.child] for r in related] for parent, related in self.relationships_of_parent.items()
        }

        versions: Sequence[Version] = records["versions"]
        self.versions: Mapping[int, Version] = by_id(versions)
        self.versions_ordered: Sequence[Version] = chunked(versions)
        self.versions_of_project: Mapping[int, Sequence[Version]] = self._grouped("versions", versions, "project")
        self.versions_by_active: Mapping[bool, Sequence[Version]] = self._grouped("versions", versions, "active")
        self.versions_of_project_active: Mapping[tuple[int, bool], Sequence[Version]] = self._grouped(
            "versions", versions, "project", "active")
        self.versions_by_slug: Mapping[str, Sequence[Version]] = self._grouped("versions", versions, "slug")
        self.versions_by_slug_active: Mapping[tuple[str, bool], Sequence[Version]] = self._grouped("versions", versions, "slug", "active")
        #: The versions by project and slug: those loaded, which an edit in place keeps (found by id
        #: in ``versions``), and those added since (``PatchedOrder``).
        self.version_by_slug: SortedOrder[Version] | PatchedOrder[Version] = self._sorted("versions", versions, "project", "slug")

        builds: Sequence[Build] = records["builds"]
        self.builds: Mapping[int, Build] = by_id(builds)
        #: Highest rank first.
        self.builds_ordered: Sequence[Build] = chunked(builds)
        self.builds_of_project: Mapping[int, Sequence[Build]] = self._grouped("builds", builds, "project")
        self.builds_by_commit: SortedOrder[Build] | PatchedOrder[Build] = self._sorted("builds", builds, "commit")
        #: For a version that leaves in memory, its builds (a popular project has hundreds of thousands).
        self.builds_by_version: SortedOrder[Build] | PatchedOrder[Build] = self._sorted("builds", builds, "version")

        self.commands: CommandFile | ChangedCommands = commands
        counts = self.derived["builds"].counts
        if "commands" not in counts:
            counts["commands"] = commands.ranges.commands_of_builds(self.builds)

        pages: Sequence[PageHead] = records["pages"]
        self.pages: Mapping[int, PageHead] = {p.id: p for p in pages}
        self.pages_ordered: Sequence[PageHead] = chunked(pages)
        #: The pages of each version, by id: those of a version made private or deleted leave
        #: with it (``store/changes.py``), found here, not by reading every page.
        self.pages_of_version: Mapping[int, Sequence[PageHead]] = self._grouped("pages", pages, "version")
        #: How many public pages each project and version holds (those with none are not keys):
        #: the search index holds them, so a change in memory takes such a one away only with the
        #: index of the state it makes (``store/changes.py``), and a change of a project's language
        #: moves its hits (``edge/keys.py``). Counted, so that a page that leaves says whether it
        #: was the last.
        self.projects_with_pages: Mapping[int, int] = self._counted("pages", pages, "project")
        self.versions_with_pages: Mapping[int, int] = self._counted("pages", pages, "version")

        #: How many public records of each kind are served.
        self.counts = {
            "users": len(self.users),
            "projects": len(self.projects),
            "relationships": len(relationships),
            "versions": len(self.versions),
            "builds": len(self.builds),
            "build_commands": counts["commands"],
            "pages": len(self.pages),
        }

    def _grouped(self, kind: str, items: Sequence[T], *fields: str) -> Mapping[Any, Sequence[T]]:
        """The served ``items`` of ``kind`` grouped by ``fields``, in served order within a group
        (each made when first asked for: ``Groups``)."""
        return self._grouping(kind, items, *fields).groups(items)

    def _counted(self, kind: str, items: Sequence[T], field: str) -> dict[Any, int]:
        """How many of the served ``items`` of ``kind`` each value of ``field`` has."""
        return self._grouping(kind, items, field).sizes()

    def _grouping(self, kind: str, items: Sequence[T], *fields: str) -> Grouping:
        derived, name = self.derived[kind], ",".join(fields)
        if name not in derived.groupings:
            derived.groupings[name] = Grouping.of(list(map(attrgetter(*fields), items)))
        return derived.groupings[name]

    def _sorted(self, kind: str, items: Sequence[T], *fields: str) -> SortedOrder[T]:
        """The served ``items`` of ``kind`` sorted by ``fields``, for lookups."""
        derived, name = self.derived[kind], ",".join(fields)
        found = SortedOrder(items, attrgetter(*fields), derived.orders.get(name))
        if name not in derived.orders:
            derived.orders[name] = found.order
        return found

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

    def projects_where(self, *, slug: str | None = None, user: int | None = None) -> Sequence[Project]:
        if slug is not None:
            found = self.project_by_slug.get(slug)
            return [found] if found is not None and (user is None or user in found.users) else []
        if user is not None:
            return self.projects_of_user.get(user, [])
        return self.projects_ordered

    def versions_where(
        self, *, projects: list[Project] | None = None, slug: str | None = None, active: bool | None = None
    ) -> Sequence[Version]:
        """Versions of ``projects`` (None: of any project), by slug and by whether they are active."""
        if projects is not None:
            if not projects:
                return []
            project = projects[0]
            if slug is not None:
                found = self.version_of(project.id, slug)
                return [found] if found is not None and active in (None, found.active) else []
            if active is None:
                return self.versions_of_project.get(project.id, [])
            return self.versions_of_project_active.get((project.id, active), [])
        if slug is not None:
            if active is None:
                return self.versions_by_slug.get(slug, [])
            return self.versions_by_slug_active.get((slug, active), [])
        return self.versions_ordered if active is None else self.versions_by_active.get(active, [])

    def builds_where(self, *, projects: list[Project] | None = None, commit: str | None = None) -> Sequence[Build]:
        """Builds of ``projects`` (None: of any project), by commit."""
        if projects is not None:
            if not projects:
                return []
            if commit is None:
                return self.builds_of_project.get(projects[0].id, [])
            project = projects[0].id
            return [build for build in self.builds_by_commit.find(commit) if build.project == project]
        return self.builds_ordered if commit is None else self.builds_by_commit.find(commit)

    def version_of(self, project: int, slug: str) -> Version | None:
        """A public version of a project, by slug."""
        found = self.version_by_slug.first((project, slug))
        return None if found is None else self.versions.get(found.id)

    def commands_of(self, build: Build) -> list[BuildCommand]:
        """The commands of a public build, by start time (read from disk)."""
        return self.commands.of_build(build.id)

    def version_url(self, project: Project, version_slug: str) -> str:
        """Where the hosted documentation of one version of a project lives."""
        return f"{self.public_url}/projects/{project.slug}/{project.language}/{version_slug}/"

    def page_url(self, page: PageHead) -> str:
        project = self.projects[page.project]
        return self.version_url(project, self.versions[page.version].slug) + page.path


def by_id(records: Sequence[R]) -> Mapping[int, R]:
    """``records`` by id: a dictionary, or of records decoded when first read, their own lookup
    (a dictionary would decode them all)."""
    return records.by_id if isinstance(records, Undecoded) else {record.id: record for record in records}


def served_records(records: Mapping[str, Sequence[Any]]) -> dict[str, Sequence[Any]]:
    """The records a store serves, of each kind: the public ones (and what is under them), in the
    order in which they are listed."""
    projects = sorted((p for p in records["projects"] if p.privacy_level == "public"), key=attrgetter("slug"))
    public = {p.id for p in projects}
    relationships = sorted(
        (r for r in records["relationships"] if r.parent in public and r.child in public), key=lambda r: (r.alias or "", r.id)
    )
    versions = [v for v in records["versions"] if v.privacy_level == "public" and v.project in public]
    versions.sort(key=attrgetter("id"))
    versions.sort(key=attrgetter("verbose_name"), reverse=True)
    public = {v.id for v in versions}
    builds = [b for b in records["builds"] if b.version in public]
    builds.sort(key=attrgetter("id"), reverse=True)
    builds.sort(key=attrgetter("date"), reverse=True)
    return {
        "users": sorted(records["users"], key=attrgetter("id")),
        "projects": projects,
        "relationships": relationships,
        "versions": versions,
        "builds": builds,
        "pages": sorted((p for p in records["pages"] if p.version in public), key=attrgetter("id")),
    }


def load_store(
    path: str | Path,
    *,
    progress: bool | None = None,
    page_text: bool = True,
    trust: bool = True,
    digests_checked: bool = False,
    keep: bool = False,
) -> Store:
    """Read, check and index a snapshot directory; raise SnapshotError if it cannot be served.
    Without ``page_text``, pages keep all but their text (see ``serve.served.load_served``). With
    ``trust``, a record that the same files were checked before spares checking them again.

    Only with ``keep`` does the load write into the snapshot (``prepare``): the record of a check
    that passed (``snapshot/verified.py``) and, loading as a server does (trusted, without page
    text), the records in MessagePack (``snapshot/binary.py``). A server never keeps: it only reads
    a snapshot, which may be read-only, and says so when it had to check it whole.

    The collector is paused while millions of objects are made, and what was loaded is then
    frozen out of its reach: the store never changes, and forked workers keep sharing its pages.
    There is no full collection first: it walked every container of the store to find a few
    dozen objects that the load left in cycles.
    """
    started = time.perf_counter()
    enabled = gc.isenabled()
    gc.disable()
    try:
        raw = read_snapshot(path, progress=progress, page_text=page_text, trust=trust, digests_checked=digests_checked)
        if not raw.trusted:
            check_snapshot(raw)
        records = raw.records if raw.binary else served_records(raw.records)
        store = Store(raw.manifest, records, raw.commands, path=raw.path, derived=raw.derived)
        store.trusted = raw.trusted
        if keep:
            keep_check(raw, records, store.derived, page_text=page_text)
        store.derived = {}  # kept: the positions the groupings were made from are not served
        del raw, records
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    give_back_free_memory()  # the pages of what the load made and let go, before a generation forks (utils/heap.py)
    store.load_seconds = time.perf_counter() - started
    if trust and not keep and not store.trusted:
        level = logging.WARNING if store.load_seconds >= UNPREPARED_WARNING_SECONDS else logging.INFO
        log.log(level, "%s is not prepared (no record of a check of these files): checked whole in %.1f s; "
                "`docsrv snapshot prepare %s` where it can be written spares that at every start",
                store.path, store.load_seconds, store.path)
    return store


def keep_check(raw: RawSnapshot, records: dict[str, Sequence[Any]], derived: dict[str, Derived], *, page_text: bool) -> None:
    """Write the record of the check just passed, with the records in MessagePack when they are
    held as a server holds them and are not already (or are in an earlier docsrv's layout).
    Raises OSError where they cannot be written, SnapshotError when a file changed while it was
    checked."""
    written = write_binary(raw.path, records, derived) if not page_text and (not raw.binary or raw.earlier_layout) else []
    if raw.trusted and not written:
        return  # the record in place stands
    record_check(raw.path, raw.manifest_bytes, raw.identities, written, raw.commands.ranges, raw.commands.total)


def prepare(path: str | Path, *, progress: bool | None = None) -> Store:
    """Make a snapshot quick to serve: check it (unless a record of a check of the same files
    stands), and keep the record and the records in MessagePack beside it. Run by ``docsrv
    snapshot prepare``, ``docsrv index`` and a pull, where the snapshot can be written."""
    return load_store(path, progress=progress, page_text=False, keep=True)
