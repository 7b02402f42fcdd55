"""What the source database must have for a follower: a publication of the served tables, with
the columns docsrv maps and no others (password hashes and every other secret stay in the
database), a role that may stream and read them, and a logical replication slot.

``setup_sql`` is what ``docsrv snapshot follow --print-setup`` prints for an operator to run.
``published_columns`` checks a publication, making it first where it is missing and the role may.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import CommandError
from .tables import TABLES

SETUP_HINT = "run the SQL that `docsrv snapshot follow --print-setup` prints"


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def publication_sql(publication: str, tables: dict[str, list[str]] | None = None) -> str:
    """CREATE PUBLICATION of the served tables with their mapped columns (``tables``: the columns
    of each, where the database has optional ones; else the columns every release has)."""
    listed = tables or {name: list(table.columns) for name, table in TABLES.items()}
    lines = [f"    {quoted(name)} ({', '.join(map(quoted, columns))})" for name, columns in listed.items()]
    return f"CREATE PUBLICATION {quoted(publication)} FOR TABLE\n" + ",\n".join(lines) + ";"


def setup_sql(publication: str, slot: str, tables: dict[str, list[str]] | None = None, role: str = "docsrv_follower") -> str:
    """The SQL an operator runs; ``tables``: the mapped columns the database has (``mapped_columns``),
    else those of every release."""
    listed = tables or {name: list(table.columns) for name, table in TABLES.items()}
    grants = "\n".join(f"GRANT SELECT ({', '.join(map(quoted, columns))}) ON {quoted(name)} TO {quoted(role)};"
                       for name, columns in listed.items())
    return f"""-- docsrv snapshot follow: the source database's side, run once by its owner.
-- postgresql.conf: wal_level = logical (a restart), and a bound on the WAL a stalled follower
-- may hold back, so that it cannot fill the disk (the slot is then lost, and the follower
-- takes a new base): max_slot_wal_keep_size = '10GB'.

-- The served tables, with only the columns docsrv maps: nothing else leaves the database.
{publication_sql(publication, listed)}

-- A role that may stream changes (REPLICATION) and read those columns for its base copy.
CREATE ROLE {quoted(role)} WITH LOGIN REPLICATION PASSWORD 'choose-one';
GRANT USAGE ON SCHEMA public TO {quoted(role)};
{grants}

-- The follower makes its slot ({slot}) itself, with the snapshot its base is read in (the
-- REPLICATION role may). pg_hba.conf: a line for the role on the database (logical replication
-- connects to a database, not to "replication"). Watch the WAL the slot holds:
--   SELECT slot_name, active, confirmed_flush_lsn, wal_status,
--          pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) AS behind_bytes
--   FROM pg_replication_slots WHERE slot_name = '{slot}';
"""


@dataclass(frozen=True)
class Slot:
    plugin: str
    #: ``reserved``, ``extended``, ``unreserved`` or ``lost`` (its WAL removed: it cannot stream).
    wal_status: str
    confirmed_flush_lsn: str | None


def slot_of(cursor: Any, slot: str) -> Slot | None:
    cursor.execute("SELECT plugin, wal_status, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    row = cursor.fetchone()
    return Slot(*row) if row is not None else None


def published_columns(connection: Any, publication: str, log: Any) -> dict[str, list[str]]:
    """The mapped columns of each served table that ``publication`` streams: each table's columns,
    and the optional ones it has. A missing publication is made (and said) where the role may;
    a publication without a served table or column is refused in one line."""
    wanted = mapped_columns(connection)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
        if cursor.fetchone() is None:
            try:
                cursor.execute(publication_sql(publication, wanted))
            except Exception as error:  # psycopg2.Error: the role may not (it owns no table, has no CREATE)
                connection.rollback()
                raise CommandError(f"publication {publication} does not exist, and this role cannot make it "
                                   f"({one_line(error)}): {SETUP_HINT}") from None
            connection.commit()
            log.info("made publication %s of the served tables and their mapped columns", publication)
        cursor.execute("SELECT tablename, attnames FROM pg_publication_tables WHERE pubname = %s AND schemaname = 'public'",
                       (publication,))
        streamed = {table: set(columns) for table, columns in cursor.fetchall()}
        connection.commit()
    if (gap := lacking(streamed)) is not None:
        table, column = gap
        what = f"column {table}.{column}" if column is not None else f"table {table}"
        raise CommandError(f"publication {publication} does not stream {what}: {SETUP_HINT}")
    return {name: [column for column in columns if column in streamed[name]] for name, columns in wanted.items()}


def mapped_columns(connection: Any) -> dict[str, list[str]]:
    """The columns of each served table that docsrv maps and the database has (every release's,
    and the optional ones it has); CommandError naming a table or column it lacks."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                       "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname = ANY(%s) "
                       "AND a.attnum > 0 AND NOT a.attisdropped", (list(TABLES),))
        present: dict[str, set[str]] = {}
        for table, column in cursor.fetchall():
            present.setdefault(table, set()).add(column)
    connection.commit()
    if (gap := lacking(present)) is not None:
        table, column = gap
        if column is None:
            raise CommandError(f"the source database has no table {table}: is it the service's database?")
        raise CommandError(f"{table}.{column}: no such column in the source database (docsrv maps it)")
    return {name: [*table.columns, *(column for column in table.optional if column in present[name])] for name, table in TABLES.items()}


def lacking(found: dict[str, set[str]]) -> tuple[str, str | None] | None:
    """The first served table ``found`` (columns by table) lacks, as (table, None), or the first
    mapped column of one, as (table, column); None when it has them all."""
    for name, table in TABLES.items():
        if name not in found:
            return name, None
        for column in table.columns:
            if column not in found[name]:
                return name, column
    return None


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]
