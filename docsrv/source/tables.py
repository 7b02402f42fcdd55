"""The service's tables that docsrv serves, by their names in its database (the Django models
``import-dump`` reads from a data dump), and how a row of one becomes the fields ``dumpdata``
would write for it: the follower's rows then go through the very mapping an import does
(``snapshot/import_dump.py``), so a database read serves the bytes an import of its dump serves.

Values arrive as text, as each type's output function writes it (the replication stream sends
them so, and the base reads them cast to text): one parser per type, for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

#: Type OIDs (``pg_type``) a mapped column may have, by the kind of value it holds.
INTEGER_TYPES = frozenset({20, 21, 23})  # bigint, smallint, integer
TEXT_TYPES = frozenset({25, 1042, 1043})  # text, character, character varying
BOOLEAN_TYPES = frozenset({16})
TIME_TYPES = frozenset({1114, 1184})  # timestamp, timestamp with time zone
TYPES = {"integer": INTEGER_TYPES, "text": TEXT_TYPES, "boolean": BOOLEAN_TYPES, "time": TIME_TYPES}


@dataclass(frozen=True)
class Table:
    """One of the service's tables: the model ``dumpdata`` names its rows by, and its columns
    that the mapping reads, by name, with the kind of value each holds. ``optional`` columns
    are read where the table has them (fields of the models some releases have)."""

    name: str
    model: str
    columns: dict[str, str]
    optional: dict[str, str]

    def kind(self, column: str) -> str:
        return self.columns.get(column) or self.optional[column]

    def field(self, column: str) -> str:
        """The field ``dumpdata`` writes a column as: a foreign key without its ``_id``."""
        return column[:-3] if column.endswith("_id") else column


#: The model of a page in the service's database (``import-dump`` knows two older names too).
PAGE_MODEL = "projects.importedfile"
#: The table of a project's maintainers (a many-to-many field of projects.project).
PROJECT_USERS = "projects_project_users"
#: The tables of builds and of pages (``snapshot follow --pages-from`` reads pages from a build's HTML instead).
BUILD_TABLE = "builds_build"
PAGE_TABLE = "projects_importedfile"

TABLES: dict[str, Table] = {table.name: table for table in (
    Table("auth_user", "auth.user",
          {"id": "integer", "username": "text", "email": "text", "first_name": "text", "last_name": "text"}, {}),
    Table("projects_project", "projects.project",
          {"id": "integer", "pub_date": "time", "modified_date": "time", "name": "text", "slug": "text", "description": "text",
           "language": "text", "programming_language": "text", "repo": "text", "repo_type": "text", "default_version": "text",
           "default_branch": "text", "documentation_type": "text", "privacy_level": "text", "analytics_code": "text",
           "project_url": "text", "requirements_file": "text"},
          {"copyright": "text", "django_packages_url": "text", "crate_url": "text", "suffix": "text", "theme": "text",
           "use_virtualenv": "boolean", "version": "text"}),
    Table(PROJECT_USERS, "", {"id": "integer", "project_id": "integer", "user_id": "integer"}, {}),
    Table("projects_projectrelationship", "projects.projectrelationship",
          {"id": "integer", "parent_id": "integer", "child_id": "integer", "alias": "text"}, {}),
    Table("builds_version", "builds.version",
          {"id": "integer", "project_id": "integer", "type": "text", "identifier": "text", "verbose_name": "text", "slug": "text",
           "active": "boolean", "built": "boolean", "uploaded": "boolean", "privacy_level": "text"},
          {"has_pdf": "boolean", "has_htmlzip": "boolean", "has_epub": "boolean"}),
    Table(BUILD_TABLE, "builds.build",
          {"id": "integer", "project_id": "integer", "version_id": "integer", "type": "text", "state": "text", "date": "time",
           "success": "boolean", "setup": "text", "setup_error": "text", "output": "text", "error": "text", "commit": "text",
           "length": "integer"}, {}),
    Table("builds_buildcommandresult", "builds.buildcommandresult",
          {"id": "integer", "build_id": "integer", "command": "text", "description": "text", "output": "text", "exit_code": "integer",
           "start_time": "time", "end_time": "time"}, {}),
    Table(PAGE_TABLE, PAGE_MODEL,
          {"id": "integer", "project_id": "integer", "version_id": "integer", "name": "text", "path": "text"}, {"title": "text"}),
)}


def value_of(kind: str, text: str | None) -> object:
    """A column's value from its text, as Django's ``dumpdata`` writes it."""
    if text is None:
        return None
    if kind == "integer":
        return int(text)
    if kind == "boolean":
        return text == "t"
    if kind == "time":
        return dumped_time(text)
    return text


def dumped_time(text: str) -> str:
    """A datetime as ``dumpdata`` writes it (Django's JSON encoder): ISO 8601, in UTC with ``Z``
    for an aware one, microseconds cut to milliseconds (none when there are none).

    The follower reads times in UTC, which Postgres writes ``2026-11-27 10:00:00.1234+00`` (the
    fraction without its trailing zeros): that form is rewritten as text, millions of times in a
    base; any other is parsed."""
    if len(text) >= 22 and text[19] in ".+" and text[-3:] == "+00" and text[4] == "-" and text[10] == " ":
        fraction = text[20:-3].ljust(6, "0") if text[19] == "." else "000000"
        if fraction == "000000":
            return f"{text[:10]}T{text[11:19]}Z"
        return f"{text[:10]}T{text[11:19]}.{fraction[:3]}Z"
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    written = moment.isoformat()
    if moment.microsecond:
        written = written[:23] + written[26:]
    return written[:-6] + "Z" if written.endswith("+00:00") else written
