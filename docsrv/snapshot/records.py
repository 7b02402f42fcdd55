"""The snapshot's schema: one msgspec Struct per kind of record.

Decoding validates every record at the edge (types, enumerations, time zones); nothing
inside docsrv checks a field's type again. The Structs are frozen and, where they hold no
mutable containers, untracked by the garbage collector (``gc=False``): a large snapshot holds
millions of them, and the collector would otherwise walk them all on every full pass.
Sequences are tuples for the same reason.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

FORMAT = "docsrv-snapshot"
FORMAT_VERSION = 1

#: A timezone-aware datetime; a naive one is refused when the snapshot is decoded.
AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]
#: The largest id: the service's keys are PostgreSQL's bigint, and docsrv keeps ids in arrays of
#: signed 64-bit integers.
MAX_ID = 2**63 - 1
Id = Annotated[int, msgspec.Meta(ge=1, le=MAX_ID)]
Slug = Annotated[str, msgspec.Meta(min_length=1, max_length=255, pattern=r"^[^/\s?#]+$")]

Privacy = Literal["public", "private"]
#: html, pdf and epub; man and dash are legacy types that old databases still hold, served as recorded.
BuildType = Literal["html", "pdf", "epub", "man", "dash"]
BuildState = Literal["triggered", "building", "installing", "cloning", "finished"]
VersionType = Literal["tag", "branch", "external", "unknown"]
DownloadFormat = Literal["pdf", "htmlzip", "epub"]


class Record(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """Base of every snapshot record: an id, unique within its kind."""

    id: Id


class User(Record, frozen=True, gc=False):
    """A maintainer. Only ``id`` and ``username`` are ever served."""

    username: Slug
    email: str = ""
    first_name: str = ""
    last_name: str = ""


class Project(Record, frozen=True, gc=False):
    name: str
    slug: Slug
    pub_date: AwareDatetime
    modified_date: AwareDatetime
    description: str = ""
    language: str = "en"
    programming_language: str = "words"
    repo: str = ""
    repo_type: str = "git"
    default_version: str = "latest"
    default_branch: str = "main"
    documentation_type: str = "generator"
    users: tuple[Id, ...] = ()
    privacy_level: Privacy = "public"
    # Fields that only v1 shows.
    analytics_code: str = ""
    copyright: str = ""
    crate_url: str = ""
    framework_packages_url: str = ""
    project_url: str = ""
    requirements_file: str = ""
    suffix: str = ".rst"
    theme: str = "default"
    use_virtualenv: bool = False
    version: str = ""


class ProjectRelationship(Record, frozen=True, gc=False):
    """A subproject: ``child`` is served under ``parent`` (the original's projects.projectrelationship).
    Doc search on the parent also searches its public subprojects (DECISIONS.md section 3)."""

    parent: Id
    child: Id
    alias: str | None = None


class Version(Record, frozen=True, gc=False):
    project: Id
    slug: Slug
    verbose_name: str
    identifier: str = ""
    active: bool = True
    built: bool = False
    uploaded: bool = False
    type: VersionType = "unknown"
    privacy_level: Privacy = "public"
    downloads: tuple[DownloadFormat, ...] = ()


class Build(Record, frozen=True, gc=False):
    project: Id
    version: Id
    date: AwareDatetime
    length: Annotated[int, msgspec.Meta(ge=0)] = 0
    type: BuildType = "html"
    state: BuildState = "finished"
    success: bool = True
    error: str = ""
    commit: str = ""
    # Fields that only v1 shows.
    output: str = ""
    setup: str = ""
    setup_error: str = ""


class BuildCommand(Record, frozen=True, gc=False):
    build: Id
    command: str
    start_time: AwareDatetime
    end_time: AwareDatetime
    description: str = ""
    exit_code: int = 0
    output: str = ""


class Section(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A section of a page: its anchor id, heading text and where its text starts in the page's
    (in characters; its text runs to the next section's start), stored as ``[id, title, start]``.
    A snapshot written before sections had their place says ``[id, title]``: such a section has
    no text of its own (``start`` -1)."""

    id: str
    title: str
    start: Annotated[int, msgspec.Meta(ge=-1)] = -1


#: Roles of named entries that are not objects of a Sphinx domain: a document (its title), a
#: section label, a glossary term, an entry of the general index.
DOCUMENT_ROLE = "std:doc"
LABEL_ROLE = "std:label"
TERM_ROLE = "std:term"
INDEX_ROLE = "index"


class Entry(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A name a page defines, stored as ``[role, name, anchor, priority, title]``: an object of a
    Sphinx domain or a glossary term (from ``objects.inv``: role ``py:function``, ``std:term``,
    ...), or an entry of the general index (role ``index``). A query equal to it finds its page
    first. ``priority`` is the inventory's: 0 important, 1 default, 2 unimportant, -1 hidden."""

    role: Annotated[str, msgspec.Meta(min_length=1)]
    name: Annotated[str, msgspec.Meta(min_length=1)]
    anchor: str = ""
    priority: int = 1
    #: The name as the documentation displays it, when it differs (a term's or a label's title).
    title: str = ""


def document_of(path: str, dirhtml: bool = False) -> str:
    """The Sphinx document name of a page at ``path``: without the builder's suffix, a dirhtml
    page by its directory (``cli/pip_install/`` and, when ``dirhtml``, ``cli/pip_install/index.html``
    are ``cli/pip_install``; the root page is ``index``)."""
    path = path.lstrip("/")
    if dirhtml and (path == "index.html" or path.endswith("/index.html")):
        path = path[: -len("index.html")]
    if not path:
        return "index"
    if path.endswith("/"):
        return path[:-1]
    stem, dot, suffix = path.rpartition(".")
    return stem if dot and suffix in ("html", "htm") and stem else path


class PageHead(Record, frozen=True, gc=False, forbid_unknown_fields=False):
    """A page as a server keeps it once its search index is built: all but the text, sections and
    entries, which the index holds (``search/highlight.py``, ``search/named_entries.py``). Decoding skips them
    without making objects of them, and checks nothing it skips: a current index was built from
    these very bytes, fully checked."""

    project: Id
    version: Id
    #: Relative to the version's URL; empty for the root page of a dirhtml build.
    path: str
    title: str = ""
    #: The page's Sphinx document name (``install``, ``cli/pip_install``, ``index``): what doc
    #: search shows as its path. Empty in snapshots written before it was recorded: then
    #: ``document_name`` derives it from the path.
    document: str = ""

    @property
    def document_name(self) -> str:
        return self.document or document_of(self.path)


class Page(PageHead, frozen=True, gc=False, forbid_unknown_fields=True):
    """A documentation page (v1 calls it a File) of one version of a project."""

    text: str = ""
    #: Read only to build the search index, as ``entries``: a server keeps neither in memory.
    sections: tuple[Section, ...] = ()
    entries: tuple[Entry, ...] = ()


class FileDigest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one file of a snapshot holds: its size in bytes and the SHA-256 of its bytes."""

    size: Annotated[int, msgspec.Meta(ge=0)]
    sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]


#: The name of a file of a snapshot: one plain name in its directory (no path, not hidden).
FileName = Annotated[str, msgspec.Meta(max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


#: A file of a snapshot's search index, by its path in ``index/``: a plain name, or one in
#: directories of the index (``shards/2048/highlight/``), each a plain name of letters and digits.
IndexFileName = Annotated[str, msgspec.Meta(max_length=200, pattern=r"^([a-z0-9]+/){0,3}[A-Za-z0-9][A-Za-z0-9._-]*$")]


#: Where a snapshot keeps its search index (``Manifest.index`` lists its files).
INDEX = "index"


#: A snapshot's identity, and the name of its directory where a pull keeps it: never "." or "..",
#: never hidden (what a pull keeps for itself in that directory begins with ".").
SnapshotName = Annotated[str, msgspec.Meta(max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
#: Base URL of the hosted documentation, e.g. ``https://docs.example.org`` (no path).
PublicUrl = Annotated[str, msgspec.Meta(pattern=r"^https?://[^/\s]+$")]


class Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    format: str
    format_version: int
    name: SnapshotName
    created_at: AwareDatetime
    public_url: PublicUrl
    counts: dict[str, Annotated[int, msgspec.Meta(ge=0)]]
    description: str = ""
    #: Every record file by name, with its size and digest: a snapshot is complete when its files
    #: match. docsrv writes it for every snapshot it makes; a hand-made manifest may leave it out.
    files: dict[FileName, FileDigest] = msgspec.field(default_factory=dict)
    #: The search index ``docsrv index`` built in ``index/``, file by file: published and pulled
    #: with the records, so that a replica that pulls the snapshot builds none. Optional.
    index: dict[IndexFileName, FileDigest] = msgspec.field(default_factory=dict)
    #: Where the snapshot stands in its origin's sequence (``docsrv snapshot publish``): a base
    #: published whole, or the product of changeset N. 0 for a snapshot never published.
    sequence: Annotated[int, msgspec.Meta(ge=0)] = 0


#: Every kind of record, by the stem of its file in the snapshot directory, in load order.
KINDS: dict[str, type[Record]] = {
    "users": User,
    "projects": Project,
    "relationships": ProjectRelationship,
    "versions": Version,
    "builds": Build,
    "build_commands": BuildCommand,
    "pages": Page,
}
#: Kinds a snapshot may leave out (written by every docsrv that knows them): none of that kind.
OPTIONAL_KINDS = frozenset({"relationships"})
