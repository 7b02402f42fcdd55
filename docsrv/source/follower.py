"""``docsrv snapshot follow DSN ORIGIN``: a publisher that follows the service's database by
logical replication (``pgoutput``) and writes the origin ``docsrv snapshot pull`` follows.

- **The base.** With no origin yet, or no slot (or one whose WAL is lost), the follower makes its
  slot with an exported snapshot, reads the mapped columns of the served tables in that very
  snapshot (``REPEATABLE READ``, ``SET TRANSACTION SNAPSHOT``), so that a change committed during
  the copy is in the stream that follows and not in the copy, and publishes what it read whole.
- **Streaming.** Each committed transaction's rows are taken in one step (``state.SourceState``);
  the records whose kept form changed are published as one changeset (coalesced per record),
  whose header carries the LSN of the last transaction in it and its commit time. A changeset is
  published at most once a ``window``: a commit that comes a window or more after the last
  publish goes out as soon as the stream holds nothing more (with the transactions that came
  with it), one that comes sooner waits for the window to end, with those that join it. A
  transaction that changes nothing served publishes nothing.
- **No loss, no duplicate.** A changeset and ``head.json`` (and the rows of project users the
  follower keeps beside them) are on disk, fsync'ed, before their LSN is confirmed to the
  server. Started again, the follower loads the origin's state and skips every transaction that
  ends at or before the LSN ``head.json`` names: what the server sends again was published once.
  Idle, it confirms the position the server's keepalives report, so an idle database holds no WAL.
- **Schema.** A mapped column the stream no longer carries, or carries with another type, stops
  the follower in one line that names it. Columns docsrv does not map are never read.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import psycopg2
import psycopg2.extensions
import psycopg2.extras

from ..errors import CommandError
from ..replica.publish import COMPACT_SHARE, Published, publish_changeset, publish_whole, read_head, rebase, snapshot_bytes
from ..replica.sidecar import Backoff
from ..snapshot.changeset import read_listed
from ..snapshot.errors import ProblemList
from ..snapshot.import_dump import record_of, write_snapshot
from ..snapshot.import_sphinx import read_build
from ..snapshot.load import manifest_of, read_records, record_file
from ..snapshot.origin import MAX_CHANGESETS, SNAPSHOTS, Head, changeset_path
from ..snapshot.records import KINDS
from ..utils.files import replace_file, sync_directory
from . import pgoutput
from .bases import BaseBuild
from .changesets import changeset_of
from .setup import Slot, one_line, published_columns, quoted, slot_of
from .state import KIND_OF_TABLE, Change, Fields, SourceState, coalesced
from .tables import BUILD_TABLE, PAGE_TABLE, PROJECT_USERS, TABLES, TYPES, dumped_time, value_of
from .watched import SLOT_SECONDS, FollowerMetrics, PublishLog, serve_metrics

log = logging.getLogger("docsrv")

#: The shortest time between two changesets: a commit within it of the last publish waits for its end.
WINDOW_SECONDS = 0.1
#: A changeset is published at once when its transactions changed this many records.
BATCH_RECORDS = 20_000
#: Where in the origin the follower keeps what no snapshot holds: the rows of project users, by
#: id (a key-only delete of one names neither its project nor its user). Begins with ".", as
#: nothing a replica fetches does.
PRIVATE = ".follower"
LINKS = "project-users.jsonl"
#: Rows read at a time from a table during the base.
BASE_ROWS = 5_000
#: Pauses between tries to reach the database: from the first, doubling.
RETRY_FIRST_SECONDS = 1.0
#: A base is built in the background (``bases.py``) once the changesets after the base reach this
#: many, or this share of the base's bytes: half of where a publish would write the base inline,
#: with the stream paused (``replica.publish.publish_changeset``), so that it comes before.
BACKGROUND_CHANGESETS = MAX_CHANGESETS // 2
BACKGROUND_SHARE = COMPACT_SHARE / 2
#: After a base that failed in the background, the next is not tried for this long.
BASE_RETRY_SECONDS = 60.0


@dataclass(frozen=True)
class FollowSettings:
    dsn: str
    origin: Path
    public_url: str = "https://docs.example.org"
    slot: str = "docsrv"
    publication: str = "docsrv"
    window: float = WINDOW_SECONDS
    #: The service's storage of built HTML (``html/<project>/<version>/``): pages are read from a
    #: version's build when one finishes successfully, not from the page rows.
    pages_from: Path | None = None
    #: Where ``GET /metrics`` is served (``source/watched.py``); not at all without a port.
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None


def follow(settings: FollowSettings) -> None:
    """Follow the database for ever: a connection lost (a restart of Postgres, a network failure)
    is tried again with backoff; a problem the follower cannot go past raises CommandError."""
    follower = Follower(settings)
    for stale in (settings.origin / PRIVATE).glob("base-*"):  # of a follower stopped while it built a base
        shutil.rmtree(stale, ignore_errors=True)
    if settings.metrics_port is not None:
        try:
            server = serve_metrics(follower.metrics, settings.metrics_host, settings.metrics_port)
        except OSError as error:
            raise CommandError(f"metrics on {settings.metrics_host}:{settings.metrics_port}: {error.strerror}") from None
        log.info("metrics at http://%s:%d/metrics", settings.metrics_host, server.server_address[1])
    backoff = Backoff(RETRY_FIRST_SECONDS)
    while True:
        try:
            follower.run(backoff)
        except psycopg2.Error as error:
            if isinstance(error, psycopg2.ProgrammingError | psycopg2.InternalError | psycopg2.IntegrityError):
                raise CommandError(f"source database: {one_line(error)}") from None
            follower.lost()
            pause = backoff.failed(time.monotonic())
            log.warning("source database: %s; trying again in %.0f s", one_line(error), pause)
            time.sleep(pause)


class Follower:
    def __init__(self, settings: FollowSettings) -> None:
        self.settings = settings
        self.origin = settings.origin
        self.state: SourceState | None = None
        self.head: Head | None = None
        #: Transactions that end at or before it are published.
        self.published_lsn = 0
        self.confirmed = 0
        self.columns: dict[str, list[str]] = {}
        self.relations: dict[int, Mapped | None] = {}
        # The transaction being received: its rows by (table, id), the last form of each.
        self.rows: dict[tuple[str, int], Fields | None] = {}
        self.truncated: list[str] = []
        #: Between a Begin and its Commit: no position is confirmed then.
        self.in_transaction = False
        # Committed transactions whose changes wait for the window to end.
        self.pending: list[list[Change]] = []
        self.pending_links: list[bytes] = []
        self.pending_end = 0
        self.pending_commit: datetime | None = None
        self.pending_since = 0.0
        #: When the last changeset was published (``time.monotonic``).
        self.published_at = float("-inf")
        self.pending_records = 0
        self.pending_transactions = 0
        self.metrics = FollowerMetrics()
        self.publish_log = PublishLog()
        #: When the WAL the slot retains was last asked (``check_slot``).
        self.slot_checked = float("-inf")
        self.slot_unknown = ""
        #: The base being built in the background, if one is (``bases.py``).
        self.building: BaseBuild | None = None
        self.next_base_at = 0.0
        self._base_bytes: tuple[str, int] = ("", 0)

    # Starting.

    def run(self, backoff: Backoff) -> None:
        settings = self.settings
        with connected(settings.dsn) as database, connected(settings.dsn, replication=True) as replication:
            self.columns = published_columns(database, settings.publication, log)
            with database.cursor() as cursor:
                slot = slot_of(cursor, settings.slot)
                database.commit()
            self.head = read_head(self.origin)
            why = self.base_needed(slot)
            if why:
                log.info("taking a base: %s", why)
                if slot is not None:
                    with database.cursor() as cursor:
                        cursor.execute("SELECT pg_drop_replication_slot(%s)", (settings.slot,))
                    database.commit()
                self.take_base(replication)
            elif self.state is None:
                assert self.head is not None and slot is not None
                self.confirmed = pgoutput.lsn_of(slot.confirmed_flush_lsn or "0/0")
                self.published_lsn = pgoutput.lsn_of(self.head.source_lsn)
                self.state = load_state(self.origin, self.head, max(self.published_lsn, self.confirmed),
                                        pages_read=settings.pages_from is not None)
            start = max(self.published_lsn, self.confirmed)
            cursor = replication.cursor()
            cursor.start_replication(slot_name=settings.slot, decode=False, start_lsn=start, status_interval=10,
                                     options={"proto_version": "1", "publication_names": settings.publication})
            log.info("following slot %s of publication %s from %s into %s", settings.slot, settings.publication,
                     pgoutput.lsn_text(start), self.origin)
            backoff.done()
            self.stream(replication, cursor, database)

    def base_needed(self, slot: Slot | None) -> str:
        """Why the follower takes a base now; empty when it follows on from the origin."""
        name = self.settings.slot
        if slot is not None and slot.wal_status == "lost":
            return f"slot {name} was lost (the server removed WAL it needed: max_slot_wal_keep_size): a new base"
        if slot is not None and slot.plugin != "pgoutput":
            raise CommandError(f"slot {name} decodes with {slot.plugin}, not pgoutput: name another slot (--slot)")
        if self.head is None:
            return f"{self.origin} publishes nothing yet"
        if not self.head.source_lsn:
            raise CommandError(f"{self.origin} publishes snapshots that no follower wrote: follow into another origin")
        if slot is None:
            return f"slot {name} does not exist (dropped?): a new base"
        return ""

    def take_base(self, replication: Any) -> None:
        """Make the slot, read the served tables in its snapshot, and publish them whole."""
        started = time.perf_counter()
        with replication.cursor() as cursor:
            cursor.execute(f"CREATE_REPLICATION_SLOT {quoted(self.settings.slot)} LOGICAL pgoutput EXPORT_SNAPSHOT")
            _slot, consistent_point, snapshot, _plugin = cursor.fetchone()
        log.info("made slot %s at %s", self.settings.slot, consistent_point)
        skipped = {PAGE_TABLE} if self.settings.pages_from is not None else set()
        with connected(self.settings.dsn) as database:
            self.state = read_base(database, snapshot, {name: found for name, found in self.columns.items() if name not in skipped})
        if self.settings.pages_from is not None:
            for version in list(self.state.kept["versions"]):
                self.read_pages(version, missing_said=False)
            self.state.commit()
        self.published_lsn = self.confirmed = pgoutput.lsn_of(consistent_point)
        self.pending, self.pending_links = [], []
        published = self.publish_whole("", [], consistent_point, started)
        self.metrics.publishing(published.kind, sum(self.state.counts().values()), 0, None)
        log.info("published base %s (sequence %d, %s records) in %.1f s", published.name, published.sequence,
                 sum(self.state.counts().values()), published.seconds)

    def lost(self) -> None:
        """The connection is gone: what committed and waits is published (it is the database's),
        the transaction under way is dropped (the server sends it again, whole)."""
        self.rows, self.truncated, self.in_transaction = {}, [], False
        if self.pending and self.state is not None:
            self.publish()
        self.relations = {}

    # Streaming.

    def stream(self, connection: Any, cursor: Any, database: Any) -> None:
        while True:
            message = cursor.read_message()
            now = time.monotonic()
            if self.building is not None:
                self.tend_base()
            if now - self.slot_checked >= SLOT_SECONDS:
                self.check_slot(database)
                self.slot_checked = now
            if self.pending and self.due(now, drained=message is None):
                self.publish()
                self.confirm(cursor, self.published_lsn)
            if message is None:
                if not self.pending and not self.in_transaction and cursor.wal_end > self.confirmed:
                    self.confirm(cursor, cursor.wal_end)  # idle: nothing of ours before the server's position
                self.publish_log.say_if_due()
                if not self.pending and self.base_due():  # one that failed, tried again once its pause is over
                    self.start_base()
                wait = self.published_at + self.settings.window - now if self.pending else 1.0
                select.select([connection], [], [], max(wait, 0.0))
                continue
            self.take(pgoutput.decode(message.payload), cursor)

    def due(self, now: float, drained: bool) -> bool:
        """Whether the changes that wait are published now: a window after the last publish once
        the stream is ``drained`` (nothing more to read at once), or a window after the first of
        them in any case (a stream that never pauses), or at once when they are many."""
        window = self.settings.window
        return (self.pending_records >= BATCH_RECORDS or now - self.pending_since >= window
                or (drained and now - self.published_at >= window))

    def take(self, message: pgoutput.Message, cursor: Any) -> None:
        if isinstance(message, pgoutput.Begin):
            self.rows, self.truncated, self.in_transaction = {}, [], True
        elif isinstance(message, pgoutput.Relation):
            self.relations[message.relation_id] = self.mapped(message)
        elif isinstance(message, pgoutput.Insert | pgoutput.Update):
            mapped = self.relations.get(message.relation_id)
            if mapped is not None:
                identity = int(str(message.new[mapped.key]))
                self.rows[(mapped.table, identity)] = self.fields(mapped, identity, message.new)
        elif isinstance(message, pgoutput.Delete):
            mapped = self.relations.get(message.relation_id)
            if mapped is not None:
                self.rows[(mapped.table, int(str(message.old[mapped.key])))] = None
        elif isinstance(message, pgoutput.Truncate):
            for relation in message.relation_ids:
                mapped = self.relations.get(relation)
                if mapped is not None:
                    self.rows = {key: fields for key, fields in self.rows.items() if key[0] != mapped.table}
                    self.truncated.append(mapped.table)
        elif isinstance(message, pgoutput.Commit):
            self.committed(message, cursor)

    def committed(self, commit: pgoutput.Commit, cursor: Any) -> None:
        rows, truncated, self.rows, self.truncated, self.in_transaction = self.rows, self.truncated, {}, [], False
        if commit.end_lsn <= self.published_lsn:
            return  # published before the follower stopped: sent again from the slot's position
        assert self.state is not None
        for table in truncated:
            self.state.truncate(table)
        links = []
        built = [identity for (table, identity), fields in rows.items() if table == BUILD_TABLE and self.built(identity, fields)]
        for (table, identity), fields in rows.items():
            skipped = self.state.row(table, identity, fields)
            if skipped is not None:
                log.warning("%s %d is not served: %s", skipped.table, skipped.id, skipped.reason)
            if table == PROJECT_USERS:
                link = [commit.end_lsn, identity] + ([fields["project"], fields["user"]] if fields is not None else [])
                links.append(msgspec.json.encode(link) + b"\n")
        if PROJECT_USERS in truncated:
            links.append(msgspec.json.encode([commit.end_lsn, 0]) + b"\n")  # id 0: every row
        for identity in built:
            build = self.state.candidates["builds"].get(identity)
            if build is not None:  # a row that makes no build is not served (said above)
                self.read_pages(build.version)
        changes = self.state.commit()
        if not changes and not links and not self.pending:
            self.published_lsn = commit.end_lsn
            self.confirm(cursor, commit.end_lsn)
            return
        if not self.pending:
            self.pending_since = time.monotonic()
        self.pending.append(changes)
        self.pending_links += links
        self.pending_records += len(changes)
        self.pending_transactions += 1
        self.pending_end, self.pending_commit = commit.end_lsn, commit.committed_at

    def mapped(self, relation: pgoutput.Relation) -> Mapped | None:
        """Where the mapped columns of a table stand in its rows; None for a table docsrv does not
        serve. A mapped column missing, or of another type, stops the follower (CommandError)."""
        table = TABLES.get(relation.name) if relation.namespace == "public" else None
        if table is None or (table.name == PAGE_TABLE and self.settings.pages_from is not None):
            return None
        at = {column.name: (place, column) for place, column in enumerate(relation.columns)}
        places = []
        for name in self.columns[table.name]:
            kind = table.kind(name)
            if name not in at:
                self.stopping()
                raise CommandError(f"{table.name}.{name}: the source database no longer streams this column (dropped or "
                                   "renamed?), and docsrv maps it: the follower stops")
            place, column = at[name]
            if column.type_oid not in TYPES[kind]:
                self.stopping()
                raise CommandError(f"{table.name}.{name}: the source database streams it as type {column.type_oid} (pg_type "
                                   f"oid), where docsrv maps a {kind} column: the follower stops")
            places.append((place, name, table.field(name), kind))
        return Mapped(table.name, at["id"][0], tuple(places))

    def built(self, identity: int, fields: Fields | None) -> bool:
        """Whether a build's row, as it is now (``fields``), finishes it successfully: with
        ``--pages-from``, its version's pages are then read from its HTML."""
        if self.settings.pages_from is None or fields is None or fields.get("state") != "finished" or fields.get("success") is not True:
            return False
        assert self.state is not None
        before = self.state.candidates["builds"].get(identity)
        return before is None or before.state != "finished" or not before.success

    def read_pages(self, version: int, *, missing_said: bool = True) -> None:
        """The pages of ``version`` read from its build in ``--pages-from`` (``html/<project>/<version>/``,
        by slug), through ``import-sphinx``'s reading, in place of those it had. A build that is not
        there, or holds no page that can be read, leaves them as they were, said in one line."""
        assert self.state is not None and self.settings.pages_from is not None
        found = self.state.candidates["versions"].get(version)
        project = self.state.candidates["projects"].get(found.project) if found is not None else None
        if found is None or project is None:
            return
        root = self.settings.pages_from / "html" / project.slug / found.slug
        if not root.is_dir():
            if missing_said:
                log.warning("no HTML at %s: the pages of %s %s are as they were", root, project.slug, found.slug)
            return
        try:
            pages, report = read_build(root, project.id, version, self.state.next_page_id())
        except (CommandError, OSError) as error:
            log.warning("the pages of %s %s are as they were: %s", project.slug, found.slug, one_line(error))
            return
        self.state.pages_read(version, pages)
        log.info("read %d pages of %s %s from %s%s", len(pages), project.slug, found.slug, root,
                 f" ({len(report.skipped)} files skipped)" if report.skipped else "")

    def stopping(self) -> None:
        if self.pending:
            self.publish()

    def fields(self, mapped: Mapped, identity: int, values: tuple[pgoutput.Value, ...]) -> Fields:
        fields: Fields = {}
        earlier = self.rows.get((mapped.table, identity))
        for place, column, name, kind in mapped.places:
            value = values[place]
            if isinstance(value, pgoutput.Unchanged):
                assert self.state is not None
                try:
                    fields[name] = earlier[name] if earlier is not None else self.state.unchanged(mapped.table, identity, column)
                except KeyError:
                    raise CommandError(f"{mapped.table}.{column} of row {identity}: an update left it unchanged (TOASTed) and "
                                       "the follower holds no value of it") from None
            else:
                fields[name] = value_of(kind, value)
        return fields

    # Publishing.

    def publish(self) -> None:
        assert self.state is not None
        started = time.perf_counter()
        changes = coalesced(self.pending)
        lsn, committed_at, transactions = self.pending_end, self.pending_commit, self.pending_transactions
        links, self.pending_links = self.pending_links, []
        self.pending, self.pending_records, self.pending_transactions = [], 0, 0
        self.published_at = time.monotonic()
        if links:
            append_links(self.origin, links)
        if changes:
            head = self.head
            assert head is not None and committed_at is not None
            sequence = head.sequence + 1
            data = changeset_of(self.state, changes, sequence=sequence, follows=head.name, product=self.name(sequence),
                                created_at=datetime.now(UTC).replace(microsecond=0), public_url=self.settings.public_url,
                                source_lsn=pgoutput.lsn_text(lsn), committed_at=committed_at)
            published = publish_changeset(self.origin, head, data, started, durable=True, source_lsn=pgoutput.lsn_text(lsn),
                                          whole=lambda why, leading: self.publish_whole(why, leading, pgoutput.lsn_text(lsn), started))
            self.head = read_head(self.origin)
            lag = (datetime.now(UTC) - committed_at).total_seconds()
            self.metrics.publishing(published.kind, len(changes), transactions, lag)
            if published.compacted:
                self.publish_log.say()
                log.info("published snapshot %d (%s) whole: %s; %d records changed by %d transaction(s) to %s, %.0f ms after "
                         "its last commit", published.sequence, published.name, published.compacted, len(changes), transactions,
                         pgoutput.lsn_text(lsn), lag * 1000)
            else:
                self.publish_log.published(published.sequence, len(changes), transactions, pgoutput.lsn_text(lsn), lag)
        self.published_lsn = lsn
        if self.base_due():  # the state is that of the head now: nothing waits to be published
            self.start_base()

    def base_due(self) -> bool:
        """Whether a base is to be built in the background now."""
        head = self.head
        if self.building is not None or head is None or not head.changesets or time.monotonic() < self.next_base_at:
            return False
        if len(head.changesets) >= BACKGROUND_CHANGESETS:
            return True
        if self._base_bytes[0] != head.base:
            self._base_bytes = (head.base, snapshot_bytes(self.origin / SNAPSHOTS / head.base))
        return sum(entry.size for entry in head.changesets) >= BACKGROUND_SHARE * self._base_bytes[1]

    def start_base(self) -> None:
        assert self.state is not None and self.head is not None
        self.building = BaseBuild.start(self.state, self.origin, self.origin / PRIVATE, self.head.name, self.head.sequence,
                                        self.settings.public_url)
        log.info("building base %s (sequence %d) in the background: %d changesets follow base %s", self.head.name,
                 self.head.sequence, len(self.head.changesets), self.head.base)

    def tend_base(self) -> None:
        """Once the base built in the background is laid, make it the origin's base, between two
        changesets: those published meanwhile follow it."""
        assert self.building is not None and self.state is not None
        why = self.building.outcome()
        if why is None:
            return
        built, self.building = self.building, None
        head = read_head(self.origin)
        if why:
            self.next_base_at = time.monotonic() + BASE_RETRY_SECONDS
            built.discard()
            log.warning("base %s was not built: %s; the next is tried in %.0f s", built.name, " ".join(why.split()), BASE_RETRY_SECONDS)
            return
        if head is None or built.sequence not in {entry.sequence for entry in head.changesets}:
            built.discard()  # a base was published whole meanwhile
            return
        write_links(self.origin, self.state.links)
        self.head = rebase(self.origin, head, built.name, built.sequence, durable=True)
        self.metrics.publishing("snapshot", 0, 0, None)
        log.info("published base %s (sequence %d), built in the background in %.1f s: %d changesets follow it", built.name,
                 built.sequence, time.perf_counter() - built.started, len(self.head.changesets))

    def stop_base(self) -> None:
        if self.building is not None:
            self.building.stop()
            self.building = None

    def publish_whole(self, why: str, leading: list[Any], lsn: str, started: float) -> Published:
        """Publish the state whole (a base, or a compaction), the rows of project users beside it."""
        assert self.state is not None
        self.stop_base()
        head = self.head
        sequence = head.sequence + 1 if head is not None else 1
        private = self.origin / PRIVATE
        private.mkdir(parents=True, exist_ok=True)
        write_links(self.origin, self.state.links)
        work = private / f"whole-{sequence}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            try:
                write_snapshot(self.state.records(), work, self.name(sequence), self.settings.public_url, None)
            except OSError as error:  # a write's error names no file: the snapshot being written
                raise OSError(error.errno, error.strerror, error.filename or str(work)) from error
            published = publish_whole(work, manifest_of(work), self.origin, head, sequence, started, compacted=why, leading=leading,
                                      durable=True, source_lsn=lsn)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self.head = read_head(self.origin)
        return published

    def check_slot(self, database: Any) -> None:
        """Ask the database how much WAL the slot retains (``FollowerMetrics.retained``). A database
        that cannot say (a role without the right, a standby) is said once in the log; a connection
        lost raises, as the stream's would."""
        try:
            with database.cursor() as cursor:
                cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots "
                               "WHERE slot_name = %s", (self.settings.slot,))
                row = cursor.fetchone()
            database.commit()
        except psycopg2.OperationalError:
            raise
        except psycopg2.Error as error:
            database.rollback()
            if self.slot_unknown != (said := one_line(error)):
                self.slot_unknown = said
                log.warning("the WAL slot %s retains is not known: %s", self.settings.slot, said)
            row = None
        self.metrics.retained(int(row[0]) if row is not None and row[0] is not None else None)

    def name(self, sequence: int) -> str:
        return f"{self.settings.slot}-{sequence}"

    def confirm(self, cursor: Any, lsn: int) -> None:
        """Tell the server every change up to ``lsn`` is taken: it may drop the WAL before it."""
        if lsn > self.confirmed:
            cursor.send_feedback(write_lsn=lsn, flush_lsn=lsn, apply_lsn=lsn, force=True)
            self.confirmed = lsn


@dataclass(frozen=True)
class Mapped:
    """A served table's columns in the rows the stream sends: (place, column, field, kind) of each
    mapped one, and the place of its key."""

    table: str
    key: int
    places: tuple[tuple[int, str, str, str], ...]


@contextmanager
def connected(dsn: str, *, replication: bool = False) -> Iterator[Any]:
    """A connection to the source database, in UTC (so that times read as they are stored)."""
    factory = psycopg2.extras.LogicalReplicationConnection if replication else None
    connection = psycopg2.connect(dsn, connection_factory=factory, options="-c TimeZone=UTC", application_name="docsrv follow")
    try:
        yield connection
    finally:
        connection.close()


def read_base(database: Any, snapshot: str, columns: dict[str, list[str]]) -> SourceState:
    """The state of the served tables in the exported ``snapshot``: their mapped columns, read in one
    transaction that sees what the slot's first change follows."""
    database.set_session(isolation_level=psycopg2.extensions.ISOLATION_LEVEL_REPEATABLE_READ, readonly=True)
    with database.cursor() as cursor:
        cursor.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
        cursor.execute(f"SELECT id, project_id, user_id FROM {quoted(PROJECT_USERS)} ORDER BY id")
        links = {identity: (project, user) for identity, project, user in cursor.fetchall()}
    users: dict[int, list[int]] = {}
    for project, user in links.values():
        users.setdefault(project, []).append(user)
    candidates: dict[str, list] = {kind: [] for kind in KINDS}
    for name, table in TABLES.items():
        if name == PROJECT_USERS or name not in columns:
            continue
        kind = KIND_OF_TABLE[name]
        mapped = [(column, table.field(column), table.kind(column) == "time") for column in columns[name]]
        selected = ", ".join(f"{quoted(column)}::text" if time_of else quoted(column) for column, _field, time_of in mapped)
        with database.cursor(name=f"docsrv_base_{name}") as cursor:
            cursor.itersize = BASE_ROWS
            cursor.execute(f"SELECT {selected} FROM {quoted(name)}")
            for row in cursor:
                fields: Fields = {field: dumped_time(value) if time_of and value is not None else value
                                  for (_column, field, time_of), value in zip(mapped, row, strict=True)}
                if kind == "projects":
                    fields["users"] = users.get(fields["id"], [])
                try:
                    candidates[kind].append(record_of(table.model, fields["id"], fields))
                except (msgspec.ValidationError, TypeError, ValueError) as error:
                    log.warning("%s %s is not served: %s", name, fields.get("id"), one_line(error))
    database.commit()
    return SourceState.of_candidates(candidates, links)


def load_state(origin: Path, head: Head, taken_lsn: int, *, pages_read: bool = False) -> SourceState:
    """The state the origin publishes: its base and every changeset after it, with the rows of
    project users the follower kept up to ``taken_lsn``. Pages from rows have their document names
    derived again as they change (``import_dump.with_document``); with ``pages_read``, pages keep
    the names their builds gave them."""
    base = origin / SNAPSHOTS / head.base
    problems = ProblemList(str(base))
    by_id: dict[str, dict[int, Any]] = {}
    for kind, cls in KINDS.items():
        found = record_file(base, kind)
        by_id[kind] = {record.id: record for record in (read_records(found[0], cls, problems) if found else [])}
    problems.raise_if_any()
    decoders = {kind: msgspec.json.Decoder(cls) for kind, cls in KINDS.items()}
    for entry in head.changesets:
        path = origin / changeset_path(entry.sequence)
        changeset = read_listed(path.read_bytes(), entry, str(path))
        for kind in KINDS:
            for identity in changeset.deletes[kind]:
                by_id[kind].pop(identity, None)
            for identity, line in changeset.upserts[kind].items():
                by_id[kind][identity] = decoders[kind].decode(line)
    if not pages_read:
        by_id["pages"] = {identity: msgspec.structs.replace(page, document="") for identity, page in by_id["pages"].items()}
    return SourceState.of_candidates({kind: found.values() for kind, found in by_id.items()}, read_links(origin, taken_lsn))


# The rows of project users, which no snapshot holds: a journal of lines [lsn, id, project, user]
# (a row as of lsn) and [lsn, id] (deleted; id 0: every row), rewritten whole with each base.


def write_links(origin: Path, links: dict[int, tuple[int, int]]) -> None:
    private = origin / PRIVATE
    private.mkdir(parents=True, exist_ok=True)
    lines = b"".join(msgspec.json.encode([0, identity, project, user]) + b"\n" for identity, (project, user) in sorted(links.items()))
    replace_file(private / LINKS, lines, durable=True)


def append_links(origin: Path, lines: list[bytes]) -> None:
    path = origin / PRIVATE / LINKS
    with open(path, "a+b") as journal:
        if journal.tell() > 0:
            journal.seek(-1, os.SEEK_END)
            if journal.read(1) != b"\n":  # a line a crash cut short: ended, so that it stays alone
                lines = [b"\n", *lines]
        journal.write(b"".join(lines))
        journal.flush()
        os.fsync(journal.fileno())
    sync_directory(path.parent)


def read_links(origin: Path, taken_lsn: int) -> dict[int, tuple[int, int]]:
    """The rows of project users as of ``taken_lsn``: lines of later transactions are left out
    (the server sends those transactions again)."""
    links: dict[int, tuple[int, int]] = {}
    try:
        data = (origin / PRIVATE / LINKS).read_bytes()
    except FileNotFoundError:
        return links
    for line in data.splitlines():
        try:
            entry = msgspec.json.decode(line, type=list[int])
        except msgspec.DecodeError:
            continue  # a line cut short by a crash: its transaction is sent again
        if entry[0] > taken_lsn:
            continue
        if len(entry) == 4:
            links[entry[1]] = (entry[2], entry[3])
        elif entry[1] == 0:
            links.clear()
        else:
            links.pop(entry[1], None)
    return links
