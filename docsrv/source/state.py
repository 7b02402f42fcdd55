"""What the follower knows of the database: each row of a served table as the record it maps to,
and the records an import of those rows would keep.

A row becomes a *candidate*: the record ``import-dump`` makes of the same fields (one mapping,
``snapshot/import_dump.record_of``). What is *kept* (what an import would write) follows from
the candidates by the import's own rules (``keep_what_can_be_served``): a record is kept when
everything it names is kept, and it is the first (lowest id) of those that share what must be
unique; a build or page is filed under its version's project, a page takes its document name from
its project's builder. The base computes them with that very function; after it, a committed
transaction marks the records its rows touch, and only those, and what depends on a record whose
kept form changed, are judged again, by the same rules, in the order of the kinds.

Two rules of the service's own are kept here:
- a project's users are the rows of ``projects_project_users``, whose key-only deletes name
  neither end: the follower keeps those rows by id (``links``);
- the service moves the commands of old builds to cold storage by deleting their rows while the
  build stays, and serves them on from there: a command's row deleted while its build's stays
  keeps the command. The commands go with their build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ..snapshot.import_dump import UNIQUE, DumpReport, filed_under, keep_what_can_be_served, record_of, with_document
from ..snapshot.records import KINDS, Build, BuildCommand, Page, Project, ProjectRelationship, Record, User, Version
from .tables import PROJECT_USERS, TABLES

#: The kind of record each served table's rows make.
KIND_OF_TABLE = {
    "auth_user": "users",
    "projects_project": "projects",
    "projects_projectrelationship": "relationships",
    "builds_version": "versions",
    "builds_build": "builds",
    "builds_buildcommandresult": "build_commands",
    "projects_importedfile": "pages",
}
ORDER = list(KINDS)
#: A row's fields as ``dumpdata`` writes them (``tables.value_of``), its ``id`` among them; None: the row is deleted.
Fields = dict[str, Any]


@dataclass
class Change:
    """One record whose kept form a transaction (or several) changed: None where it is not kept."""

    kind: str
    before: Record | None
    after: Record | None


@dataclass
class Skipped:
    """A row that maps to no record (its fields do not make one): it is not served."""

    table: str
    id: int
    reason: str


class SourceState:
    """The candidates and the kept records of every served kind, with the indexes that find what
    depends on a record."""

    def __init__(self) -> None:
        self.candidates: dict[str, dict[int, Any]] = {kind: {} for kind in KINDS}
        self.kept: dict[str, dict[int, Any]] = {kind: {} for kind in KINDS}
        #: projects_project_users by id: (project, user).
        self.links: dict[int, tuple[int, int]] = {}
        self._users_of_project: dict[int, dict[int, int]] = {}  # project -> {link id: user}
        self._projects_of_user: dict[int, list[int]] = {}
        #: Candidates by what they name (the ids of those that name it) and by what must be unique:
        #: lists, since nearly all hold one id or a few (a set of one id is larger).
        self._children: dict[str, dict[int, list[int]]] = {name: {} for name in CHILD_INDEXES}
        self._unique: dict[str, dict[Any, list[int]]] = {kind: {} for kind in UNIQUE}
        #: By kind: (the index, the field of a candidate that names what it is under).
        self._indexed: dict[str, list[tuple[dict[int, list[int]], str]]] = {kind: [] for kind in KINDS}
        for name, (kind, fields) in CHILD_INDEXES.items():
            self._indexed[kind] += [(self._children[name], field) for field in fields]
        self._dirty: dict[str, set[int]] = {kind: set() for kind in KINDS}
        #: An id above every page candidate's, kept as they come (``next_page_id``).
        self._next_page = 1
        #: Commands whose rows were deleted since the last commit: kept if their build stays.
        self._deleted_commands: set[int] = set()

    # Building it whole.

    @classmethod
    def of_candidates(cls, candidates: Mapping[str, Iterable[Any]], links: dict[int, tuple[int, int]]) -> SourceState:
        """The state of these candidates (projects with their users already given by ``links``),
        kept as an import keeps them."""
        state = cls()
        state.links = dict(links)
        for identity, (project, user) in state.links.items():
            state._link(identity, project, user)
        for kind, records in candidates.items():
            for record in records:
                state._index(kind, record)
                state.candidates[kind][record.id] = record
        state._next_page = max(state.candidates["pages"], default=0) + 1
        by_pk = {kind: {identity: (kind, record) for identity, record in found.items()} for kind, found in state.candidates.items()}
        kept = keep_what_can_be_served(by_pk, DumpReport())
        state.kept = {kind: {record.id: record for record in kept[kind]} for kind in KINDS}
        return state

    def counts(self) -> dict[str, int]:
        return {kind: len(self.kept[kind]) for kind in KINDS}

    def records(self) -> dict[str, list]:
        return {kind: list(self.kept[kind].values()) for kind in KINDS}

    # Rows, as a transaction changes them.

    def row(self, table: str, identity: int, fields: Fields | None) -> Skipped | None:
        """Take a row of ``table`` as it is now (``fields``; None: deleted). What depends on it is
        judged again at ``commit``. A Skipped when its fields make no record."""
        if table == PROJECT_USERS:
            self._unlink(identity)
            if fields is not None:
                self.links[identity] = (fields["project"], fields["user"])
                self._link(identity, fields["project"], fields["user"])
            return None
        kind = KIND_OF_TABLE[table]
        if fields is None:
            if kind == "build_commands":
                self._dirty[kind].add(identity)  # judged at commit: cold storage, or gone with its build
                self._deleted_commands.add(identity)
                return None
            self._set(kind, identity, None)
            return None
        if kind == "projects":
            fields = {**fields, "users": list(self._users_of_project.get(identity, {}).values())}
        try:
            record = record_of(TABLES[table].model, identity, fields)
        except (msgspec.ValidationError, TypeError, ValueError) as error:
            self._set(kind, identity, None)
            return Skipped(table, identity, " ".join(str(error).split()))
        if kind == "build_commands":
            self._deleted_commands.discard(identity)
        self._set(kind, identity, record)
        return None

    def pages_read(self, version: int, pages: Iterable[Page]) -> None:
        """The pages of ``version`` are now ``pages`` (read from its build: ``snapshot follow
        --pages-from``): those it had are deleted. Judged at ``commit``."""
        for identity in list(self._children["pages_of_version"].get(version, ())):
            self._set("pages", identity, None)
        for page in pages:
            self._set("pages", page.id, page)

    def next_page_id(self) -> int:
        """An id above every page candidate's (a deleted page's id is not given again while the
        follower runs)."""
        return self._next_page

    def children(self, index: str, identity: int) -> Sequence[int]:
        """The ids of the candidates that index ``index`` (``CHILD_INDEXES``) finds under ``identity``."""
        return self._children[index].get(identity, ())

    def unchanged(self, table: str, identity: int, column: str) -> Any:
        """The value a row's column had, for an update that did not send it (a TOASTed value it
        left as it was): the candidate's field of the same name; KeyError when there is none."""
        candidate = self.candidates[KIND_OF_TABLE[table]].get(identity)
        name = TABLES[table].field(column)
        if candidate is None or name not in candidate.__struct_fields__:
            raise KeyError(f"{table}.{column}")
        return getattr(candidate, name)

    def truncate(self, table: str) -> None:
        """Every row of ``table`` deleted."""
        if table == PROJECT_USERS:
            for identity in list(self.links):
                self.row(table, identity, None)
            return
        kind = KIND_OF_TABLE[table]
        for identity in list(self.candidates[kind]):
            self._set(kind, identity, None)

    def commit(self) -> list[Change]:
        """Judge again what the rows taken since the last commit touch: the records whose kept
        form changed, in the order of the kinds."""
        for identity in self._deleted_commands:
            command = self.candidates["build_commands"].get(identity)
            if command is not None and command.build not in self.candidates["builds"]:
                self._set("build_commands", identity, None)
        self._deleted_commands = set()
        changes: list[Change] = []
        for kind in ORDER:
            dirty, self._dirty[kind] = self._dirty[kind], set()
            judge = JUDGES[kind]
            kept = self.kept[kind]
            for identity in sorted(dirty):
                before = kept.get(identity)
                after = judge(self, identity)
                if after == before:
                    continue
                if after is None:
                    del kept[identity]
                else:
                    kept[identity] = after
                changes.append(Change(kind, before, after))
                self._dependents_changed(kind, identity, before, after)
        return changes

    # Keeping the indexes.

    def _set(self, kind: str, identity: int, record: Any) -> None:
        old = self.candidates[kind].get(identity)
        if old is not None:
            self._unindex(kind, old)
        if record is None:
            self.candidates[kind].pop(identity, None)
            if kind == "builds":  # its commands go with it, those in cold storage too
                for command in list(self._children["commands_of_build"].get(identity, ())):
                    self._set("build_commands", command, None)
        else:
            self.candidates[kind][identity] = record
            self._index(kind, record)
            if kind == "pages" and identity >= self._next_page:
                self._next_page = identity + 1
        self._dirty[kind].add(identity)
        for record_now in (old, record):
            if record_now is not None and kind in UNIQUE:
                self._dirty[kind].update(self._unique[kind].get(UNIQUE[kind](record_now), ()))

    def _index(self, kind: str, record: Any) -> None:
        for index, field in self._indexed[kind]:
            index.setdefault(getattr(record, field), []).append(record.id)
        if kind in UNIQUE:
            self._unique[kind].setdefault(UNIQUE[kind](record), []).append(record.id)

    def _unindex(self, kind: str, record: Any) -> None:
        for index, field in self._indexed[kind]:
            _discard(index, getattr(record, field), record.id)
        if kind in UNIQUE:
            _discard(self._unique[kind], UNIQUE[kind](record), record.id)

    def _link(self, identity: int, project: int, user: int) -> None:
        self._users_of_project.setdefault(project, {})[identity] = user
        self._users_of_project[project] = dict(sorted(self._users_of_project[project].items()))
        self._projects_of_user.setdefault(user, []).append(project)
        self._relink(project)

    def _unlink(self, identity: int) -> None:
        found = self.links.pop(identity, None)
        if found is None:
            return
        project, user = found
        users = self._users_of_project.get(project, {})
        users.pop(identity, None)
        if not users:
            self._users_of_project.pop(project, None)
        if user not in users.values():
            _discard(self._projects_of_user, user, project)
        self._relink(project)

    def _relink(self, project: int) -> None:
        """A project's candidate with the users its links name now."""
        candidate = self.candidates["projects"].get(project)
        if candidate is not None:
            users = tuple(self._users_of_project.get(project, {}).values())
            if users != candidate.users:
                self._set("projects", project, msgspec.structs.replace(candidate, users=users))

    def _dependents_changed(self, kind: str, identity: int, before: Any, after: Any) -> None:
        """Mark what depends on a record whose kept form changed: what names it, where its being
        kept, or what they take from it, changed."""
        came_or_went = (before is None) != (after is None)
        if kind == "users":
            if came_or_went:
                self._dirty["projects"].update(self._projects_of_user.get(identity, ()))
        elif kind == "projects":
            if came_or_went:
                self._dirty["versions"].update(self._children["versions_of_project"].get(identity, ()))
                self._dirty["relationships"].update(self._children["relationships_of_project"].get(identity, ()))
            if came_or_went or before.documentation_type != after.documentation_type:
                for version in self._children["versions_of_project"].get(identity, ()):
                    self._dirty["pages"].update(self._children["pages_of_version"].get(version, ()))
        elif kind == "versions":
            if came_or_went or before.project != after.project:
                self._dirty["builds"].update(self._children["builds_of_version"].get(identity, ()))
                self._dirty["pages"].update(self._children["pages_of_version"].get(identity, ()))
        elif kind == "builds" and came_or_went:
            self._dirty["build_commands"].update(self._children["commands_of_build"].get(identity, ()))

    # Judging one record.

    def _first(self, kind: str, record: Any) -> bool:
        """Whether ``record`` is the first (lowest id) of the candidates that share what must be
        unique in its kind: an import keeps the first and leaves the others out."""
        return record.id == min(self._unique[kind][UNIQUE[kind](record)])

    def _user(self, identity: int) -> User | None:
        user = self.candidates["users"].get(identity)
        return user if user is not None and self._first("users", user) else None

    def _project(self, identity: int) -> Project | None:
        project = self.candidates["projects"].get(identity)
        if project is None or not self._first("projects", project):
            return None
        users = tuple(u for u in project.users if u in self.kept["users"])
        return project if users == project.users else msgspec.structs.replace(project, users=users)

    def _relationship(self, identity: int) -> ProjectRelationship | None:
        found = self.candidates["relationships"].get(identity)
        projects = self.kept["projects"]
        if found is None or found.parent not in projects or found.child not in projects or found.parent == found.child:
            return None
        return found if self._first("relationships", found) else None

    def _version(self, identity: int) -> Version | None:
        version = self.candidates["versions"].get(identity)
        if version is None or version.project not in self.kept["projects"]:
            return None
        return version if self._first("versions", version) else None

    def _build(self, identity: int) -> Build | None:
        build = self.candidates["builds"].get(identity)
        version = self.kept["versions"].get(build.version) if build is not None else None
        return filed_under(build, version) if version is not None else None

    def _command(self, identity: int) -> BuildCommand | None:
        command = self.candidates["build_commands"].get(identity)
        return command if command is not None and command.build in self.kept["builds"] else None

    def _page(self, identity: int) -> Page | None:
        page = self.candidates["pages"].get(identity)
        version = self.kept["versions"].get(page.version) if page is not None else None
        if version is None or not self._first("pages", page):
            return None
        return with_document(filed_under(page, version), self.kept["projects"][version.project])


def _discard(index: dict[Any, list[int]], key: Any, identity: int) -> None:
    found = index.get(key)
    if found is not None and identity in found:
        found.remove(identity)
        if not found:
            del index[key]


#: The candidates each index finds by what they name: index -> (their kind, the fields that name it).
CHILD_INDEXES: dict[str, tuple[str, tuple[str, ...]]] = {
    "versions_of_project": ("versions", ("project",)),
    "relationships_of_project": ("relationships", ("parent", "child")),
    "builds_of_version": ("builds", ("version",)),
    "commands_of_build": ("build_commands", ("build",)),
    "pages_of_version": ("pages", ("version",)),
}
JUDGES: dict[str, Callable[[SourceState, int], Any]] = {
    "users": SourceState._user,
    "projects": SourceState._project,
    "relationships": SourceState._relationship,
    "versions": SourceState._version,
    "builds": SourceState._build,
    "build_commands": SourceState._command,
    "pages": SourceState._page,
}


def coalesced(batches: Iterable[list[Change]]) -> list[Change]:
    """The changes of several commits in turn as one: each record from its first ``before`` to
    its last ``after``; one that ends as it began is left out."""
    found: dict[tuple[str, int], Change] = {}
    for changes in batches:
        for change in changes:
            identity = (change.after or change.before).id  # type: ignore[union-attr]
            earlier = found.get((change.kind, identity))
            found[(change.kind, identity)] = change if earlier is None else Change(change.kind, earlier.before, change.after)
    return [change for change in found.values() if change.before != change.after]


