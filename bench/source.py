"""The source database followed: from a COMMIT in the service's Postgres to every worker of a
replica serving it, under traffic.

    python bench/source.py [--scale medium] [--sizes 1 10 100 1000] [--rounds 20] [--sustain-seconds 15]
                           [--skip sustain equivalence] [--tag NAME]

A real Postgres (Debian's, as the tests start it: ``tests/source_db.py``) is given the service's
tables, filled with the rows of a synthetic snapshot (``bench/scratch/``) by COPY. Then:

1. The base: ``docsrv snapshot follow`` on an empty origin, from its start to its line
   ``published base``; beside it, ``pg_dump`` of the same tables (custom format, to a file).
2. A replica: the origin served by Python's http.server on loopback, pulled, served by
   ``docsrv serve --watch`` (two workers) with ``docsrv snapshot pull --every 0.2`` as its sidecar,
   and wrk asking it for a project list without a pause.
3. The lag: for each size, ``--rounds`` transactions of that many rows of the service's kinds
   (``transaction``: builds made and moved through their states with their commands, projects
   edited, versions made private, users renamed, projects imported and deleted), one at a time.
   For each, the seconds from its COMMIT returning to the last of the two workers serving it
   (the workers log each changeset they apply, with the time); p50, p99 and max. The follower's
   CPU seconds per changeset it published.
4. Sustained: a writer process commits transactions of 1 and of 100 rows as fast as it can for
   ``--sustain-seconds``; the commits and rows a second, and how long after the last commit the
   origin published it (the follower kept up when that stays under a second).
5. Equivalence: Django's ``dumpdata`` of the database's final rows (``source_db.dumpdata``) is
   imported (``docsrv snapshot import-dump``) and served fresh; every URL of a crawl of the
   projects the transactions touched and a sample of others is asked of the replica and of it.
   A reply differs when its status, a header (but ``Date``, and ``X-Snapshot``,
   ``Last-Modified`` and ``ETag``, which name the snapshot) or its body does.

Failed requests under load are wrk's errors and non-2xx replies, over phases 3 and 4.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "tests")]
import psycopg2  # noqa: E402
from crawl import crawl  # noqa: E402
from live import Load, cpu_seconds, first_difference, indexed_snapshot, percentile, whole_lines, without_date  # noqa: E402

from docsrv.snapshot.import_dump import DOCUMENTATION_TYPES  # noqa: E402
from docsrv.source.pgoutput import lsn_of  # noqa: E402
from run import RESULTS, WORK, System, ensure_tools, free_port  # noqa: E402
from source_db import bin_directory, dumpdata, running_cluster  # noqa: E402

APPLIED = re.compile(r"^(\S+ \S+) INFO worker (\d+) applied changeset (\d+):", re.MULTILINE)
GENERATOR_TYPES = {neutral: service for service, neutral in DOCUMENTATION_TYPES.items()}
#: Headers that name the snapshot a reply came from, not what it says.
SNAPSHOT_HEADERS = {"Date", "X-Snapshot", "Last-Modified", "ETag"}


# Filling the database from a synthetic snapshot.


def records(snapshot: Path, kind: str) -> Iterator[dict]:
    with open(snapshot / f"{kind}.jsonl", "rb") as lines:
        for line in lines:
            yield json.loads(line)


def text(value: object) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


class Rows(io.RawIOBase):
    """COPY's text format of rows, read as a file."""

    def __init__(self, rows: Iterator[tuple]) -> None:
        self.rows = rows
        self.buffer = b""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while len(self.buffer) < max(size, 1 << 16):
            row = next(self.rows, None)
            if row is None:
                break
            self.buffer += ("\t".join(map(text, row)) + "\n").encode()
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out


TABLE_ROWS = {
    "auth_user": ("users", "id, password, is_superuser, username, first_name, last_name, email, is_staff, is_active, date_joined",
                  lambda u: (u["id"], "!", False, u["username"], u["first_name"], u["last_name"], u["email"], False, True,
                             "2020-01-01 00:00:00+00")),
    "projects_project": ("projects", "id, pub_date, modified_date, name, slug, description, repo, repo_type, project_url, canonical_url, "
                         "version, copyright, theme, suffix, single_version, default_version, default_branch, requirements_file, "
                         "documentation_type, analytics_code, path, conf_py_file, featured, skip, mirror, use_virtualenv, "
                         "python_interpreter, use_system_packages, django_packages_url, privacy_level, version_privacy_level, "
                         "language, programming_language, tags",
                         lambda p: (p["id"], p["pub_date"], p["modified_date"], p["name"], p["slug"], p["description"], p["repo"],
                                    p["repo_type"], p["project_url"], "", p["version"], p["copyright"], p["theme"], p["suffix"], False,
                                    p["default_version"], p["default_branch"], p["requirements_file"],
                                    GENERATOR_TYPES.get(p["documentation_type"], p["documentation_type"]), p["analytics_code"], "", "",
                                    False, False, False, p["use_virtualenv"], "python3", False, p["framework_packages_url"],
                                    p["privacy_level"], "public", p["language"], p["programming_language"], "")),
    "projects_projectrelationship": ("relationships", "id, parent_id, child_id, alias",
                                     lambda r: (r["id"], r["parent"], r["child"], r["alias"])),
    "builds_version": ("versions", "id, project_id, type, identifier, verbose_name, slug, supported, active, built, uploaded, "
                       "privacy_level, machine",
                       lambda v: (v["id"], v["project"], v["type"], v["identifier"], v["verbose_name"], v["slug"], True, v["active"],
                                  v["built"], v["uploaded"], v["privacy_level"], False)),
    "builds_build": ("builds", "id, project_id, version_id, type, state, date, success, setup, setup_error, output, error, exit_code, "
                     "commit, length, builder",
                     lambda b: (b["id"], b["project"], b["version"], b["type"], b["state"], b["date"], b["success"], b["setup"],
                                b["setup_error"], b["output"], b["error"], 0, b["commit"], b["length"], "")),
    "builds_buildcommandresult": ("build_commands", "id, build_id, command, description, output, exit_code, start_time, end_time",
                                  lambda c: (c["id"], c["build"], c["command"], c["description"], c["output"], c["exit_code"],
                                             c["start_time"], c["end_time"])),
    "projects_importedfile": ("pages", "id, project_id, version_id, name, slug, path, md5, commit",
                              lambda p: (p["id"], p["project"], p["version"], p.get("title", ""), "", p["path"], "", "")),
}


def fill(dsn: str, snapshot: Path) -> dict[str, float]:
    """The service's tables filled with the snapshot's records (those it maps back): seconds a table."""
    seconds = {}
    with contextlib.closing(psycopg2.connect(dsn)) as connection, connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")  # the foreign keys are the snapshot's: not checked again
        for table, (kind, columns, row) in TABLE_ROWS.items():
            started = time.perf_counter()
            cursor.copy_expert(f"COPY {table} ({columns}) FROM STDIN", Rows(map(row, records(snapshot, kind))))
            if table == "projects_project":
                links = ((p["id"], u) for p in records(snapshot, "projects") for u in p["users"])
                cursor.copy_expert("COPY projects_project_users (project_id, user_id) FROM STDIN", Rows(links))
            seconds[table] = round(time.perf_counter() - started, 1)
        for table in [*TABLE_ROWS, "projects_project_users"]:
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), coalesce(max(id), 0) + 1) FROM {table}")
        connection.commit()
        connection.autocommit = True
        cursor.execute("VACUUM ANALYZE")
    return seconds


# The transactions.


class Workload:
    """Transactions of the service's kinds, on the rows the database holds."""

    def __init__(self, dsn: str, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.connection = psycopg2.connect(dsn)
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT v.id, v.project_id FROM builds_version v JOIN projects_project p ON p.id = v.project_id "
                           "WHERE v.privacy_level = 'public' AND p.privacy_level = 'public' ORDER BY v.id LIMIT 20000")
            self.versions = cursor.fetchall()
            cursor.execute("SELECT id FROM auth_user ORDER BY id LIMIT 5000")
            self.users = [row[0] for row in cursor.fetchall()]
            cursor.execute("SELECT max(id) FROM projects_project")
            self.next_project = cursor.fetchone()[0] + 1_000_000
        self.connection.commit()
        #: Builds made by earlier transactions and not finished yet.
        self.running: list[int] = []
        #: Projects imported by earlier transactions (one version each, no build): deleted later.
        self.imported: list[tuple[int, int]] = []
        self.touched_projects: set[int] = set()
        self.touched_users: set[int] = set()

    def transaction(self, rows: int) -> tuple[str, float]:
        """Commit one transaction of about ``rows`` rows; the LSN before its COMMIT, and when the
        COMMIT returned (wall clock)."""
        with self.connection.cursor() as cursor:
            done = 0
            if rows >= 10:
                done += self.import_project(cursor)
            if rows >= 100 and self.imported:
                done += self.delete_project(cursor)
            for _ in range(rows // 10):
                project = self.rng.choice(self.versions)[1]
                cursor.execute("UPDATE projects_project SET description = %s, modified_date = now() WHERE id = %s",
                               (f"edited {self.rng.random()}", project))
                self.touched_projects.add(project)
            for _ in range(rows // 20):
                user = self.rng.choice(self.users)
                cursor.execute("UPDATE auth_user SET username = %s WHERE id = %s", (f"u{user}-{self.rng.randrange(10**9)}", user))
                self.touched_users.add(user)
            for _ in range(rows // 50):
                version, project = self.versions.pop(self.rng.randrange(len(self.versions)))
                cursor.execute("UPDATE builds_version SET privacy_level = 'private' WHERE id = %s", (version,))
                self.touched_projects.add(project)
            done += rows // 10 + rows // 20 + rows // 50
            while done < rows:
                done += self.build_step(cursor)
            cursor.execute("SELECT pg_current_wal_insert_lsn()::text")
            lsn = cursor.fetchone()[0]
        self.connection.commit()
        return lsn, time.time()

    def build_step(self, cursor) -> int:
        """A build made (triggered, with its first command), or one made earlier moved on."""
        if self.running and self.rng.random() < 0.5:
            build = self.running.pop(self.rng.randrange(len(self.running)))
            cursor.execute("UPDATE builds_build SET state = 'finished', length = %s, success = true WHERE id = %s",
                           (self.rng.randrange(1, 600), build))
            cursor.execute("INSERT INTO builds_buildcommandresult (build_id, command, description, output, exit_code, start_time, "
                           "end_time) VALUES (%s, 'sphinx-build -b html . _build/html', '', 'build succeeded.', 0, now(), now())",
                           (build,))
            cursor.execute("UPDATE projects_project SET latest_build_id = %s WHERE id = (SELECT project_id FROM builds_build "
                           "WHERE id = %s)", (build, build))  # as the service does: a column docsrv does not map
            return 3
        version, project = self.rng.choice(self.versions)
        cursor.execute("INSERT INTO builds_build (project_id, version_id, type, state, date, success, output, error, commit, "
                       "length, builder) VALUES (%s, %s, 'html', 'triggered', now(), true, '', '', %s, 0, 'bench') RETURNING id",
                       (project, version, f"{self.rng.getrandbits(40):010x}"))
        build = cursor.fetchone()[0]
        cursor.execute("INSERT INTO builds_buildcommandresult (build_id, command, description, output, exit_code, start_time, "
                       "end_time) VALUES (%s, 'git clone', '', 'Cloning...', 0, now(), now())", (build,))
        self.running.append(build)
        self.touched_projects.add(project)
        return 2

    def import_project(self, cursor) -> int:
        self.next_project += 1
        slug = f"imported-{self.next_project}"
        cursor.execute("INSERT INTO projects_project (pub_date, modified_date, name, slug, description, repo, repo_type, project_url, "
                       "canonical_url, version, copyright, theme, suffix, single_version, default_version, documentation_type, path, "
                       "conf_py_file, featured, skip, mirror, use_virtualenv, python_interpreter, use_system_packages, "
                       "django_packages_url, privacy_level, version_privacy_level, language, programming_language) VALUES "
                       "(now(), now(), %s, %s, '', 'https://example.org/r.git', 'git', '', '', '', '', 'default', '.rst', false, "
                       "'latest', 'sphinx', '', '', false, false, false, false, 'python3', false, '', 'public', 'public', 'en', "
                       "'python') RETURNING id", (slug, slug))
        project = cursor.fetchone()[0]
        cursor.execute("INSERT INTO builds_version (project_id, type, identifier, verbose_name, slug, supported, active, built, "
                       "uploaded, privacy_level, machine) VALUES (%s, 'branch', 'main', 'latest', 'latest', true, true, false, false, "
                       "'public', false) RETURNING id", (project,))
        version = cursor.fetchone()[0]
        cursor.execute("INSERT INTO projects_project_users (project_id, user_id) VALUES (%s, %s)", (project, self.rng.choice(self.users)))
        self.imported.append((project, version))
        self.touched_projects.add(project)
        return 3

    def delete_project(self, cursor) -> int:
        """A Django cascade: the children row by row, then the project."""
        project, version = self.imported.pop(0)
        cursor.execute("DELETE FROM builds_version WHERE id = %s", (version,))
        cursor.execute("DELETE FROM projects_project_users WHERE project_id = %s", (project,))
        cursor.execute("DELETE FROM projects_project WHERE id = %s", (project,))
        return 3


WRITER = """
import sys, time, psycopg2
dsn, rows, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
connection = psycopg2.connect(dsn)
cursor = connection.cursor()
cursor.execute("SELECT id FROM builds_build ORDER BY id DESC LIMIT %s", (max(rows, 1000),))
builds = [row[0] for row in cursor.fetchall()]
connection.commit()
commits = 0
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    for i in range(rows):
        cursor.execute("UPDATE builds_build SET length = length + 1 WHERE id = %s", (builds[(commits * rows + i) % len(builds)],))
    connection.commit()
    commits += 1
cursor.execute("SELECT pg_current_wal_lsn()::text")
print(commits, cursor.fetchone()[0], time.time())
"""


# Watching the origin and the replica.


def head(origin: Path) -> dict:
    return json.loads((origin / "head.json").read_text())


def sequence_of(origin: Path, lsn: str, timeout: float = 120.0) -> int:
    """The sequence of the first changeset the origin published as of ``lsn`` or later."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = head(origin)
        if lsn_of(now.get("source_lsn") or "0/0") >= lsn_of(lsn):
            for entry in [*now.get("leading", []), *now["changesets"]]:
                first = (origin / "changesets" / f"{entry['sequence']}.jsonl").open("rb").readline()
                if lsn_of(json.loads(first).get("source_lsn", "0/0")) >= lsn_of(lsn):
                    return entry["sequence"]
            return now["base_sequence"]
        time.sleep(0.005)
    raise TimeoutError(f"the origin did not publish {lsn} within {timeout} s")


class WorkerLog:
    """When each worker of the server applied each changeset, from its log."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0
        self.applied: dict[int, dict[int, float]] = {}

    def served(self, sequence: int, workers: int, timeout: float = 120.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text, self.offset = whole_lines(self.path, self.offset)
            for stamp, worker, number in APPLIED.findall(text):
                when = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
                self.applied.setdefault(int(number), {})[int(worker)] = when
            found = self.applied.get(sequence, {})
            if len(found) >= workers:
                return max(found.values())
            time.sleep(0.005)
        raise TimeoutError(f"changeset {sequence} not applied by {workers} workers within {timeout} s")


def follower_cpu(process: subprocess.Popen) -> float:
    return cpu_seconds([process.pid])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--sustain-seconds", type=float, default=15.0)
    parser.add_argument("--skip", nargs="*", default=[], choices=["sustain", "equivalence"])
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    ensure_tools()
    snapshot = indexed_snapshot(args.scale)
    report: dict = {"bench": "source", "scale": args.scale, "date": datetime.now().isoformat(timespec="seconds"),
                    "sizes": args.sizes, "rounds": args.rounds}
    work = WORK / f"source-{args.scale}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    origin, replica = work / "origin", work / "replica"
    processes: list[subprocess.Popen] = []
    systems: list[System] = []
    load: Load | None = None
    with running_cluster(free_port()) as cluster:
        try:
            dsn = cluster.database("service")
            started = time.perf_counter()
            report["fill_s"] = fill(dsn, snapshot)
            print(f"filled in {time.perf_counter() - started:.0f} s: {report['fill_s']}", flush=True)

            # 1. The base, and pg_dump of the same tables.
            follow_log = work / "follow.log"
            started = time.perf_counter()
            follower = subprocess.Popen([sys.executable, "-m", "docsrv", "snapshot", "follow", dsn, str(origin)],
                                        stdout=subprocess.DEVNULL, stderr=open(follow_log, "wb"))  # noqa: SIM115
            processes.append(follower)
            while "published base" not in follow_log.read_text():
                if follower.poll() is not None:
                    raise RuntimeError(f"the follower stopped: {follow_log.read_text()[-2000:]}")
                time.sleep(0.05)
            base_s = time.perf_counter() - started
            base_cpu = follower_cpu(follower)
            started = time.perf_counter()
            dump = work / "service.dump"
            subprocess.run([str(bin_directory() / "pg_dump"), "-h", str(cluster.socket_directory), "-p", str(cluster.port), "-U",
                            "postgres", "-Fc", "-f", str(dump), *(f"-t{table}" for table in [*TABLE_ROWS, "projects_project_users"]),
                            "service"], check=True)
            report["base"] = {"follow_s": round(base_s, 2), "follow_cpu_s": round(base_cpu, 2),
                              "pg_dump_s": round(time.perf_counter() - started, 2), "pg_dump_bytes": dump.stat().st_size,
                              "follower_rss_mb": round(rss_mb(follower.pid))}
            print(f"base: {report['base']}", flush=True)

            # 2. A replica of the origin, under load.
            origin_port = free_port()
            processes.append(subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(origin),
                                               str(origin_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            url = f"http://127.0.0.1:{origin_port}"
            time.sleep(0.5)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "docsrv", "snapshot", "pull", url, "--into", str(replica)], check=True,
                           stdout=subprocess.DEVNULL)
            report["first_pull_s"] = round(time.perf_counter() - started, 1)
            port = free_port()
            server = System("docsrv-source", [sys.executable, "-m", "docsrv", "serve", "--snapshot", str(replica / "current"),
                                              "--watch", "--workers", "2", "--port", str(port)], port)
            systems.append(server)
            sidecar_log = work / "sidecar.log"
            processes.append(subprocess.Popen([sys.executable, "-m", "docsrv", "snapshot", "pull", url, "--into", str(replica),
                                               "--every", "0.2"], stdout=subprocess.DEVNULL,
                                              stderr=open(sidecar_log, "wb")))  # noqa: SIM115
            # A replica in its steady state: its sidecar has built the references it checks each
            # changeset by, and loaded the state a change of pages starts from (after a start or a
            # fold it does both in the background, beside its pulls).
            deadline = time.monotonic() + 900
            warmed = ("ahead of the next changeset", "ahead of the next change of pages")
            while time.monotonic() < deadline and not all(said in sidecar_log.read_text(errors="replace") for said in warmed):
                time.sleep(0.2)
            load = Load(port)
            workers = WorkerLog(WORK / "docsrv-source.log")

            # 3. The lag of each size.
            workload = Workload(dsn)
            lags: dict[int, list[float]] = {}
            cpu_before, sequence_before = follower_cpu(follower), head(origin)["changesets"][-1]["sequence"] if head(origin)[
                "changesets"] else head(origin)["base_sequence"]
            for size in args.sizes:
                for _ in range(args.rounds):
                    lsn, committed = workload.transaction(size)
                    sequence = sequence_of(origin, lsn)
                    lags.setdefault(size, []).append(workers.served(sequence, 2) - committed)
                    time.sleep(max(0.0, 1.0 - (time.time() - committed)))
                found = lags[size]
                print(f"{size} rows: lag p50 {percentile(found, 0.5):.3f} s, p99 {percentile(found, 0.99):.3f} s, max {max(found):.3f} s",
                      flush=True)
            published = (head(origin)["changesets"][-1]["sequence"] if head(origin)["changesets"] else head(origin)["base_sequence"])
            report["lag"] = {str(size): {"p50_s": round(percentile(found, 0.5), 3), "p99_s": round(percentile(found, 0.99), 3),
                                         "max_s": round(max(found), 3), "transactions": len(found)} for size, found in lags.items()}
            report["follower_cpu_ms_per_changeset"] = round(
                1000 * (follower_cpu(follower) - cpu_before) / max(1, published - sequence_before), 1)

            # 4. Sustained commits.
            if "sustain" not in args.skip:
                report["sustained"] = {}
                for rows in (1, 100):
                    out = subprocess.run([sys.executable, "-c", WRITER, dsn, str(rows), str(args.sustain_seconds)], check=True,
                                         capture_output=True, text=True).stdout.split()
                    commits, last_lsn, last_commit = int(out[0]), out[1], float(out[2])
                    sequence_of(origin, last_lsn, timeout=300)
                    behind = time.time() - last_commit
                    report["sustained"][str(rows)] = {"commits_per_s": round(commits / args.sustain_seconds),
                                                      "rows_per_s": round(commits * rows / args.sustain_seconds),
                                                      "published_after_last_commit_s": round(behind, 3)}
                    print(f"sustained, {rows} row(s) a commit: {report['sustained'][str(rows)]}", flush=True)
            report["load"] = load.stop()
            load = None
            report["follower_rss_mb"] = round(rss_mb(follower.pid))
            follower.terminate()  # done: its memory (gigabytes at the large scale) is the import's, next
            follower.wait()

            # 5. Equivalence with an import of a dump of the final rows.
            if "equivalence" not in args.skip:
                report["equivalence"] = equivalence(server, dsn, work, workload)
                print(f"equivalence: {report['equivalence']}", flush=True)
        finally:
            if load is not None:
                load.kill()
            for system in systems:
                system.stop()
            for process in processes:
                process.kill()
                process.wait()
            tag = f"-{args.tag}" if args.tag else ""  # what was measured is kept, whatever stopped the run
            (RESULTS / f"{date.today().isoformat()}-source-{args.scale}{tag}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def rss_mb(pid: int) -> float:
    found = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    return int(found[1]) / 1024 if found else 0.0


def equivalence(live: System, dsn: str, work: Path, workload: Workload) -> dict:
    """Every URL of a crawl, asked of the replica and of a server on an import of a dump of the
    database's rows as they are now: the replies that differ."""
    dump = dumpdata(dsn, work / "final-dump.json")
    imported = work / "imported"
    subprocess.run([sys.executable, "-m", "docsrv", "snapshot", "import-dump", str(dump), "--out", str(imported)], check=True,
                   stdout=subprocess.DEVNULL)
    # Indexed beforehand: at the large scale, building it takes longer than a start is waited for.
    subprocess.run([sys.executable, "-m", "docsrv", "index", str(imported)], check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    fresh = System("docsrv-imported", [sys.executable, "-m", "docsrv", "serve", "--snapshot", str(imported), "--workers", "1",
                                       "--port", str(port)], port)
    try:
        kept = set(workload.touched_projects) | set(random.Random(35).sample(range(1, 10_000), 50))
        urls = crawl(imported, projects_kept=kept, per_project=5, users_kept=frozenset(workload.touched_users))
        host = {"Host": "replica.example.org"}
        differing = []
        started = time.perf_counter()
        for url in urls:
            ours, theirs = comparable(live.get(url, host)), comparable(fresh.get(url, host))
            if ours != theirs:
                differing.append({"url": url, **first_difference(ours, theirs)})
        return {"urls": len(urls), "projects": len(kept), "users": len(workload.touched_users),
                "crawl_s": round(time.perf_counter() - started, 1), "differing": len(differing), "first_differing": differing[:5]}
    finally:
        fresh.stop()


def comparable(reply: tuple[int, dict, bytes]) -> tuple[int, dict, bytes]:
    status, headers, body = without_date(reply)
    return status, {name: value for name, value in headers.items() if name not in SNAPSHOT_HEADERS}, body


if __name__ == "__main__":
    main()
