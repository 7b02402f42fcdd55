"""A snapshot from a Django data dump (``manage.py dumpdata``) of the hosting service.

Takes the JSON list that ``dumpdata`` writes (or its ``--format jsonl`` lines), streamed record
by record with ijson, so the dump is never held whole. Each record becomes a snapshot record
as soon as it is read, with the defaults of the original service's models for the fields a
dump leaves out; relations are checked once everything is read. Secrets are never carried
over: a user keeps id, username, email and names, and no password hash or permission.
The snapshot is written to a temporary directory that takes its name only when complete.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from pathlib import Path
from typing import Any, BinaryIO

import ijson
import msgspec
from ijson.common import ObjectBuilder

from ..errors import CommandError
from ..utils.progress import progress_bar, wanted
from .errors import DECODE_ERRORS, Problem, SnapshotError
from .records import (
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    Build,
    BuildCommand,
    Manifest,
    Page,
    Project,
    ProjectRelationship,
    User,
    Version,
    document_of,
)
from .write import RecordWriter, built_aside, write_manifest

#: The original service's names of documentation types, and the spec's neutral ones.
DOCUMENTATION_TYPES = {
    "sphinx": "generator",
    "sphinx_html": "generator_html",
    "sphinx_htmldir": "generator_htmldir",
    "sphinx_singlehtml": "generator_singlehtml",
}
PAGE_MODELS = {"projects.importedfile", "projects.htmlfile", "projects.importedhtmlfile"}


@dataclass
class DumpReport:
    counts: dict[str, int] = field(default_factory=dict)
    #: Records of models docsrv does not serve, by model.
    unknown: Counter = field(default_factory=Counter)
    #: (model, pk, reason) of every record of a served model that was left out.
    skipped: list[tuple[str, Any, str]] = field(default_factory=list)
    #: (model, pk, what was done) of records kept with a reference fixed or dropped.
    notes: list[tuple[str, Any, str]] = field(default_factory=list)

    def skip(self, model: str, pk: Any, reason: str) -> Any:
        """Record a record left out; None, for the caller that keeps nothing of it."""
        self.skipped.append((model, pk, reason))
        return None

    def note(self, model: str, pk: Any, what: str) -> None:
        self.notes.append((model, pk, what))


#: What must be unique within a kind of record; a later record that repeats it is left out.
UNIQUE: dict[str, Callable[[Any], Any]] = {
    "users": attrgetter("username"),
    "projects": attrgetter("slug"),
    "relationships": attrgetter("parent", "child"),
    "versions": attrgetter("project", "slug"),
    "pages": attrgetter("version", "path"),
}


#: The deepest nesting a dump may hold: the list, a record, its fields, a field's value and
#: what a JSON field of the original's models holds (a build's config, some levels deep).
#: Deeper is no dump of the original's; refused at once, in bounded memory (building nested
#: values with ijson costs memory quadratic in their depth).
MAX_DEPTH = 32


def read_dump(path: Path) -> Iterator[Any]:
    """The records of one dump file, one at a time (a JSON list, or JSON Lines). Malformed JSON,
    or JSON nested deeper than MAX_DEPTH, is a CommandError of one line naming the file and the
    record (or line) where it is."""
    with open(path, "rb") as data:
        head = data.read(64).lstrip()
        data.seek(0)
        if head.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise CommandError(f"{path}: UTF-16 text; a dump is UTF-8 JSON, as dumpdata writes it (iconv -f UTF-16 -t UTF-8 converts it)")
        if head.startswith(b"["):
            yield from list_items(data, path)
        else:
            yield from json_lines(data, path)


def list_items(data: BinaryIO, path: Path) -> Iterator[Any]:
    """The items of a JSON list, each built as soon as it ends."""
    depth = 0
    count = 0
    builder: ObjectBuilder | None = None
    try:
        for event, value in ijson.basic_parse(data, use_float=True):
            if event == "start_map" or event == "start_array":
                depth += 1
                if depth > MAX_DEPTH:
                    raise CommandError(f"{path}: record {count + 1} nests deeper than {MAX_DEPTH} levels: no dump of the original's")
                if depth == 2:
                    builder = ObjectBuilder()
            elif event == "end_map" or event == "end_array":
                depth -= 1
                if depth == 1 and builder is not None:
                    builder.event(event, value)
                    count += 1
                    yield builder.value
                    builder = None
                    continue
            if builder is not None:
                builder.event(event, value)
            elif depth == 1 and event != "start_array":  # a scalar item: no record, counted as such
                count += 1
                yield value
    except (ijson.JSONError, UnicodeDecodeError) as error:
        raise CommandError(f"{path}: invalid JSON after record {count}: {one_line(error)}") from None


def json_lines(data: BinaryIO, path: Path) -> Iterator[Any]:
    decoder = msgspec.json.Decoder()
    for number, line in enumerate(data, start=1):
        if line.strip():
            try:
                record = decoder.decode(line)
            except DECODE_ERRORS as error:
                raise CommandError(f"{path}:{number}: invalid JSON: {one_line(error)}") from None
            except RecursionError:
                raise too_deep(path, number) from None
            if nesting(record) > MAX_DEPTH - 1:
                raise too_deep(path, number)
            yield record


def too_deep(path: Path, line: int) -> CommandError:
    return CommandError(f"{path}:{line}: the record nests deeper than {MAX_DEPTH - 1} levels: no dump of the original's")


def nesting(value: Any) -> int:
    """How deep containers nest in ``value`` (a scalar: 0). msgspec has decoded it already, with a
    depth limit of its own, so the recursion here is bounded."""
    if isinstance(value, dict):
        return 1 + max(map(nesting, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(nesting, value), default=0)
    return 0


def one_line(error: Exception) -> str:
    return " ".join(str(error).split())[:300]


def text(value: Any, default: str = "") -> Any:
    """A Django text field: None (a null column) becomes the model's default."""
    return default if value is None else value


def moment(value: Any) -> Any:
    """A Django datetime: naive ones (USE_TZ off) are taken as UTC."""
    if isinstance(value, str) and value and not value.endswith("Z") and "+" not in value[10:] and "-" not in value[10:]:
        return value + "Z"
    return value


def privacy(value: Any) -> str:
    """The original's API served ``public`` only: ``protected``, and any level docsrv does not
    know, are private (DECISIONS.md section 1). A dump older than the field: public, its default."""
    return "public" if value is None or value == "public" else "private"


def relationship(pk: Any, f: dict) -> dict:
    return {"id": pk, "parent": f.get("parent"), "child": f.get("child"), "alias": f.get("alias") or None}


def user(pk: Any, f: dict) -> dict:
    return {
        "id": pk,
        "username": f.get("username"),
        "email": text(f.get("email")),
        "first_name": text(f.get("first_name")),
        "last_name": text(f.get("last_name")),
    }


def project(pk: Any, f: dict) -> dict:
    documentation_type = text(f.get("documentation_type"), "sphinx")
    return {
        "id": pk,
        "name": f.get("name"),
        "slug": f.get("slug"),
        "pub_date": moment(f.get("pub_date")),
        "modified_date": moment(f.get("modified_date") or f.get("pub_date")),
        "description": text(f.get("description")),
        "language": text(f.get("language"), "en"),
        "programming_language": text(f.get("programming_language"), "words"),
        "repo": text(f.get("repo")),
        "repo_type": text(f.get("repo_type"), "git"),
        "default_version": text(f.get("default_version"), "latest"),
        "default_branch": text(f.get("default_branch")),
        "documentation_type": DOCUMENTATION_TYPES.get(documentation_type, documentation_type),
        "users": f.get("users") or [],
        "privacy_level": privacy(f.get("privacy_level")),
        "analytics_code": text(f.get("analytics_code")),
        "copyright": text(f.get("copyright")),
        "crate_url": text(f.get("crate_url")),
        "framework_packages_url": text(f.get("django_packages_url") or f.get("framework_packages_url")),
        "project_url": text(f.get("project_url")),
        "requirements_file": text(f.get("requirements_file")),
        "suffix": text(f.get("suffix"), ".rst"),
        "theme": text(f.get("theme"), "default"),
        "use_virtualenv": bool(f.get("use_virtualenv") or False),
        "version": text(f.get("version")),
    }


def version(pk: Any, f: dict) -> dict:
    downloads = [kind for kind in ("pdf", "htmlzip", "epub") if f.get(f"has_{kind}")]
    slug = f.get("slug")
    return {
        "id": pk,
        "project": f.get("project"),
        "slug": slug,
        "verbose_name": text(f.get("verbose_name"), slug or ""),
        "identifier": text(f.get("identifier")),
        "active": bool(f.get("active") or False),
        "built": bool(f.get("built") or False),
        "uploaded": bool(f.get("uploaded") or False),
        "type": text(f.get("type"), "unknown"),
        "privacy_level": privacy(f.get("privacy_level")),
        "downloads": downloads,
    }


def build(pk: Any, f: dict) -> dict:
    return {
        "id": pk,
        "project": f.get("project"),
        "version": f.get("version"),
        "date": moment(f.get("date")),
        "length": f.get("length") or 0,
        "type": text(f.get("type"), "html"),
        "state": text(f.get("state"), "finished"),
        "success": True if f.get("success") is None else f.get("success"),
        "error": text(f.get("error")),
        "commit": text(f.get("commit")),
        "output": text(f.get("output")),
        "setup": text(f.get("setup")),
        "setup_error": text(f.get("setup_error")),
    }


def command(pk: Any, f: dict) -> dict:
    start = moment(f.get("start_time"))
    return {
        "id": pk,
        "build": f.get("build"),
        "command": text(f.get("command")),
        "description": text(f.get("description")),
        "start_time": start,
        "end_time": moment(f.get("end_time")) or start,
        "exit_code": f.get("exit_code") or 0,
        "output": text(f.get("output")),
    }


def page(pk: Any, f: dict) -> dict:
    path = text(f.get("path")).lstrip("/")
    return {
        "id": pk,
        "project": f.get("project"),
        "version": f.get("version"),
        "path": path,
        "title": text(f.get("title"), text(f.get("name"))),
    }


#: model label -> (kind of record, the Struct, the mapping of its fields)
MODELS = {
    "auth.user": ("users", User, user),
    "projects.project": ("projects", Project, project),
    "projects.projectrelationship": ("relationships", ProjectRelationship, relationship),
    "builds.version": ("versions", Version, version),
    "builds.build": ("builds", Build, build),
    "builds.buildcommandresult": ("build_commands", BuildCommand, command),
    **{label: ("pages", Page, page) for label in PAGE_MODELS},
}


def record_of(label: str, pk: int, fields: dict) -> Any:
    """The snapshot record of a record of the served model ``label`` (``MODELS``) with these
    ``fields``, as ``dumpdata`` writes them: mapped with the model's defaults, and checked
    (msgspec.ValidationError when they make none). Whatever else reads the service's rows
    (``source/``) maps them here too."""
    _kind, cls, fields_of = MODELS[label]
    return msgspec.convert(fields_of(pk, fields), cls)


def filed_under(item: Any, version: Version) -> Any:
    """A build or page filed under its version's project, whatever project it names (DECISIONS.md
    section 6)."""
    return item if item.project == version.project else msgspec.structs.replace(item, project=version.project)


def with_document(page: Page, project: Project) -> Page:
    """A page with its Sphinx document name: a dump records none, so it is derived from the
    path, as the project's builder laid it out; a page read from its build (``snapshot follow
    --pages-from``) keeps the name the build gives it."""
    if page.document:
        return page
    dirhtml = project.documentation_type == DOCUMENTATION_TYPES["sphinx_htmldir"]
    return msgspec.structs.replace(page, document=document_of(page.path, dirhtml))


def import_dump(
    dumps: list[Path],
    out: Path,
    *,
    name: str | None = None,
    public_url: str = "https://docs.example.org",
    created_at: datetime | None = None,
    progress: bool | None = None,
    replace: bool = False,
) -> DumpReport:
    """Write the snapshot that ``dumps`` describe to ``out`` (an existing one only with ``replace``)."""
    source = ", ".join(str(d) for d in dumps)
    if out.exists() and not replace:
        raise CommandError(f"{out} already exists: choose another directory, or --force to replace it")
    by_pk: dict[str, dict[int, tuple[str, Any]]] = {kind: {} for kind in KINDS}
    report = DumpReport()
    show = wanted() if progress is None else progress
    for dump in dumps:
        with progress_bar(None, f"read {dump.name}", show, unit="rec") as bar:
            for record in read_dump(dump):
                label = str(record.get("model", "")) if isinstance(record, dict) else ""
                known = MODELS.get(label)
                if bar is not None:
                    bar.update(1)
                if known is None:
                    report.unknown[label or "(not a dumpdata record)"] += 1
                    continue
                kind = known[0]
                pk = record.get("pk")
                if not isinstance(pk, int) or isinstance(pk, bool) or pk < 1:
                    reason = "django-guardian's AnonymousUser" if label == "auth.user" and pk == -1 else "its pk is not a positive id"
                    report.skip(label, pk, reason)
                    continue
                fields = record.get("fields") or {}
                if not isinstance(fields, dict):
                    report.skip(label, pk, "its fields are not an object")
                    by_pk[kind].pop(pk, None)
                    continue
                try:
                    converted = record_of(label, pk, fields)
                except msgspec.ValidationError as error:
                    report.skip(label, pk, str(error))
                    by_pk[kind].pop(pk, None)  # a later record replaces an earlier one, even a bad one
                    continue
                by_pk[kind][pk] = (label, converted)  # as loaddata does: the later record of a pk wins
    records = keep_what_can_be_served(by_pk, report)
    if not records["projects"]:
        raise SnapshotError(source, [Problem(source, None, "holds no project that can be served: no snapshot written")], what="dump")
    with built_aside(out, replace=replace) as partial:
        report.counts = write_snapshot(records, partial, snapshot_name(name or dumps[0].stem), public_url, created_at)
    return report


def snapshot_name(text: str) -> str:
    """A valid snapshot name from a file name: other characters than letters, digits, ``.``, ``_``
    and ``-`` become ``-`` (DECISIONS.md section 6), and it begins with a letter or a digit."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", text).lstrip("._-")[:200] or "dump"


def keep_what_can_be_served(by_pk: dict[str, dict[int, tuple[str, Any]]], report: DumpReport) -> dict[str, list]:
    """The records whose every reference is kept too, in order of dependence; every record left
    out is reported with its reason, and a reference fixed (a build filed under another project
    than its version's) is kept as the rulings say (DECISIONS.md section 6)."""
    records: dict[str, list] = {kind: [] for kind in KINDS}

    def keep(kind: str, ok: Callable[[str, Any], Any]) -> dict[int, Any]:
        kept: dict[int, Any] = {}
        taken: dict = {}
        for pk, (label, item) in sorted(by_pk[kind].items()):
            item = ok(label, item)
            if item is None:
                continue
            unique_key = UNIQUE.get(kind)
            if unique_key is not None:
                value = unique_key(item)
                if value in taken:
                    report.skip(label, pk, f"{value!r} is taken by another record (pk={taken[value]})")
                    continue
                taken[value] = pk
            kept[pk] = item
        records[kind] = list(kept.values())
        return kept

    users = keep("users", lambda label, u: u)

    def project_ok(label: str, p: Project) -> Project:
        missing = [u for u in p.users if u not in users]
        if missing:
            report.note(label, p.id, f"users {missing} are not in the dump: left out of its users")
            p = msgspec.structs.replace(p, users=tuple(u for u in p.users if u in users))
        return p

    projects = keep("projects", project_ok)

    def relationship_ok(label: str, r: ProjectRelationship) -> ProjectRelationship | None:
        for end in ("parent", "child"):
            if getattr(r, end) not in projects:
                return report.skip(label, r.id, f"its {end} project {getattr(r, end)} is not kept")
        if r.parent == r.child:
            return report.skip(label, r.id, "a project cannot be its own subproject")
        return r

    keep("relationships", relationship_ok)
    versions = keep(
        "versions", lambda label, v: v if v.project in projects else report.skip(label, v.id, f"its project {v.project} is not kept")
    )

    def under_version(label: str, item: Any) -> Any:
        version = versions.get(item.version)
        if version is None:
            return report.skip(label, item.id, f"its version {item.version} is not kept")
        if item.project != version.project:
            report.note(label, item.id, f"filed under project {item.project}; kept under its version's project {version.project}")
        return filed_under(item, version)

    builds = keep("builds", under_version)
    keep("build_commands", lambda label, c: c if c.build in builds else report.skip(label, c.id, f"its build {c.build} is not kept"))
    def page_ok(label: str, page: Page) -> Page | None:
        page = under_version(label, page)
        return None if page is None else with_document(page, projects[page.project])

    keep("pages", page_ok)
    return records


def write_snapshot(records: dict[str, list], out: Path, name: str, public_url: str, created_at: datetime | None) -> dict[str, int]:
    records["build_commands"].sort(key=attrgetter("build", "start_time", "id"))
    for kind in ("users", "projects", "relationships", "versions", "builds", "pages"):
        records[kind].sort(key=attrgetter("id"))
    counts = {}
    for kind in KINDS:
        with RecordWriter(out, kind) as writer:
            writer.write(records[kind])
        counts[kind] = writer.count
    manifest = Manifest(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        name=name,
        created_at=created_at or datetime.now(UTC).replace(microsecond=0),
        public_url=public_url,
        counts=counts,
        description="Imported from a Django data dump.",
    )
    write_manifest(out, manifest)
    return counts
