"""The public part of a docsrv snapshot as a SQLite database, for the peers that read SQL.

Run with docsrv's interpreter: `python bench/peers/export_sqlite.py SNAPSHOT OUT.sqlite`.
The tables are shaped like the original service's (and Django's) tables, indexed for every
filter and ordering the benchmark asks of them.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from docsrv.store.loaded import load_store

SCHEMA = """
create table projects (
    id integer primary key, name text, slug text unique, description text, language text,
    programming_language text, repo text, repo_type text, default_version text, default_branch text,
    documentation_type text, users text, canonical_url text,
    analytics_code text, copyright text, crate_url text, framework_packages_url text, project_url text,
    requirements_file text, suffix text, theme text, use_virtualenv integer, version text,
    pub_date text, modified_date text
);
create table versions (
    id integer primary key, project_id integer references projects(id), slug text, identifier text,
    verbose_name text, active integer, built integer, uploaded integer, type text, downloads text
);
create table builds (
    id integer primary key, project_id integer references projects(id), version_id integer references versions(id),
    date text, length integer, type text, state text, success integer, error text, commit_hash text,
    output text, setup text, setup_error text, docs_url text
);
create table commands (
    id integer primary key, build_id integer references builds(id), command text, description text,
    start_time text, end_time text, run_time integer, exit_code integer, output text
);
create index versions_order on versions (verbose_name desc, id);
create index versions_project on versions (project_id, verbose_name desc, id);
create index versions_active on versions (project_id, active, verbose_name desc, id);
create index builds_order on builds (date desc, id desc);
create index builds_project on builds (project_id, date desc, id desc);
create index commands_build on commands (build_id, start_time);
"""


def iso(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def export(snapshot: str, out: str) -> None:
    store = load_store(snapshot, progress=False)
    Path(out).unlink(missing_ok=True)
    db = sqlite3.connect(out)
    db.executescript(SCHEMA)
    db.executemany(
        "insert into projects values (" + ",".join("?" * 25) + ")",
        (
            (p.id, p.name, p.slug, p.description, p.language, p.programming_language, p.repo, p.repo_type,
             p.default_version, p.default_branch, p.documentation_type, json.dumps(list(p.users)),
             store.version_url(p, p.default_version), p.analytics_code, p.copyright, p.crate_url,
             p.framework_packages_url, p.project_url, p.requirements_file, p.suffix, p.theme, p.use_virtualenv,
             p.version, iso(p.pub_date), iso(p.modified_date))
            for p in store.projects_ordered
        ),
    )
    db.executemany(
        "insert into versions values (?,?,?,?,?,?,?,?,?,?)",
        ((v.id, v.project, v.slug, v.identifier, v.verbose_name, v.active, v.built, v.uploaded, v.type,
          json.dumps(list(v.downloads))) for v in store.versions_ordered),
    )
    db.executemany(
        "insert into builds values (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        ((b.id, b.project, b.version, iso(b.date), b.length, b.type, b.state, b.success, b.error, b.commit,
          b.output, b.setup, b.setup_error, store.version_url(store.projects[b.project], store.versions[b.version].slug))
         for b in store.builds_ordered),
    )
    db.executemany(
        "insert into commands values (?,?,?,?,?,?,?,?,?)",
        ((c.id, c.build, c.command, c.description, iso(c.start_time), iso(c.end_time),
          int((c.end_time - c.start_time).total_seconds()), c.exit_code, c.output)
         for b in store.builds_ordered for c in store.commands_of(b)),
    )
    db.commit()
    db.execute("analyze")
    db.close()


if __name__ == "__main__":
    export(sys.argv[1], sys.argv[2])
