"""A snapshot from a Django data dump (``manage.py dumpdata``) of the hosting service.

Takes the JSON list that ``dumpdata`` writes (or its ``--format jsonl`` lines), streamed record
by record with ijson, so the dump is never held whole. Each record becomes a snapshot record
as soon as it is read, with the defaults of the original service's models for the fields a
dump leaves out; relations are checked once everything is read. Secrets are never carried
over: a user keeps id, username, email and names, and no password hash or permission.
The snapshot is written to a temporary directory that takes its name only when complete.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from operator import attrgetter
from pathlib import Path
from typing import Any

import ijson
import msgspec

from ..utils.progress import progress_bar, wanted
from .errors import MAX_PROBLEMS, Problem, SnapshotError
from .records import FORMAT, FORMAT_VERSION, KINDS, Build, BuildCommand, Manifest, Page, Project, User, Version
from ..errors import CommandError
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
    skipped: Counter = field(default_factory=Counter)


def read_dump(path: Path) -> Iterator[dict]:
    """The records of one dump file, one at a time (a JSON list, or JSON Lines)."""
    with open(path, "rb") as data:
        head = data.read(64).lstrip()
        data.seek(0)
        if head.startswith(b"["):
            yield from ijson.items(data, "item", use_float=True)
        else:
            decoder = msgspec.json.Decoder()
            for line in data:
                if line.strip():
                    yield decoder.decode(line)


def text(value: Any, default: str = "") -> Any:
    """A Django text field: None (a null column) becomes the model's default."""
    return default if value is None else value


def moment(value: Any) -> Any:
    """A Django datetime: naive ones (USE_TZ off) are taken as UTC."""
    if isinstance(value, str) and value and not value.endswith("Z") and "+" not in value[10:] and "-" not in value[10:]:
        return value + "Z"
    return value


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
        "privacy_level": text(f.get("privacy_level"), "public"),
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
        "privacy_level": text(f.get("privacy_level"), "public"),
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
    "builds.version": ("versions", Version, version),
    "builds.build": ("builds", Build, build),
    "builds.buildcommandresult": ("build_commands", BuildCommand, command),
    **{label: ("pages", Page, page) for label in PAGE_MODELS},
}


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
    problems: list[Problem] = []
    records: dict[str, list] = {kind: [] for kind in KINDS}
    report = DumpReport()
    show = wanted() if progress is None else progress
    for dump in dumps:
        with progress_bar(None, f"read {dump.name}", show, unit="rec") as bar:
            for record in read_dump(dump):
                label = str(record.get("model", "")) if isinstance(record, dict) else ""
                known = MODELS.get(label)
                if known is None:
                    report.skipped[label or "(not a dumpdata record)"] += 1
                    continue
                kind, cls, fields_of = known
                pk = record.get("pk")
                try:
                    records[kind].append(msgspec.convert(fields_of(pk, record.get("fields") or {}), cls))
                except msgspec.ValidationError as error:
                    problems.append(Problem(dump.name, None, f"{label} pk={pk!r}: {error}"))
                if bar is not None:
                    bar.update(1)
                if len(problems) >= MAX_PROBLEMS:
                    raise SnapshotError(source, problems, what="dump")
    check_relations(records, problems)
    if problems:
        raise SnapshotError(source, problems[:MAX_PROBLEMS], what="dump")
    with built_aside(out, replace=replace) as partial:
        report.counts = write_snapshot(records, partial, name or dumps[0].stem, public_url, created_at)
    return report


def check_relations(records: dict[str, list], problems: list[Problem]) -> None:
    """Every key names a record of the dump, and every id and slug is unique where it must be."""

    def refer(label: str, item, name: str, target: str, ids: set) -> None:
        value = getattr(item, name)
        if value not in ids:
            problems.append(Problem("dump", None, f"{label} pk={item.id}: {name} {value} is not in the dump ({target})"))

    ids = {kind: set() for kind in records}
    for kind, items in records.items():
        for item in items:
            if item.id in ids[kind]:
                problems.append(Problem("dump", None, f"{kind} pk={item.id} appears twice"))
            ids[kind].add(item.id)
    for item in records["projects"]:
        for member in item.users:
            if member not in ids["users"]:
                problems.append(Problem("dump", None, f"projects.project pk={item.id}: user {member} is not in the dump (auth.user)"))
    for item in records["versions"]:
        refer("builds.version", item, "project", "projects.project", ids["projects"])
    version_project = {v.id: v.project for v in records["versions"]}
    for label, kind in (("builds.build", "builds"), ("projects.importedfile", "pages")):
        for item in records[kind]:
            refer(label, item, "version", "builds.version", ids["versions"])
            owner = version_project.get(item.version)
            if owner is not None and owner != item.project:
                problems.append(Problem("dump", None, f"{label} pk={item.id}: project {item.project} is not the project of its version"))
    for item in records["build_commands"]:
        refer("builds.buildcommandresult", item, "build", "builds.build", ids["builds"])
    for label, key, kind in (("projects.project", attrgetter("slug"), "projects"), ("auth.user", attrgetter("username"), "users")):
        seen: set = set()
        for item in records[kind]:
            if key(item) in seen:
                problems.append(Problem("dump", None, f"{label} pk={item.id}: {key(item)!r} is taken by another record"))
            seen.add(key(item))


def write_snapshot(records: dict[str, list], out: Path, name: str, public_url: str, created_at: datetime | None) -> dict[str, int]:
    records["build_commands"].sort(key=attrgetter("build", "start_time", "id"))
    for kind in ("users", "projects", "versions", "builds", "pages"):
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
        created_at=created_at or datetime.now(timezone.utc).replace(microsecond=0),
        public_url=public_url,
        counts=counts,
        description="Imported from a Django data dump.",
    )
    write_manifest(out, manifest)
    return counts
