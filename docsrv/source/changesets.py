"""A changeset from the records a database's transactions changed (``state.Change``): the lines a
replica applies, and what its header says of them, as ``snapshot publish --since`` would write
them for the same two states, without either state on disk.

- ``in_place`` and ``unmoved``: whether a project or version that was there moves or is made
  public, and whether one made private or deleted held pages (``changeset.compute``'s rules).
- The purge keys: those of every reply the change touches, by the scheme of ``edge/keys.py``,
  from the records before and after. A project or version that comes into view or leaves it
  touches every list that shows what it holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import msgspec

from ..edge import keys as k
from ..snapshot.changeset import FORMAT, FORMAT_VERSION, PLACED_KINDS, Header, Placed, Product, changeset_bytes
from ..snapshot.records import Build, Page, Project, Version
from .state import Change, SourceState

_encoder = msgspec.json.Encoder()


def changeset_of(state: SourceState, changes: list[Change], *, sequence: int, follows: str, product: str, created_at: datetime,
                 public_url: str, source_lsn: str, committed_at: datetime) -> bytes:
    """The bytes of changeset ``sequence``, from snapshot ``follows`` to ``product``: ``changes``,
    which ``state`` holds made."""
    body: list[bytes] = []
    for change in changes:
        if change.after is not None:
            body.append(b'{"op":"upsert","kind":"%s","record":%s}' % (change.kind.encode(), _encoder.encode(change.after)))
        else:
            assert change.before is not None
            named = b',"build":%d' % change.before.build if change.kind == "build_commands" else b""  # type: ignore[attr-defined]
            body.append(b'{"op":"delete","kind":"%s","id":%d%s}' % (change.kind.encode(), change.before.id, named))
    view = View(state, changes)
    unmoved, in_place = view.placing()
    header = Header(format=FORMAT, format_version=FORMAT_VERSION, sequence=sequence, follows=follows,
                    product=Product(name=product, created_at=created_at, public_url=public_url, counts=state.counts(),
                                    description="Followed from the source database."),
                    changes=len(body), purge_keys=k.change_keys(view.purge_keys()), in_place=in_place, unmoved=unmoved,
                    source_lsn=source_lsn, committed_at=committed_at)
    return changeset_bytes(header, body)


class View:
    """The records of both sides of ``changes``: after them (what ``state`` keeps), and before."""

    def __init__(self, state: SourceState, changes: list[Change]) -> None:
        self.state = state
        self.changes = changes
        self.before = {(c.kind, (c.before or c.after).id): c.before for c in changes}  # type: ignore[union-attr]

    def was(self, kind: str, identity: int) -> object:
        key = (kind, identity)
        return self.before[key] if key in self.before else self.state.kept[kind].get(identity)

    def placing(self) -> tuple[bool, bool]:
        """(unmoved, in_place), as ``changeset.compute`` says them of the same change."""
        unmoved, hidden = True, []
        for change in self.changes:
            if change.kind in PLACED_KINDS and change.before is not None:
                before = msgspec.convert(change.before, Placed, from_attributes=True)
                after = msgspec.convert(change.after, Placed, from_attributes=True) if change.after is not None else None
                if after == before:
                    continue
                if after is not None and (after.address != before.address or after.privacy_level == "public"):
                    unmoved = False
                hidden.append((change.kind, change.before.id))
        return unmoved, unmoved and not any(self.held_pages(kind, identity) for kind, identity in hidden)

    def held_pages(self, kind: str, identity: int) -> bool:
        """Whether a project or version held a page before the change (whether public or not)."""
        owner = "version" if kind == "versions" else "project"
        if any(c.kind == "pages" and c.before is not None and getattr(c.before, owner) == identity for c in self.changes):
            return True
        versions = [identity] if kind == "versions" else self.state.children("versions_of_project", identity)
        kept = self.state.kept["pages"]
        return any(page in kept for version in versions for page in self.state.children("pages_of_version", version))

    # Which replies show what: a record is served when it and what it belongs to are public.

    def project(self, identity: int, before: bool) -> Project | None:
        found = self.was("projects", identity) if before else self.state.kept["projects"].get(identity)
        return found if isinstance(found, Project) and found.privacy_level == "public" else None

    def version(self, version: Version | None, before: bool) -> tuple[Project, Version] | None:
        if version is None or version.privacy_level != "public":
            return None
        project = self.project(version.project, before)
        return (project, version) if project is not None else None

    def build(self, build: Build | None, before: bool) -> tuple[str, Build] | None:
        if build is None:
            return None
        version = self.was("versions", build.version) if before else self.state.kept["versions"].get(build.version)
        served = self.version(version if isinstance(version, Version) else None, before)
        return (served[0].slug, build) if served is not None else None

    def page(self, page: Page | None, before: bool) -> bool:
        if page is None:
            return False
        version = self.was("versions", page.version) if before else self.state.kept["versions"].get(page.version)
        return self.version(version if isinstance(version, Version) else None, before) is not None

    def purge_keys(self) -> Iterator[str]:
        edited = [c.after.id for c in self.changes if c.kind == "projects" and c.before is not None and c.after is not None]
        if k.beyond_bound(2 * len(self.state.children("versions_of_project", identity)) for identity in edited):
            yield from k.EVERY_REPLY  # as ``applied_keys`` says of the same change
            return
        pages: tuple[list[int], list[int], list[int]] = ([], [], [])
        for change in self.changes:
            before, after = change.before, change.after
            if change.kind == "users":
                yield from k.flat(k.user_change_keys(before, after))  # type: ignore[arg-type]
            elif change.kind == "projects":
                yield from self.project_keys(change)
            elif change.kind == "versions":
                yield from self.version_keys(change)
            elif change.kind == "builds":
                yield from k.build_change_keys(self.build(before, True), self.build(after, False))  # type: ignore[arg-type]
            elif change.kind == "build_commands":
                yield from (k.build_key(command.build) for command in (before, after) if command is not None)  # type: ignore[attr-defined]
            elif change.kind == "pages":
                was, now = self.page(before, True), self.page(after, False)  # type: ignore[arg-type]
                if was or now:
                    pages[0 if not now else 1 if not was else 2].append(change.before.id if not now else change.after.id)  # type: ignore[union-attr]
            elif change.kind == "relationships":
                yield "search"
                for relationship in (before, after):
                    for end in (relationship.parent, relationship.child) if relationship is not None else ():  # type: ignore[attr-defined]
                        found = self.project(end, relationship is before)
                        if found is not None:
                            yield k.project_key(found.slug)
        if any(pages):
            yield from k.flat(k.page_change_keys(*pages))
            yield "search"

    def project_keys(self, change: Change) -> Iterator[str]:
        identity = (change.after or change.before).id  # type: ignore[union-attr]
        before, after = self.project(identity, True), self.project(identity, False)
        if before is None and after is None:
            return
        versions = [self.state.kept["versions"][v] for v in self.state.children("versions_of_project", identity)
                    if v in self.state.kept["versions"] and self.state.kept["versions"][v].privacy_level == "public"]
        has_pages = self.held_pages("projects", identity)
        shown = k.ProjectShown(versions, self.commits(versions), has_pages)
        yield from k.flat(k.project_change_keys(before, after, [shown, k.ProjectShown(versions, self.commits(versions), has_pages)]))
        if (before is None) != (after is None):  # what it holds comes into view, or leaves it
            project = after or before
            assert project is not None
            for version in versions:
                yield from k.version_list_keys(project.slug, version)
            for commit in self.commits(versions):
                yield from k.build_list_keys(project.slug, commit)
            if has_pages:
                yield k.V1_FILES.key({})
                yield "search"

    def commits(self, versions: list[Version]) -> Iterator[str]:
        builds = self.state.kept["builds"]
        for version in versions:
            for build in self.state.children("builds_of_version", version.id):
                if build in builds:
                    yield builds[build].commit

    def version_keys(self, change: Change) -> Iterator[str]:
        before, after = self.version(change.before, True), self.version(change.after, False)  # type: ignore[arg-type]
        if before is not None and after is not None and before[0].slug != after[0].slug:
            yield from k.version_change_keys(before[0].slug, before[1], None)
            before = None
        if before is None and after is None:
            return
        slug = (after or before)[0].slug  # type: ignore[index]
        yield from k.version_change_keys(slug, before[1] if before else None, after[1] if after else None)
        if (before is None) != (after is None):
            version = (after or before)[1]  # type: ignore[index]
            for commit in self.commits([version]):
                yield from k.build_list_keys(slug, commit)
            if self.held_pages("versions", version.id):
                yield k.V1_FILES.key({})
                yield "search"
