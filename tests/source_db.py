"""A real Postgres for the follower's tests (Debian's ``postgresql``): a cluster made with ``initdb``
in a temporary directory, run as the ``postgres`` user with ``wal_level=logical``, reached on a
Unix socket in that directory alone, and stopped (then removed) at the end. The tables are the
hosting service's own, by their names in its database, with columns docsrv does not map beside
those it does (``SERVICE_SCHEMA``)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg2

#: The service's tables (Django's names and columns, as a 2017 release of it made them), with the
#: foreign keys Django declares (checked at commit). Columns take NULL where Django's do not: the
#: fixtures hold records of older releases, with fields left out, as the import's tests need.
SERVICE_SCHEMA = """
CREATE TABLE auth_user (
    id serial PRIMARY KEY, password varchar(128), last_login timestamptz, is_superuser boolean,
    username varchar(150) UNIQUE, first_name varchar(30), last_name varchar(150),
    email varchar(254), is_staff boolean, is_active boolean, date_joined timestamptz);
CREATE TABLE projects_project (
    id serial PRIMARY KEY, pub_date timestamptz, modified_date timestamptz, name varchar(255),
    slug varchar(255) UNIQUE, description text, repo varchar(255), repo_type varchar(10),
    project_url varchar(255), canonical_url varchar(255), version varchar(100),
    copyright varchar(255), theme varchar(20), suffix varchar(10), single_version boolean,
    default_version varchar(255), default_branch varchar(255), requirements_file varchar(255),
    documentation_type varchar(20), analytics_code varchar(50), path varchar(255),
    conf_py_file varchar(255), featured boolean, skip boolean, mirror boolean,
    use_virtualenv boolean, python_interpreter varchar(20), use_system_packages boolean,
    django_packages_url varchar(255), privacy_level varchar(20), version_privacy_level varchar(20),
    language varchar(20), programming_language varchar(20), num_major integer, num_minor integer,
    num_point integer, tags text DEFAULT '', latest_build_id integer);
CREATE TABLE projects_project_users (
    id serial PRIMARY KEY,
    project_id integer NOT NULL REFERENCES projects_project DEFERRABLE INITIALLY DEFERRED,
    user_id integer NOT NULL REFERENCES auth_user DEFERRABLE INITIALLY DEFERRED, UNIQUE (project_id, user_id));
CREATE TABLE projects_projectrelationship (
    id serial PRIMARY KEY,
    parent_id integer NOT NULL REFERENCES projects_project DEFERRABLE INITIALLY DEFERRED,
    child_id integer NOT NULL REFERENCES projects_project DEFERRABLE INITIALLY DEFERRED, alias varchar(255));
CREATE TABLE builds_version (
    id serial PRIMARY KEY, project_id integer NOT NULL REFERENCES projects_project DEFERRABLE INITIALLY DEFERRED,
    type varchar(20), identifier varchar(255), verbose_name varchar(255), slug varchar(255),
    supported boolean, active boolean, built boolean, uploaded boolean,
    privacy_level varchar(20), machine boolean, UNIQUE (project_id, slug));
CREATE TABLE builds_build (
    id serial PRIMARY KEY, project_id integer NOT NULL REFERENCES projects_project DEFERRABLE INITIALLY DEFERRED,
    version_id integer NOT NULL REFERENCES builds_version DEFERRABLE INITIALLY DEFERRED, type varchar(55),
    state varchar(55), date timestamptz, success boolean, setup text, setup_error text,
    output text, error text, exit_code integer, commit varchar(255), length integer,
    builder varchar(255) DEFAULT '', cold_storage boolean);
CREATE TABLE builds_buildcommandresult (
    id serial PRIMARY KEY, build_id integer NOT NULL REFERENCES builds_build DEFERRABLE INITIALLY DEFERRED,
    command text, description text, output text, exit_code integer,
    start_time timestamptz, end_time timestamptz);
CREATE TABLE projects_importedfile (
    id serial PRIMARY KEY, project_id integer NOT NULL REFERENCES projects_project DEFERRABLE INITIALLY DEFERRED,
    version_id integer NOT NULL REFERENCES builds_version DEFERRABLE INITIALLY DEFERRED, name varchar(255),
    slug varchar(50), path varchar(255), md5 varchar(255), commit varchar(255));
"""

#: dumpdata's models by table, and the table of each model.
MODEL_TABLES = {
    "auth.user": "auth_user",
    "projects.project": "projects_project",
    "projects.projectrelationship": "projects_projectrelationship",
    "builds.version": "builds_version",
    "builds.build": "builds_build",
    "builds.buildcommandresult": "builds_buildcommandresult",
    "projects.importedfile": "projects_importedfile",
}
#: The foreign keys of each table, by their field's name (the column adds ``_id``).
FOREIGN_KEYS = {
    "projects_projectrelationship": ("parent", "child"),
    "builds_version": ("project",),
    "builds_build": ("project", "version"),
    "builds_buildcommandresult": ("build",),
    "projects_importedfile": ("project", "version"),
}
#: Columns a fixture of an older release leaves out, with the service's defaults.
DEFAULTS = {
    "projects_project": {"tags": ""},
    "builds_build": {"builder": ""},
}


def bin_directory() -> Path:
    """The newest Postgres server Debian installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda path: int(path.parent.parent.name))
    if not found:
        raise RuntimeError("no Postgres server: apt-get install postgresql (make test does)")
    return found[-1].parent


def as_postgres() -> list[str]:
    """Run as the ``postgres`` user when this runs as root (Postgres refuses root)."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@dataclass
class Cluster:
    directory: Path
    port: int
    process: subprocess.Popen | None = None

    @property
    def socket_directory(self) -> Path:
        return self.directory

    def dsn(self, database: str = "postgres") -> str:
        return f"host={self.socket_directory} port={self.port} dbname={database} user=postgres"

    def start(self) -> None:
        # No fsync (a test's cluster is thrown away), but commits as the service's database makes
        # them (``synchronous_commit`` on, its default): a slot sends a transaction once its WAL is
        # flushed, and an asynchronous commit's waits for the WAL writer, up to three times
        # ``wal_writer_delay``, which a lag measured from the COMMIT would count.
        command = [*as_postgres(), str(bin_directory() / "postgres"), "-D", str(self.directory / "data"), "-p", str(self.port),
                   "-c", "listen_addresses=", "-c", f"unix_socket_directories={self.socket_directory}",
                   "-c", "wal_level=logical", "-c", "timezone=UTC", "-c", "max_replication_slots=20", "-c", "max_wal_senders=20",
                   "-c", "fsync=off", "-c", "full_page_writes=off",
                   "-c", "wal_sender_timeout=60s", "-c", "log_min_messages=warning"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(self.directory / "log", "ab"))  # noqa: SIM115
        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg2.connect(self.dsn()).close()
                return
            except psycopg2.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Postgres did not start: {(self.directory / 'log').read_text()[-2000:]}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """A fast shutdown (SIGINT): sessions cut, what committed kept."""
        if self.process is not None and self.process.poll() is None:
            # The postmaster itself: runuser, its parent here, passes no SIGINT on.
            with contextlib.suppress(OSError, ValueError):
                os.kill(int((self.directory / "data" / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def database(self, name: str) -> str:
        """A new, empty database with the service's tables; its DSN."""
        with contextlib.closing(psycopg2.connect(self.dsn())) as connection:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
                cursor.execute(f'CREATE DATABASE "{name}"')
        with contextlib.closing(psycopg2.connect(self.dsn(name))) as connection, connection.cursor() as cursor:
            cursor.execute(SERVICE_SCHEMA)
            connection.commit()
        return self.dsn(name)


@contextlib.contextmanager
def running_cluster(port: int) -> Iterator[Cluster]:
    directory = Path(tempfile.mkdtemp(prefix="docsrv-pg-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(directory, user.pw_uid, user.pw_gid)
    cluster = Cluster(directory, port)
    try:
        subprocess.run([*as_postgres(), str(bin_directory() / "initdb"), "-D", str(directory / "data"), "-U", "postgres",
                        "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"], check=True, capture_output=True)
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


def load_dump(dsn: str, dump: Path) -> None:
    """Insert the records of a ``dumpdata`` file into the service's tables, as ``loaddata`` would
    (pages of the older models aside), and move each table's id sequence past them."""
    records = json.loads(dump.read_text())
    with contextlib.closing(psycopg2.connect(dsn)) as connection, connection.cursor() as cursor:
        for record in records:
            table = MODEL_TABLES.get(record["model"])
            if table is None or record["pk"] < 1:
                continue
            fields = {name: value for name, value in record["fields"].items() if name not in ("groups", "user_permissions", "tags")}
            fields = {**DEFAULTS.get(table, {}), **fields}
            users = fields.pop("users", None) if table == "projects_project" else None
            columns = {"id": record["pk"]}
            for name, value in fields.items():
                column = f"{name}_id" if name in FOREIGN_KEYS.get(table, ()) else name
                columns[column] = value
            names = ", ".join(f'"{name}"' for name in columns)
            cursor.execute(f'INSERT INTO {table} ({names}) VALUES ({", ".join(["%s"] * len(columns))})', list(columns.values()))
            for user in users or ():
                cursor.execute("INSERT INTO projects_project_users (project_id, user_id) VALUES (%s, %s)", (record["pk"], user))
        for table in [*MODEL_TABLES.values(), "projects_project_users"]:
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), coalesce(max(id), 0) + 1000, false) FROM {table}")
        connection.commit()


def django_json(value: object) -> object:
    """A value as Django's JSON encoder writes it in a ``dumpdata``: a datetime in ISO 8601,
    milliseconds at most, ``Z`` for UTC."""
    if isinstance(value, datetime):
        written = value.isoformat()
        if value.microsecond:
            written = written[:23] + written[26:]
        return written[:-6] + "Z" if written.endswith("+00:00") else written
    return value


def dumpdata(dsn: str, path: Path) -> Path:
    """What ``manage.py dumpdata`` writes of the database's served models (every column), to
    ``path``: a JSON list, written a record at a time (a large database is never held whole)."""
    with contextlib.closing(psycopg2.connect(dsn, options="-c TimeZone=UTC")) as connection, open(path, "w") as out:
        with connection.cursor() as cursor:
            cursor.execute("SELECT project_id, user_id FROM projects_project_users ORDER BY id")
            users: dict[int, list[int]] = {}
            for project, user in cursor.fetchall():
                users.setdefault(project, []).append(user)
        out.write("[")
        first = True
        for model, table in MODEL_TABLES.items():
            with connection.cursor(name=f"dump_{table}") as cursor:
                cursor.itersize = 10_000
                cursor.execute(f"SELECT * FROM {table} ORDER BY id")
                names: list[str] | None = None
                for row in cursor:
                    names = names or [column.name for column in cursor.description]
                    fields = {}
                    for name, value in zip(names, row, strict=True):
                        if name != "id":
                            fields[name[:-3] if name[:-3] in FOREIGN_KEYS.get(table, ()) else name] = django_json(value)
                    if table == "projects_project":
                        fields["users"] = users.get(row[0], [])
                    out.write(("" if first else ",\n") + json.dumps({"model": model, "pk": row[0], "fields": fields}))
                    first = False
        out.write("]\n")
    return path
