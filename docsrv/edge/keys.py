"""Purge keys: what a reply shows, named so that a cache can purge exactly the replies a change
of snapshot touches (``docsrv snapshot diff`` prints the keys of a change).

Sent as ``Surrogate-Key`` (space separated) and ``Cache-Tag`` (comma separated). The scheme
(docs/operations.md, "Purge keys"):

- ``v1``, ``v2``, ``search``, ``openapi``: every reply of an API, of the searches, the document;
- ``project-<slug>``, ``version-<project>-<version>``, ``build-<id>``, ``file-<id>``,
  ``user-<id>``: every reply that shows that object, or a part of it;
- ``list-<api>-<resource>[-<filter>-<value>...]``: every page of one list, the endpoint and its
  filters without paging (``list-v2-version-project-pip-active-true``); a change of the list's
  members or of their order purges it, since every page of it may shift;
- ``big-<list key>``: the pages of that list whose keys did not fit in a header (below).

A long list could name thousands of objects, more than caches take in one header (Fastly takes
16 KB, nginx's default proxy buffers less), so the keys of a reply are kept under MAX_BYTES:
past it, versions, builds, files and users are named by their projects, and past that again,
the reply carries only its API's, its list's and its ``big-`` key. ``snapshot diff`` names the
``big-`` key of every list that shows an object whose content changed, so such a page is purged
with the objects it could not name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import NamedTuple

from ..snapshot.records import Build, PageHead, Project, User, Version
from ..store.changes import Applied
from ..store.loaded import Store

MAX_BYTES = 8000
#: Keys of one object (everything else names an API, a list, or a list's overflow).
OBJECT_PREFIXES = ("project-", "version-", "build-", "file-", "user-")
FINE_PREFIXES = ("version-", "build-", "file-", "user-")
BIG = "big-"
#: A filter value goes into a key as it is when it is made of these (and short), else as a digest.
PLAIN_VALUE = re.compile(r"[A-Za-z0-9._-]{1,64}")


# The key of each object, spelled once: the replies carry them (below) and ``snapshot diff``
# names them (``edge/diff.py``).


def project_key(slug: str) -> str:
    return f"project-{slug}"


def version_key(project_slug: str, version_slug: str) -> str:
    return f"version-{project_slug}-{version_slug}"


def build_key(build_id: int) -> str:
    return f"build-{build_id}"


def file_key(page_id: int) -> str:
    return f"file-{page_id}"


def user_key(user_id: int) -> str:
    return f"user-{user_id}"


# The keys of a reply that shows an object: its own, and those of what it shows a part of.


def project_keys(project: Project) -> tuple[str, ...]:
    return (project_key(project.slug),)


def version_keys(store: Store, version: Version) -> tuple[str, ...]:
    return version_slug_keys(store.projects[version.project], version.slug)


def version_slug_keys(project: Project, version_slug: str) -> tuple[str, ...]:
    """The keys of a project's version, by its slug (doc search names versions by slug)."""
    return (project_key(project.slug), version_key(project.slug, version_slug))


def build_keys(store: Store, build: Build) -> tuple[str, ...]:
    return (*version_keys(store, store.versions[build.version]), build_key(build.id))


def page_keys(store: Store, page: PageHead) -> tuple[str, ...]:
    return (*version_keys(store, store.versions[page.version]), file_key(page.id))


def user_keys(user: User) -> tuple[str, ...]:
    return (user_key(user.id),)


def key_value(value: str | int | bool) -> str:
    """A filter's value as a part of a key: as it is when plain, else ``~`` and a digest of it
    (a key takes no space or comma, and stays short)."""
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if PLAIN_VALUE.fullmatch(text):
        return text
    return "~" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@dataclass(frozen=True)
class ListFamily:
    """The lists of one endpoint: their keys, by the filters they are asked with."""

    api: str
    resource: str
    #: The filters, in the order they appear in a key.
    filters: tuple[str, ...]

    def key(self, values: Mapping[str, str | int | bool | None]) -> str:
        """The key of the list with these filter values (None: the filter is not given)."""
        parts = [f"list-{self.api}-{self.resource}"]
        for name in self.filters:
            value = values.get(name)
            if value is not None:
                parts.append(f"{name}-{key_value(value)}")
        return "-".join(parts)

    def keys_showing(self, values: Mapping[str, str | int | bool]) -> list[str]:
        """The keys of every list of this endpoint that shows an object with these values: every
        choice of filters the object matches (it is in every list whose filters it matches)."""
        names = [n for n in self.filters if n in values]
        return [self.key({n: values[n] for n in chosen}) for size in range(len(names) + 1) for chosen in combinations(names, size)]


V2_PROJECTS = ListFamily("v2", "project", ("slug",))
V2_VERSIONS = ListFamily("v2", "version", ("project", "active"))
V2_BUILDS = ListFamily("v2", "build", ("project", "commit"))
V1_PROJECTS = ListFamily("v1", "project", ("slug", "users"))
V1_VERSIONS = ListFamily("v1", "version", ("project_id", "project", "slug", "active"))
V1_BUILDS = ListFamily("v1", "build", ("project",))
V1_FILES = ListFamily("v1", "file", ())
V1_USERS = ListFamily("v1", "user", ("username",))
#: The keys of the lists that show one version (``version_list_keys``).
KEYS_PER_VERSION = 2 ** len(V2_VERSIONS.filters) + 2 ** len(V1_VERSIONS.filters)
#: Searches are lists too (of hits, by their query as well): the diff names them all by ``search``
#: when any page changes, since a page moves every score.
V2_DOCSEARCH = ListFamily("v2", "docsearch", ("project", "version"))
V1_FILE_SEARCH = ListFamily("v1", "file-search", ())
V1_ANCHOR_SEARCH = ListFamily("v1", "file-anchor", ())


# The keys of every list that shows an object, spelled once: the replies carry them, ``snapshot
# diff`` and the changesets applied in memory name them.


def project_list_keys(project: Project) -> list[str]:
    """The keys of every list that shows this project."""
    keys = V2_PROJECTS.keys_showing({"slug": project.slug}) + V1_PROJECTS.keys_showing({"slug": project.slug})
    for user in project.users:
        keys += V1_PROJECTS.keys_showing({"slug": project.slug, "users": user})
    return keys


def version_list_keys(project_slug: str, version: Version) -> list[str]:
    """The keys of every list that shows this version of the project ``project_slug``."""
    return V2_VERSIONS.keys_showing({"project": project_slug, "active": version.active}) + V1_VERSIONS.keys_showing(
        {"project_id": version.project, "project": project_slug, "slug": version.slug, "active": version.active}
    )


def user_list_keys(user: User) -> list[str]:
    """The keys of every list that shows this user."""
    return V1_USERS.keys_showing({"username": user.username})


def build_list_keys(project_slug: str, commit: str) -> list[str]:
    """The keys of every list that shows a build of this project and commit."""
    return V2_BUILDS.keys_showing({"project": project_slug, "commit": commit}) + V1_BUILDS.keys_showing({"project": project_slug})


def build_change_keys(before: tuple[str, Build] | None, after: tuple[str, Build] | None) -> list[str]:
    """The keys of every reply that a change of one build touches. ``before`` and ``after``: the
    slug of its project and the build, where it is served (None where it is not). A build that
    joins or leaves its lists, or moves in them, touches every page of them; one edited in place
    touches its own replies, and the pages of its lists that could not name it (their ``big-`` key)."""
    served = [found for found in (before, after) if found is not None]
    if not served:
        return []
    keys = [build_key(served[0][1].id)]
    if before is not None and after is not None and placed(before) == placed(after):
        return keys + [BIG + key for key in build_list_keys(after[0], after[1].commit)]
    for slug, build in served:
        keys += build_list_keys(slug, build.commit)
    return keys


def version_placed(version: Version) -> tuple:
    """What decides which version lists a version is in, and where."""
    return version.project, version.slug, version.active, version.verbose_name


def version_change_keys(project_slug: str, before: Version | None, after: Version | None) -> list[str]:
    """The keys of every reply that a change of one served version touches (in place: the same
    project and slug; None where it is not served, new or gone): its own replies (and those that
    show it: its builds and files), every page of its lists when it joins, leaves or moves in
    them, else their pages that could not name it."""
    if before is None or after is None:
        version = after or before
        assert version is not None
        return [version_key(project_slug, version.slug), *version_list_keys(project_slug, version)]
    keys = [version_key(project_slug, after.slug)]
    if version_placed(before) != version_placed(after):
        return keys + version_list_keys(project_slug, before) + version_list_keys(project_slug, after)
    return keys + [BIG + key for key in version_list_keys(project_slug, after)]


#: Keys by why they are purged, as ``snapshot diff --json`` groups them: ``changed``, ``added``,
#: ``removed`` (an object's own keys), ``lists`` (lists whose members or order changed), and
#: ``big`` (lists whose pages could not name a changed object: their ``big-`` keys are purged).
Grouped = list[tuple[str, list[str]]]


class ProjectShown(NamedTuple):
    """What shows a project on one side of a change: its public versions, the commits of its
    public builds (read only when its links move: a new slug or language), and whether it has
    public pages."""

    versions: Sequence[Version]
    commits: Iterable[str]
    pages: bool


def project_change_keys(before: Project | None, after: Project | None, sides: Iterable[ProjectShown] = ()) -> Grouped:
    """The keys of every reply that a change of one public project touches (None where it is not
    public): its own, its lists (all their pages when it came, went, or its slug or users
    changed), and, for one public before and after, the lists of what shows it inside (``sides``,
    before and after): its versions and files embed it, its builds show its slug and language
    (in ``docs_url``), search hits link to its pages. Their own replies carry the project's key;
    their lists' pages may carry only a ``big-`` key, or, when the slug changed, are lists
    filtered by it. A project whose versions' lists would pass MAX_CHANGE_KEYS names every reply
    (``EVERY_REPLY``) instead."""
    if before is None or after is None:
        project = after or before
        assert project is not None
        return [("added" if before is None else "removed", [project_key(project.slug)]), ("lists", project_list_keys(project))]
    sides = list(sides)
    if beyond_bound(len(shown.versions) for shown in sides):
        return [("changed", list(EVERY_REPLY))]  # a project of tens of thousands of versions: not named one by one
    found: Grouped = [("changed", list({project_key(before.slug), project_key(after.slug)}))]
    if (before.slug, before.users) != (after.slug, after.users):
        found.append(("lists", project_list_keys(before) + project_list_keys(after)))
    else:
        found.append(("big", project_list_keys(after)))
    moved = before.slug != after.slug
    relocated = moved or before.language != after.language
    for slug, shown in zip((before.slug, after.slug), sides, strict=True):
        lists = [key for version in shown.versions for key in version_list_keys(slug, version)]
        if relocated:
            lists += [key for commit in shown.commits for key in build_list_keys(slug, commit)]
        found.append(("lists" if moved else "big", lists))
        if shown.pages:
            found.append(("big", [V1_FILES.key({})]))
            if relocated:
                found.append(("changed", ["search"]))
    return found


def user_change_keys(before: User | None, after: User | None) -> Grouped:
    """The keys of every reply that a change of one user touches (None where there is none):
    its own, and its lists (all their pages when it came, went or changed its name)."""
    if before is None or after is None:
        user = after or before
        assert user is not None
        return [("added" if before is None else "removed", [user_key(user.id)]), ("lists", user_list_keys(user))]
    if before.username != after.username:
        return [("changed", [user_key(after.id)]), ("lists", user_list_keys(before) + user_list_keys(after))]
    return [("changed", [user_key(after.id)]), ("big", user_list_keys(after))]


def page_change_keys(removed: Iterable[int], added: Iterable[int], changed: Iterable[int]) -> Grouped:
    """The keys of every reply that a change of public pages touches (by id: those that went,
    came, and changed, their text alone included), search aside: each page's own, and the list
    of files (all its pages when a page came or went)."""
    gone, new = list(map(file_key, removed)), list(map(file_key, added))
    return [("removed", gone), ("added", new), ("changed", list(map(file_key, changed))),
            ("lists" if gone or new else "big", [V1_FILES.key({})])]


def flat(grouped: Grouped) -> list[str]:
    """The keys to purge, whatever their group (a ``big`` list purged by its ``big-`` key)."""
    return [BIG + key if group == "big" else key for group, keys in grouped for key in keys]


def applied_keys(done: Applied) -> list[str]:
    """The keys of every reply a changeset applied in memory touches, each once; ``EVERY_REPLY``
    when the projects it edits show more versions than ``beyond_bound`` allows, or past
    MAX_CHANGE_KEYS, as the changeset's header names them (``change_keys``): a worker notes them
    in its reply cache on its event loop (``ReplyCache.advance``)."""
    named = within_bound(_applied_keys(done))
    return list(EVERY_REPLY) if named is None else list(named)


def _applied_keys(done: Applied) -> Iterator[str]:
    edited = [(after or before).id for before, after in done.projects if before is not None and after is not None]
    if beyond_bound(len(store.versions_of_project.get(identity, ())) for identity in edited for store in (done.was, done.store)):
        yield from EVERY_REPLY
        return
    for build_before, build_after in done.builds.values():
        yield from build_change_keys(build_before, build_after)
    for slug, version_before, version_after in done.versions:
        yield from version_change_keys(slug, version_before, version_after)
    for before, after in done.projects:
        identity = (after or before).id  # type: ignore[union-attr]
        sides = [ProjectShown(store.versions_of_project.get(identity, []), (b.commit for b in store.builds_of_project.get(identity, [])),
                              identity in store.projects_with_pages) for store in (done.was, done.store)]
        yield from flat(project_change_keys(before, after, sides))
    for user_before, user_after in done.users:
        yield from flat(user_change_keys(user_before, user_after))
    if done.pages:
        yield from flat(page_change_keys(*page_ids(done.pages)))
    if done.relationships or done.pages:
        yield "search"  # which subprojects a doc search covers, as the diff names it; and a page's words move every score


def page_ids(changed: list[tuple[PageHead | None, PageHead | None]]) -> tuple[list[int], list[int], list[int]]:
    """The ids of pages changed (before, after, None where one is not served): those that went, came, and changed."""
    found: tuple[list[int], list[int], list[int]] = ([], [], [])
    for before, after in changed:
        if after is None:
            found[0].append(before.id)  # type: ignore[union-attr]
        else:
            found[1 if before is None else 2].append(after.id)
    return found


def placed(build: tuple[str, Build]) -> tuple:
    """What decides which build lists show a build, and where."""
    slug, found = build
    return slug, found.date, found.commit


def purge_keys(keys: Iterable[str], list_key: str | None = None) -> list[str]:
    """The keys to send for a reply that shows ``keys``: all of them while they fit in MAX_BYTES;
    past that (a list page), projects instead of finer objects and the list's ``big-`` key; then
    the API's and the list's keys alone, with its ``big-`` key."""
    named = list(dict.fromkeys(keys))
    if size(named) <= MAX_BYTES:
        return named
    overflow = [BIG + list_key] if list_key is not None else []
    coarse = [k for k in named if not k.startswith(FINE_PREFIXES)] + overflow
    if size(coarse) <= MAX_BYTES:
        return coarse
    return [k for k in named if not k.startswith(OBJECT_PREFIXES)] + overflow


#: The most purge keys a changeset names: past it, those of every reply of both APIs and of the
#: searches. A change of a project with tens of thousands of versions names the lists of each
#: (hundreds of thousands of keys, megabytes in the changeset's header): no cache takes a purge
#: that large sooner than it refills, and the changeset would pass its bound of size.
MAX_CHANGE_KEYS = 20_000
#: Keys that every reply carries one of: its API's, or the searches'.
EVERY_REPLY = ["search", "v1", "v2"]


def beyond_bound(versions_shown: Iterable[int]) -> bool:
    """Whether projects edited in place, which show these numbers of versions (on each side of a
    change), name more keys than a changeset may: each names every list of each of its versions."""
    return sum(versions_shown) * KEYS_PER_VERSION > MAX_CHANGE_KEYS


def change_keys(keys: Iterable[str]) -> list[str]:
    """The purge keys a changeset names for a change whose replies show ``keys``: each once, sorted;
    past MAX_CHANGE_KEYS, ``EVERY_REPLY``."""
    named = within_bound(keys)
    return list(EVERY_REPLY) if named is None else sorted(named)


def within_bound(keys: Iterable[str]) -> set[str] | None:
    """``keys``, each once, or None past MAX_CHANGE_KEYS (a generator is not read past it)."""
    named: set[str] = set()
    for key in keys:
        named.add(key)
        if len(named) > MAX_CHANGE_KEYS:
            return None
    return named


def size(keys: list[str]) -> int:
    return sum(len(k) + 1 for k in keys)
