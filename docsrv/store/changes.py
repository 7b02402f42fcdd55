"""A changeset applied to a loaded store in memory: the store it makes, sharing all it does not change.

A server that follows a replica's changesets (``serve/following.py``) applies each one in every worker,
without a reload. What is applied in memory is what the service changes every few seconds:
builds and their commands, users, subprojects, projects and versions added (as people import a
project or push a tag), edited in place (as a build's end, or a maintainer's settings, edit them:
the same slug and project), or made private or deleted (what they hold leaves with them), and
pages. What changes the search index (pages, and a project or version that holds pages made
private or deleted) is applied when the pull built the index of the state the changeset makes
(``replica/changeset_index.py``; ``indexed``). Nothing that was there becomes public and no address
moves: the changeset's header says so (``in_place``, or ``unmoved`` where pages are taken
away), and what it takes away is checked here (privacy does not rest on the header: without
the index, one that leaves holding pages is not applied). A changeset that changes anything
else (a project or version moved or made public) is not applied here: the pull writes the
snapshot it makes, checks it whole, and points ``current`` at it (a reload).

The store made is a new one; the one it is made from is never changed, so a request in flight
keeps reading one state. Records by id and their groupings are overlays of the changes on the
loaded dictionaries (``utils.sequences.Overlay``); a record that keeps its place is replaced
where it stands in an ordered list (``Replaced``); lookups by commit, and by project and slug,
resolve through the current records (``PatchedOrder``, ``Store.version_of``). A record that
joins, leaves or moves in a list makes a new list (``rearranged``): a short one is copied, a long
one is kept in pieces (``utils.sequences.Chunked``), and the pieces it touches are cut around it,
copying none of the items they keep. What a changeset costs is then about what it changed
(``bench/apply_costs.py`` measures it by kind).
"""

from __future__ import annotations

import copy
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any, Generic, TypeVar

import msgspec

from ..snapshot.changeset import PLACED_KINDS, Changeset, product_manifest
from ..snapshot.commands import ChangedCommands, CommandFile
from ..snapshot.records import Build, BuildCommand, PageHead, Project, ProjectRelationship, Record, User, Version
from ..utils.sequences import LEAVE_OUT, PUT_IN, REPLACE, Chunked, Edit, Overlay, PatchedOrder, Replaced, SortedOrder, assembled
from .loaded import Store

#: The kinds a changeset may change to be applied in memory.
LIVE_KINDS = frozenset({"users", "projects", "relationships", "versions", "builds", "build_commands"})
#: And those it may change when the pull built the search index of the state it makes (``replica.changeset_index.index_changesets``).
INDEXED_KINDS = LIVE_KINDS | {"pages"}
#: Where a build stands among builds: served newest first, then by id (``served_records``).
RANK = attrgetter("date", "id")

#: A record of a list (it has an id) and a group's key.
V = TypeVar("V", bound=Record)
K = TypeVar("K")

_build = msgspec.json.Decoder(Build)
_command = msgspec.json.Decoder(BuildCommand)
_version = msgspec.json.Decoder(Version)
_project = msgspec.json.Decoder(Project)
_user = msgspec.json.Decoder(User)
_relationship = msgspec.json.Decoder(ProjectRelationship)
_page = msgspec.json.Decoder(PageHead)


class Applied(msgspec.Struct, frozen=True):
    """A changeset applied: the store it makes and the one it was made from, each changed build
    as served before and after (the slug of its project and the build; None where it is not
    served), each served version and project that changed, came or left (for a version, the
    slug of its project; the record before and after, None where it is not served), each user
    (None where there is none), whether the changeset changes relationships, and the served
    pages it upserts or deletes, before and after (None where one is not served; one whose text
    alone changed is the same record before and after: its search hits change, not its file)."""

    store: Store
    was: Store
    builds: dict[int, tuple[tuple[str, Build] | None, tuple[str, Build] | None]]
    versions: list[tuple[str, Version | None, Version | None]]
    projects: list[tuple[Project | None, Project | None]] = []
    users: list[tuple[User | None, User | None]] = []
    relationships: bool = False
    pages: list[tuple[PageHead | None, PageHead | None]] = []


def in_memory(changeset: Changeset, public_url: str, *, indexed: bool = False) -> bool:
    """Whether a server applies ``changeset`` in memory to a snapshot published at ``public_url``:
    it changes users, subprojects, builds and their commands, and projects and versions in place
    (its header says so: ``Header.in_place``), and, when the search index of the state it makes
    was built (``indexed``), pages, and projects and versions that take pages away (made private
    or deleted: ``Header.unmoved``); it names the build of each command it deletes, and keeps the
    public URL (which every reply's links begin with)."""
    header = changeset.header
    return (changeset.kinds <= (INDEXED_KINDS if indexed else LIVE_KINDS)
            and (not changeset.kinds.intersection(PLACED_KINDS) or header.in_place or (indexed and header.unmoved))
            and changeset.deletes["build_commands"] <= changeset.deleted_commands.keys()
            and changeset.header.product.public_url.rstrip("/") == public_url.rstrip("/"))


def changes_index(changeset: Changeset) -> bool:
    """Whether ``changeset``, by its kinds and header, changes what the search index holds: it
    changes pages, or takes away a project or version that holds pages (not ``in_place``). The
    pull builds the index of the state such a changeset makes, and a server applies it only with
    that index."""
    return "pages" in changeset.kinds or (bool(changeset.kinds.intersection(PLACED_KINDS)) and not changeset.header.in_place)


def applied(store: Store, changeset: Changeset, published_at: datetime | None = None, *, indexed: bool = False) -> Applied | None:
    """The store ``changeset`` makes of ``store``; None when it is not applied in memory
    (``in_memory``, or it moves a served project or version after all, or, without ``indexed``,
    takes one away that holds pages: privacy does not rest on the header) or does not follow
    ``store`` (by name: its sequence is the follower's to check, ``serve.following.pending``).
    ``indexed``: the search index of the state it makes was built, and its pages are applied too,
    those of the projects and versions it takes away included."""
    header = changeset.header
    product = product_manifest(changeset)
    if not in_memory(changeset, store.public_url, indexed=indexed) or header.follows != store.name:
        return None
    made = copy.copy(store)
    made.manifest, made.name, made.created_at, made.published_at = product, product.name, product.created_at, published_at
    # Projects, then versions, then builds: which are served depends on what they belong to. One
    # that moves is not in place, whatever the header says, nor one that leaves holding pages
    # without the index of the state made: the pull's snapshot of it is loaded whole.
    projects = changed_in_place(store.projects, changeset.upserts["projects"], changeset.deletes["projects"], _project,
                                attrgetter("slug"), lambda p: not indexed and p.id in store.projects_with_pages)
    if projects is None:
        return None
    if projects:
        projects_changed(made, store, projects)
    versions = changed_in_place(store.versions, changeset.upserts["versions"], changeset.deletes["versions"], _version,
                                attrgetter("project", "slug"), lambda v: not indexed and v.id in store.versions_with_pages, made.projects)
    if versions is None:
        return None
    listed = {before.id for before, _after in versions if before is not None}
    versions += [(version, None) for before, after in projects if after is None
                 for version in store.versions_of_project.get(before.id, []) if version.id not in listed]  # type: ignore[union-attr]
    if versions:
        versions_changed(made, store, versions)
    left = {before.id for before, after in versions if after is None and before is not None}
    shown = builds_changed(made, store, changeset, left)
    users = users_changed(made, store, changeset)
    relationships = relationships_changed(made, store, changeset, {before.id for before, after in projects if after is None and before})
    pages = pages_changed(made, store, changeset, left & store.versions_with_pages.keys())
    return Applied(made, store, shown, [((made.projects.get(v.project) or store.projects[v.project]).slug, before, after)
                                        for before, after in versions if (v := after or before) is not None],
                   projects, users, relationships, pages)


def builds_changed(made: Store, store: Store, changeset: Changeset,
                   hidden: set[int]) -> dict[int, tuple[tuple[str, Build] | None, tuple[str, Build] | None]]:
    """Give ``made`` (its versions changed already) the builds of ``store`` and their commands
    with those ``changeset`` upserts and deletes, and without those of the versions ``hidden``
    (served before, not after); return each build whose replies change, as served before and
    after (``Applied.builds``). A build of a version ``made`` does not serve is not served (the
    version is private: the publisher checked the snapshot it made whole)."""
    upserted = {identity: build for identity, line in changeset.upserts["builds"].items()
                if (build := _build.decode(line)).version in made.versions}
    left = [b.id for version in hidden for b in store.builds_by_version.find(version)]
    before = {i: store.builds[i] for i in (*changeset.upserts["builds"], *changeset.deletes["builds"], *left) if i in store.builds}
    changes: dict[int, Build | None] = dict.fromkeys((*left, *changeset.deletes["builds"], *changeset.upserts["builds"]))
    changes.update(upserted)
    builds = Overlay.of(store.builds, changes)
    commands, commanded = changed_commands(store, changeset)
    changed = set(before) | set(upserted)
    # A build that keeps its project and its place among builds is replaced where it stands;
    # the others leave (``gone``) and join (``came``) the lists.
    gone, came, replaced = split([(before.get(i), upserted.get(i)) for i in changed], attrgetter("project"), BUILDS)
    made.builds = builds
    made.builds_ordered = reordered(store.builds_ordered, gone, came, replaced, BUILDS)
    made.builds_of_project = regrouped(store.builds_of_project, attrgetter("project"), gone, came, replaced, BUILDS)
    made.builds_by_commit = refound(store.builds_by_commit, builds, upserted, before, attrgetter("commit"))
    made.builds_by_version = refound(store.builds_by_version, builds, upserted, before, attrgetter("version"))
    made.commands = commands
    counted = changed | commanded
    made.counts = {**made.counts, "builds": len(builds), "build_commands": store.counts["build_commands"] + sum(
        (commands.count_of(b) if b in builds else 0) - (store.commands.count_of(b) if b in store.builds else 0) for b in counted
    )}
    # A build whose commands changed shows otherwise: its replies and lists show its commands.
    return {identity: (served(store, store.builds.get(identity)), served(made, builds.get(identity))) for identity in counted}


def refound(found: SortedOrder[Build] | PatchedOrder[Build], builds: Mapping[int, Build], upserted: dict[int, Build],
            before: dict[int, Build], key: Callable[[Build], Any]) -> PatchedOrder[Build]:
    """``found`` (builds by ``key``) once ``builds`` are current: those ``upserted`` that are new or
    have another key than ``before`` (a build may keep its place in the lists and change its
    commit) are found by their key now."""
    moved = [b for b in upserted.values() if b.id not in before or key(before[b.id]) != key(b)]
    return PatchedOrder.of(found, builds, moved, attrgetter("id"), key, RANK)


def changed_in_place(served: Mapping[int, V], upserts: dict[int, bytes], deletes: set[int], decoder: msgspec.json.Decoder[V],
                     address: Callable[[V], tuple], holds_pages: Callable[[V], bool],
                     parents: Mapping[int, Project] | None = None) -> list[tuple[V | None, V | None]] | None:
    """The records that ``upserts`` and ``deletes`` change, as served before and after (None
    where one is not: a new one, one deleted or made private); None when one is not in place: a
    served one whose ``address`` (where it is served) changes, or one that leaves and holds
    pages. A version is served under a served project (``parents``). One served after that the
    store does not serve before is new: the changeset's header says that none that was there
    was made public (a private one made public under a forged header would be served without
    what it holds until the pull's snapshot; nothing private is ever shown)."""
    changed: list[tuple[V | None, V | None]] = []
    for identity in deletes:
        gone = served.get(identity)
        if gone is not None:
            if holds_pages(gone):
                return None
            changed.append((gone, None))
    for identity, line in upserts.items():
        after: V | None = decoder.decode(line)
        shown = after.privacy_level == "public" and (parents is None or after.project in parents)  # type: ignore[union-attr]
        before = served.get(identity)
        if not shown:
            after = None
        elif before is not None and address(before) != address(after):  # type: ignore[arg-type]
            return None
        if before is None:
            if after is not None:
                changed.append((None, after))
        elif after is None:
            if holds_pages(before):
                return None
            changed.append((before, None))
        elif before != after:
            changed.append((before, after))
    return changed


def versions_changed(made: Store, store: Store, changed: list[tuple[Version | None, Version | None]]) -> None:
    """Give ``made`` the versions of ``store`` with the served ones ``changed`` (before, after:
    in place, so the same project and slug; None before for a new one, after for one that
    leaves): each moves in the lists where its name (their order) or whether it is active (their
    grouping) changed, and is replaced where it stands in the others; a new one is put in its
    places, one that leaves is left out. The lookup by project and slug finds a version by id
    (``Store.version_of``), and a new one through a patch of it."""
    made.versions = Overlay.of(store.versions, {(after or before).id: after for before, after in changed})  # type: ignore[union-attr]
    made.versions_ordered = reordered(store.versions_ordered, *split(changed, None, VERSIONS), VERSIONS)
    project, active, slug = attrgetter("project"), attrgetter("active"), attrgetter("slug")
    project_active, slug_active = attrgetter("project", "active"), attrgetter("slug", "active")
    made.versions_of_project = regrouped(store.versions_of_project, project, *split(changed, project, VERSIONS), VERSIONS)
    made.versions_by_active = regrouped(store.versions_by_active, active, *split(changed, active, VERSIONS), VERSIONS)
    made.versions_of_project_active = regrouped(store.versions_of_project_active, project_active,
                                                *split(changed, project_active, VERSIONS), VERSIONS)
    made.versions_by_slug = regrouped(store.versions_by_slug, slug, *split(changed, slug, VERSIONS), VERSIONS)
    made.versions_by_slug_active = regrouped(store.versions_by_slug_active, slug_active, *split(changed, slug_active, VERSIONS), VERSIONS)
    added = [after for before, after in changed if before is None and after is not None]
    if added:
        made.version_by_slug = PatchedOrder.of(store.version_by_slug, made.versions, added, attrgetter("id"),
                                               attrgetter("project", "slug"), VERSIONS.rank)
    made.counts = {**made.counts, "versions": len(made.versions)}


def projects_changed(made: Store, store: Store, changed: list[tuple[Project | None, Project | None]]) -> None:
    """Give ``made`` the projects of ``store`` with the served ones ``changed`` (before, after: in
    place, so the same slug; None before for a new one, after for one that leaves): each is
    replaced where it stands (they are listed by slug), put in its place or left out, moves
    between the lists of its users where those changed, and is replaced among the subprojects
    of its parents (``relationships_changed`` takes one that leaves out of them)."""
    made.projects = Overlay.of(store.projects, {(after or before).id: after for before, after in changed})  # type: ignore[union-attr]
    made.projects_ordered = reordered(store.projects_ordered, *split(changed, None, PROJECTS), PROJECTS)
    slugs: dict[str, Project | None] = {before.slug: None for before, _after in changed if before is not None}
    made.project_by_slug = Overlay.of(store.project_by_slug, slugs | {after.slug: after for _before, after in changed if after is not None})
    by_user: dict[int, tuple[list[Project], list[Project], list[Project]]] = {}
    for before, after in changed:
        named, naming = (before.users if before is not None else ()), (after.users if after is not None else ())
        for user in {*named, *naming}:
            gone, came, replaced = by_user.setdefault(user, ([], [], []))
            if before is not None and after is not None and named.count(user) == naming.count(user) == 1:
                replaced.append(after)
            else:  # as a load lists it: once for each time the project names the user
                gone.extend([before] * named.count(user) if before is not None else [])
                came.extend([after] * naming.count(user) if after is not None else [])
    made.projects_of_user = regroup(store.projects_of_user, by_user, PROJECTS)
    edited = {after.id: after for before, after in changed if before is not None and after is not None}
    parents = {r.parent for child in edited for r in store.relationships_of_child.get(child, ())}
    made.subprojects = Overlay.of(store.subprojects, {
        parent: [edited.get(child.id, child) for child in store.subprojects[parent]] for parent in parents
    })
    made.counts = {**made.counts, "projects": len(made.projects)}


def users_changed(made: Store, store: Store, changeset: Changeset) -> list[tuple[User | None, User | None]]:
    """Give ``made`` the users of ``store`` with those ``changeset`` upserts and deletes (all are
    served); return each that changed, before and after (None where there is none)."""
    upserts, deletes = changeset.upserts["users"], changeset.deletes["users"]
    changed: list[tuple[User | None, User | None]] = [(store.users[i], None) for i in deletes if i in store.users]
    changed += [(before, after) for i, line in upserts.items() if (after := _user.decode(line)) != (before := store.users.get(i))]
    if not changed:
        return []
    now: dict[int, User | None] = dict.fromkeys(deletes)
    made.users = Overlay.of(store.users, now | {after.id: after for _before, after in changed if after is not None})
    made.users_ordered = reordered(store.users_ordered, *split(changed, None, USERS), USERS)
    names: dict[str, User | None] = {before.username: None for before, _after in changed if before is not None}
    made.user_by_name = Overlay.of(store.user_by_name, names | {after.username: after for _before, after in changed if after is not None})
    made.counts = {**made.counts, "users": len(made.users)}
    return changed


def pages_changed(made: Store, store: Store, changeset: Changeset, left: set[int]) -> list[tuple[PageHead | None, PageHead | None]]:
    """Give ``made`` (its versions changed already) the pages of ``store`` with those
    ``changeset`` upserts and deletes, and without those of the versions ``left`` (made private or
    deleted, or of a project that was); return each served before or after, as it was and as it
    is (None where it is not served: a page of a version ``made`` does not serve is not). Pages are
    listed by id: one that keeps its id is replaced where it stands. The pages of a version that
    leaves are those of its group (``Store.pages_of_version``)."""
    upserts, deletes = changeset.upserts["pages"], changeset.deletes["pages"]
    changed: list[tuple[PageHead | None, PageHead | None]] = [(store.pages[i], None) for i in deletes if i in store.pages]
    if left:
        leaving = [page for version in left for page in store.pages_of_version.get(version, ())]
        changed += [(page, None) for page in sorted(leaving, key=PAGES.key) if page.id not in upserts and page.id not in deletes]
    for identity, line in upserts.items():
        after: PageHead | None = _page.decode(line)
        if after.version not in made.versions:  # type: ignore[union-attr]
            after = None
        before = store.pages.get(identity)
        if before is not None or after is not None:
            changed.append((before, after))
    if not changed:
        return []
    made.pages = Overlay.of(store.pages, {(after or before).id: after for before, after in changed})  # type: ignore[union-attr]
    moved = [c for c in changed if c[0] != c[1]]
    made.pages_ordered = reordered(store.pages_ordered, *split(moved, None, PAGES), PAGES)
    version = attrgetter("version")
    made.pages_of_version = regrouped(store.pages_of_version, version, *split(moved, version, PAGES), PAGES)
    made.projects_with_pages = recounted(store.projects_with_pages, changed, attrgetter("project"))
    made.versions_with_pages = recounted(store.versions_with_pages, changed, attrgetter("version"))
    made.counts = {**made.counts, "pages": len(made.pages)}
    return changed


def recounted(counts: Mapping[int, int], changed: list[tuple[PageHead | None, PageHead | None]],
              owner: Callable[[PageHead], int]) -> Mapping[int, int]:
    """``counts`` (pages by project or version, by ``owner``) once the pages ``changed`` are; one
    left without a page is no key."""
    moved: dict[int, int] = {}
    for before, after in changed:
        if before is not None:
            moved[owner(before)] = moved.get(owner(before), 0) - 1
        if after is not None:
            moved[owner(after)] = moved.get(owner(after), 0) + 1
    return Overlay.of(counts, {key: (counts.get(key, 0) + change) or None for key, change in moved.items() if change})


def relationships_changed(made: Store, store: Store, changeset: Changeset, hidden: set[int]) -> bool:
    """Give ``made`` (its projects changed already) the subprojects of ``store`` with the
    relationships ``changeset`` upserts and deletes, and without those of the projects ``hidden``
    (served before, not after; one between projects not both served is not served); return
    whether the changeset changes any (which doc searches cover which projects: the diff names
    a change of the relationships' file)."""
    upserts, deletes = changeset.upserts["relationships"], changeset.deletes["relationships"]
    now: dict[int, ProjectRelationship | None] = dict.fromkeys(deletes)
    if hidden:
        now.update((r.id, None) for r in store.relationships.values() if r.parent in hidden or r.child in hidden)
    for identity, line in upserts.items():
        relationship = _relationship.decode(line)
        now[identity] = relationship if relationship.parent in made.projects and relationship.child in made.projects else None
    changed = [(store.relationships.get(i), after) for i, after in now.items() if store.relationships.get(i) != after]
    if changed:
        made.relationships = Overlay.of(store.relationships, now)
        made.relationships_of_parent = regrouped(store.relationships_of_parent, attrgetter("parent"),
                                                 *split(changed, attrgetter("parent"), RELATIONSHIPS), RELATIONSHIPS)
        made.relationships_of_child = regrouped(store.relationships_of_child, attrgetter("child"),
                                                *split(changed, attrgetter("child"), RELATIONSHIPS), RELATIONSHIPS)
        parents = {r.parent for pair in changed for r in pair if r is not None}
        made.subprojects = Overlay.of(made.subprojects, {
            parent: [made.projects[r.child] for r in made.relationships_of_parent.get(parent, [])] or None for parent in parents
        })
        made.counts = {**made.counts, "relationships": len(made.relationships)}
    return bool(upserts or deletes)


def split(changed: Sequence[tuple[V | None, V | None]], group_of: Callable[[V], Any] | None,
          order: Order[V]) -> tuple[list[V], list[V], list[V]]:
    """Of records changed (before, after; None where a record is not served): those that leave
    the lists, those that join them, and those replaced where they stand (the same group, by
    ``group_of``, and the same rank)."""
    gone: list[V] = []
    came: list[V] = []
    replaced: list[V] = []
    for before, after in changed:
        if before is not None and after is not None and (group_of is None or group_of(before) == group_of(after)) \
                and order.rank(before) == order.rank(after):
            replaced.append(after)
            continue
        if before is not None:
            gone.append(before)
        if after is not None:
            came.append(after)
    return gone, came, replaced


def served(store: Store, build: Build | None) -> tuple[str, Build] | None:
    return (store.projects[build.project].slug, build) if build is not None else None


def changed_commands(store: Store, changeset: Changeset) -> tuple[CommandFile | ChangedCommands, set[int]]:
    """The store's commands with the changeset's applied, and the builds whose commands changed."""
    upserts, deletes = changeset.upserts["build_commands"], changeset.deletes["build_commands"]
    if not upserts and not deletes:
        return store.commands, set()
    upserted: dict[int, dict[int, BuildCommand]] = {}
    for identity, line in upserts.items():
        command = _command.decode(line)
        upserted.setdefault(command.build, {})[identity] = command
    deleted: dict[int, set[int]] = {}
    for identity in deletes:
        deleted.setdefault(changeset.deleted_commands[identity], set()).add(identity)
    touched = set(upserted) | set(deleted)
    base, changed = (store.commands.base, dict(store.commands.changed)) if isinstance(store.commands, ChangedCommands) \
        else (store.commands, {})
    for build in touched:
        new, gone = upserted.get(build, {}), deleted.get(build, set())
        # As ``changeset.apply`` writes them: changed in place, the deleted left out, the new after.
        listed = [new.pop(c.id, c) for c in store.commands.in_file_order(build) if c.id not in gone]
        changed[build] = listed + list(new.values())
    return ChangedCommands(base, changed), touched


class Order(Generic[V]):
    """How a store's lists of some records are sorted: ``rank`` is where a record stands (records
    of equal rank stand in one place), ``key`` compares records in the lists' order, for bisection."""

    __slots__ = ("key", "rank")

    def __init__(self, rank: Callable[[V], Any], key: Callable[[V], Any]) -> None:
        self.rank = rank
        self.key = key


class Newest:
    """A rank compared the other way round: bisection over a list sorted highest first."""

    __slots__ = ("rank",)

    def __init__(self, rank: Any) -> None:
        self.rank = rank

    def __lt__(self, other: Newest) -> bool:
        return bool(self.rank > other.rank)


class Listed:
    """Where a version stands in the served lists: by verbose name, highest first, then by id."""

    __slots__ = ("id", "name")

    def __init__(self, version: Version) -> None:
        self.name = version.verbose_name
        self.id = version.id

    def __lt__(self, other: Listed) -> bool:
        return self.name > other.name or (self.name == other.name and self.id < other.id)


def newest_key(build: Build) -> Newest:
    return Newest(RANK(build))


#: The order of builds (``served_records``): newest first, then by id, highest first.
BUILDS: Order[Build] = Order(RANK, newest_key)
#: The order of versions (``served_records``).
VERSIONS: Order[Version] = Order(attrgetter("verbose_name", "id"), Listed)
#: The order of projects, and of users (``served_records``).
PROJECTS: Order[Project] = Order(attrgetter("slug"), attrgetter("slug"))
USERS: Order[User] = Order(attrgetter("id"), attrgetter("id"))
#: The order of pages: by id.
PAGES: Order[PageHead] = Order(attrgetter("id"), attrgetter("id"))
#: The order of subprojects: by alias (or none), then by id.
RELATIONSHIPS: Order[ProjectRelationship] = Order(lambda r: (r.alias or "", r.id), lambda r: (r.alias or "", r.id))


def reordered(items: Sequence[V], gone: list[V], came: list[V], replaced: list[V], order: Order[V]) -> Sequence[V]:
    """``items`` (in ``order``) with the records ``replaced`` in their places, without those
    ``gone``, and with those that ``came`` in theirs. Replacements alone make a ``Replaced`` of
    the list (a build's state flipped costs no copy of anything); a change of its members makes a
    new list (``rearranged``), with the replacements made since in it."""
    if not (gone or came or replaced):
        return items
    whole = Replaced.of(items, {place(items, record, order): record for record in replaced})
    if not (gone or came):
        return whole
    return rearranged(whole.base, whole.at, gone, came, order)


def regrouped(groups: Mapping[K, Sequence[V]], group_of: Callable[[V], K], gone: list[V], came: list[V], replaced: list[V],
              order: Order[V]) -> Overlay[K, Sequence[V]]:
    """The records of each group (``group_of``; in ``order`` within it), with the groups whose
    records changed made again; a group left empty is no more, as in a store loaded whole."""
    by_group: dict[K, tuple[list[V], list[V], list[V]]] = {}
    for position, records in enumerate((gone, came, replaced)):
        for record in records:
            by_group.setdefault(group_of(record), ([], [], []))[position].append(record)
    return regroup(groups, by_group, order)


def regroup(groups: Mapping[K, Sequence[V]], by_group: dict[K, tuple[list[V], list[V], list[V]]],
            order: Order[V]) -> Overlay[K, Sequence[V]]:
    """``groups`` with the records of each group in ``by_group`` changed: those that left it, those
    that joined it, those replaced where they stand (``rearranged``)."""
    changes: dict[K, Sequence[V] | None] = {}
    for group, (left, joined, kept) in by_group.items():
        items = groups.get(group, [])
        at = {place(items, record, order): record for record in kept}
        changes[group] = rearranged(items, at, left, joined, order) or None
    return Overlay.of(groups, changes)


def place(items: Sequence[V], record: V, order: Order[V]) -> int:
    """Where ``record`` stands, or would stand, in ``items`` (in ``order``), by bisection."""
    if isinstance(items, Chunked):
        return items.bisect_left(order.key(record), order.key)
    return bisect_left(items, order.key(record), key=order.key)


def rearranged(items: Sequence[V], at: Mapping[int, V], gone: list[V], came: list[V], order: Order[V]) -> Sequence[V]:
    """``items`` (in ``order``) with the records ``at`` positions replaced, those ``gone`` left out
    and those that ``came`` put in their places, each found by bisection: a new list assembled
    from the slices between them (``assembled``), or for a long list kept in pieces, the pieces
    they touch cut around them (``Chunked.edited``)."""
    replacing = dict(at)
    edits: list[Edit] = []
    left_out: set[int] = set()
    for record in gone:
        position = place(items, record, order)
        while position in left_out:  # a record a group lists more than once (a project naming a user twice)
            position += 1
        if position < len(items) and items[position].id == record.id:
            replacing.pop(position, None)
            left_out.add(position)
            edits.append((position, LEAVE_OUT, None))
    edits += [(position, REPLACE, record) for position, record in replacing.items()]
    # In the list's order, so that records put in at one position keep it (the sort is stable).
    edits += [(place(items, record, order), PUT_IN, record) for record in sorted(came, key=order.key)]
    edits.sort(key=itemgetter(0, 1))
    if isinstance(items, Chunked):
        return items.edited(edits)
    return assembled(items, edits)
