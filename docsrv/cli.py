"""The ``docsrv`` command line. Nothing imports this module."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .config import LOG_FORMAT, SERVE_OPTIONS, Deadlines, Settings, add_options, listed
from .errors import CommandError, StartError
from .observe import logs
from .snapshot.commands import CommandFile
from .snapshot.errors import SnapshotError

if TYPE_CHECKING:
    from .store.loaded import Store


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_format)
    try:
        return args.run(args) or 0
    except (SnapshotError, StartError, CommandError) as error:
        print(f"docsrv: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # a full disk, a read-only directory, a missing path: one line, no traceback
        where = f"{error.filename}: " if error.filename else ""
        print(f"docsrv: {where}{error.strerror or error}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="docsrv", description="A read replica of a documentation-hosting JSON API.")
    parser.add_argument("--version", action="version", version=f"docsrv {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve a snapshot over HTTP")
    add_options(serve, SERVE_OPTIONS)
    serve.set_defaults(run=run_serve)

    index = commands.add_parser("index", help="build the search index of a snapshot")
    index.add_argument("path", type=Path, help="the snapshot directory (it must be writable)")
    index.set_defaults(run=run_index)

    fleet = commands.add_parser("fleet", help="ask the replicas of a fleet").add_subparsers(dest="fleet_command", required=True)
    wait = fleet.add_parser("wait", help="wait until every replica serves a snapshot and nothing older (then purge)")
    wait.add_argument("urls", nargs="+", metavar="URL", help="the base URL of each replica (each pod, not the load balancer)")
    wait.add_argument("--snapshot", required=True, help="the name of the snapshot every replica must serve")
    wait.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS", help="give up after this long (default: %(default)s)")
    wait.set_defaults(run=run_fleet_wait)

    snapshot = commands.add_parser("snapshot", help="make, check and describe snapshots").add_subparsers(
        dest="snapshot_command", required=True
    )
    synth = snapshot.add_parser("synth", help="write a synthetic snapshot, deterministic for a seed")
    synth.add_argument("--out", type=Path, required=True, help="the snapshot directory to create")
    synth.add_argument("--scale", choices=["demo", "small", "medium", "large"], default="small",
                       help="demo (the size of the bundled demo), small (1k projects), medium (10k) or large (100k) "
                            "(default: %(default)s)")
    synth.add_argument("--seed", type=int, default=1, help="the same seed writes the same snapshot (default: %(default)s)")
    synth.add_argument("--compress", choices=["none", "gz", "zst"], default="none",
                       help="compression of record files (default: %(default)s)")
    synth.add_argument("--force", action="store_true", help="replace --out if it exists")
    synth.set_defaults(run=run_synth)

    validate = snapshot.add_parser("validate", help="check a snapshot; exit 1 naming every problem")
    validate.add_argument("path", type=Path, help="the snapshot directory")
    validate.set_defaults(run=run_validate)

    prepare = snapshot.add_parser(
        "prepare", help="check a snapshot once and keep, beside its files, what lets a server load it in seconds "
                        "(index and pull do this; a server only reads it)"
    )
    prepare.add_argument("path", type=Path, help="the snapshot directory (it must be writable)")
    prepare.set_defaults(run=run_prepare)

    sphinx = snapshot.add_parser("import-sphinx", help="replace a version's pages by those of a Sphinx HTML build")
    sphinx.add_argument("html_dir", type=Path, help="the build's output directory (html or dirhtml)")
    sphinx.add_argument("--into", type=Path, required=True, help="the snapshot to change")
    sphinx.add_argument("--project", required=True, help="project slug")
    sphinx.add_argument("--version", required=True, help="version slug")
    sphinx.add_argument("--layout", choices=["auto", "html", "dirhtml"], default="auto",
                        help="the build's layout: html (page.html) or dirhtml (page/index.html); auto tells them apart "
                             "(default: %(default)s)")
    sphinx.set_defaults(run=run_import_sphinx)

    dump = snapshot.add_parser("import-dump", help="write a snapshot from Django dumpdata files of the hosting service")
    dump.add_argument("dumps", type=Path, nargs="+", help="dumpdata output: a JSON list, or JSON Lines")
    dump.add_argument("--out", type=Path, required=True, help="the snapshot directory to create")
    dump.add_argument("--name", default=None, help="the snapshot's name (default: the first dump's file name)")
    dump.add_argument("--public-url", default="https://docs.example.org",
                      help="base URL of the hosted documentation (default: %(default)s)")
    dump.add_argument("--force", action="store_true", help="replace --out if it exists")
    dump.set_defaults(run=run_import_dump)

    pull = snapshot.add_parser("pull", help="pull a published snapshot from an origin and point DIR/current at it")
    pull.add_argument("url", help="the base URL of an origin (``snapshot publish``: URL/head.json), or of a snapshot "
                                  "published by hand (URL/manifest.json)")
    pull.add_argument("--into", type=Path, required=True, help="the directory of pulled snapshots and of the current link")
    pull.add_argument("--every", type=float, default=None, metavar="SECONDS",
                      help="pull again every SECONDS, for ever (a sidecar); failures are logged and retried with backoff")
    pull.add_argument("--keep", type=int, default=2, help="snapshots kept (the current one always; default: %(default)s)")
    pull.add_argument("--manifest-timeout", type=float, default=Deadlines.manifest_seconds, metavar="SECONDS",
                      help="the longest the origin may take to send manifest.json, in all (default: %(default)s)")
    pull.add_argument("--min-kib", type=int, default=Deadlines.min_kib, metavar="KIB",
                      help="a file transfer is given up (and resumed by the next pull) when fewer KiB than this arrive "
                           "in --rate-window seconds (default: %(default)s)")
    pull.add_argument("--rate-window", type=float, default=Deadlines.window, metavar="SECONDS",
                      help="the window of --min-kib, also the longest wait for a file's first bytes (default: %(default)s)")
    pull.set_defaults(run=run_pull)

    publish = snapshot.add_parser(
        "publish", help="lay a snapshot out on an origin directory that replicas pull from: whole, or as the changeset "
                        "from the snapshot the origin publishes (--since)"
    )
    publish.add_argument("snapshot", type=Path, help="the snapshot to publish")
    publish.add_argument("origin", type=Path, help="the origin directory (made if need be), served as it is by any static HTTP "
                                                   "server, CDN or object store")
    publish.add_argument("--since", type=Path, default=None, metavar="OLD",
                         help="the snapshot the origin publishes now: only the changeset from it is written (unless the "
                              "changesets since the base grow past a quarter of it: then SNAPSHOT is published whole)")
    publish.set_defaults(run=run_publish)

    follow = snapshot.add_parser(
        "follow", help="follow the service's Postgres database by logical replication, and publish each commit to an "
                       "origin (as `snapshot publish` lays it out) within a second"
    )
    follow.add_argument("dsn", nargs="?", help="the source database, as libpq takes it "
                                               "('host=db dbname=rtd user=docsrv_follower', or a postgresql:// URL)")
    follow.add_argument("origin", nargs="?", type=Path, help="the origin directory (made if need be), served as it is by any "
                                                             "static HTTP server")
    follow.add_argument("--public-url", default="https://docs.example.org",
                        help="the base URL of the hosted documentation (default: %(default)s)")
    follow.add_argument("--slot", default="docsrv", type=slot_name, help="the logical replication slot (default: %(default)s)")
    follow.add_argument("--publication", default="docsrv", help="the publication of the served tables (default: %(default)s)")
    follow.add_argument("--window", type=float, default=0.1, metavar="SECONDS",
                        help="the shortest time between two changesets: a commit that comes sooner after the last one "
                             "waits for the window's end, with those that join it (default: %(default)s)")
    follow.add_argument("--pages-from", type=Path, default=None, metavar="DIR",
                        help="the service's storage of built HTML (DIR/html/<project>/<version>/): a version's pages are "
                             "read from its build when one finishes successfully (as import-sphinx reads them), not from "
                             "the page rows")
    follow.add_argument("--metrics-port", type=metrics_port, default=None, metavar="PORT",
                        help="serve GET /metrics (lag, retained WAL, what was published) on this port (0: any free one; "
                             "default: not served)")
    follow.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                        help="the address /metrics is served on (default: %(default)s)")
    follow.add_argument("--print-setup", action="store_true",
                        help="print the SQL that makes the publication (only the columns docsrv maps: with DSN, those that "
                             "database has) and a role that may follow, and exit")
    follow.set_defaults(run=run_follow)

    diff = snapshot.add_parser(
        "diff", help="print the purge keys of every reply that may differ between two snapshots, one a line, sorted"
    )
    diff.add_argument("old", type=Path, help="the snapshot served until now")
    diff.add_argument("new", type=Path, help="the snapshot that replaces it")
    diff.add_argument("--json", action="store_true", help="print the keys grouped by why: changed, added, removed, lists")
    add_delivery(diff)
    diff.set_defaults(run=run_diff)

    keys = snapshot.add_parser(
        "keys", help="print the purge keys of the changesets an origin published, one a line, sorted (from their headers: "
                     "in time proportional to the change)"
    )
    keys.add_argument("origin", type=Path, help="the origin directory `snapshot publish` writes")
    keys.add_argument("--since", type=int, default=None, metavar="SEQUENCE",
                      help="the keys of every changeset after this sequence (default: the last changeset's alone)")
    add_delivery(keys)
    keys.set_defaults(run=run_keys)

    info = snapshot.add_parser("info", help="print a snapshot's manifest and counts")
    info.add_argument("path", type=Path, help="the snapshot directory")
    info.set_defaults(run=run_info)
    for command in leaf_parsers(parser):
        if command is not serve:
            add_options(command, [LOG_FORMAT])
    return parser


def leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser of a command that takes no subcommand."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += leaf_parsers(child)
    return found or [parser]


def run_serve(args: argparse.Namespace) -> int:
    from .http.hosts import default_allowed_hosts
    from .serve.supervisors import serve
    from .serve.worker import DEMO_SNAPSHOT

    if args.keepalive_timeout <= 0:
        raise SystemExit(f"docsrv: --keepalive-timeout must be more than 0 seconds, not {args.keepalive_timeout}")
    settings = Settings(
        public_url=args.public_url,
        max_age=args.max_age,
        stale_while_revalidate=args.stale_while_revalidate,
        stale_if_error=args.stale_if_error,
        response_cache_bytes=args.response_cache_mb << 20,
        allowed_hosts=tuple(listed(args, "allowed_host") or default_allowed_hosts(args.host)),
        search_queue=args.search_queue,
        fast_path=not args.no_fast_path,
        keepalive_timeout=args.keepalive_timeout,
    )
    return serve(
        args.snapshot or DEMO_SNAPSHOT,
        settings,
        args.host,
        args.port,
        workers=args.workers or os.cpu_count() or 1,
        watch=args.watch_interval if args.watch else None,
        look_interval=args.watch_interval,
        access_log=args.access_log,
        no_workers_timeout=args.no_workers_timeout,
        worker_timeout=args.worker_timeout,
    )


def run_synth(args: argparse.Namespace) -> int:
    from .snapshot.synth import write_synthetic

    counts = write_synthetic(args.out, scale=args.scale, seed=args.seed, compress=args.compress, replace=args.force)
    print(f"wrote {args.scale} snapshot to {args.out}: " + ", ".join(f"{n} {kind}" for kind, n in counts.items()))
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from .store.loaded import load_store

    store = load_store(args.path, trust=False)  # asked to check: every digest and line, whatever was checked before
    counts = ", ".join(f"{n} {kind}" for kind, n in store.counts.items())
    print(f"{args.path}: snapshot {store.name} is good ({counts} public; checked in {store.load_seconds:.2f} s)")
    return 0


def run_import_sphinx(args: argparse.Namespace) -> int:
    from .snapshot.import_sphinx import import_sphinx

    report = import_sphinx(args.html_dir, args.into, args.project, args.version, layout=args.layout)
    for path, reason in report.skipped:
        print(f"skipped {path}: {reason}", file=sys.stderr)
    skipped = [f"{n} {kind}" for kind, n in sorted(report.generated.items())] + [f"{len(report.skipped)} unreadable"]
    entries = ", ".join(f"{n} {kind}" for kind, n in sorted(report.entries.items())) or "none"
    print(
        f"imported {report.pages} pages ({report.layout} layout) into {args.project}/{args.version}, "
        f"replacing {report.replaced}; skipped {len(report.skipped) + report.generated.total()} ({', '.join(skipped)}); "
        f"named entries: {entries}" + (f" ({report.unplaced} on pages not imported)" if report.unplaced else "")
    )
    return 0


def run_import_dump(args: argparse.Namespace) -> int:
    from .snapshot.import_dump import import_dump

    report = import_dump(args.dumps, args.out, name=args.name, public_url=args.public_url, replace=args.force)
    for model, pk, reason in report.skipped:
        print(f"skipped {model} pk={pk}: {reason}", file=sys.stderr)
    for model, pk, what in report.notes:
        print(f"kept {model} pk={pk}: {what}", file=sys.stderr)
    print(f"wrote {args.out}: " + ", ".join(f"{n} {kind}" for kind, n in report.counts.items()))
    if report.skipped:
        by_model = Counter(model for model, _, _ in report.skipped)
        print(f"skipped {len(report.skipped)} records that cannot be served faithfully: "
              + ", ".join(f"{model} ({n})" for model, n in by_model.most_common()) + " (each named above)")
    if report.unknown:
        skipped = ", ".join(f"{model} ({n})" for model, n in report.unknown.most_common())
        print(f"skipped {sum(report.unknown.values())} records of models docsrv does not know: {skipped}")
    return 0


def run_pull(args: argparse.Namespace) -> int:
    import asyncio

    from .errors import PullError
    from .replica.fetch import describe
    from .replica.pull import pull
    from .replica.sidecar import pull_every

    deadlines = Deadlines(manifest_seconds=args.manifest_timeout, min_kib=args.min_kib, window=args.rate_window)
    if args.every is not None:
        asyncio.run(pull_every(args.url, args.into, args.every, keep=args.keep, deadlines=deadlines))
        return 0
    try:
        pulled = asyncio.run(pull(args.url, args.into, keep=args.keep, deadlines=deadlines))
    except (PullError, OSError) as error:
        print(f"docsrv: pull failed: {describe(error)}", file=sys.stderr)
        return 1
    if pulled.changed:
        what = f"{pulled.files} files"
        if pulled.changesets:
            what = f"{pulled.changesets} changeset(s) and {pulled.files - pulled.changesets} files"
        print(f"pulled snapshot {pulled.name} ({what}, {pulled.bytes / 1e6:.1f} MB in {pulled.seconds:.1f} s); {pulled.where(args.into)}")
    else:
        print(f"snapshot {pulled.name} is current; nothing to pull")
    return 0


def run_publish(args: argparse.Namespace) -> int:
    from .replica.publish import publish
    from .serve.served import resolve

    published = publish(resolve(args.snapshot), args.origin, resolve(args.since) if args.since is not None else None)
    if published.compacted:
        print(f"published snapshot {published.name} whole as sequence {published.sequence}: {published.compacted}")
    print(f"published {published.kind} {published.sequence} of {args.origin}: snapshot {published.name}, "
          f"{published.bytes} bytes in {published.seconds:.1f} s")
    return 0


def metrics_port(text: str) -> int:
    """A TCP port, or 0 for any free one."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a port is a number from 0 to 65535")
    return port


def slot_name(text: str) -> str:
    """A replication slot's name as Postgres takes one: lower-case letters, digits and ``_``."""
    import re

    if not re.fullmatch(r"[a-z0-9_]{1,63}", text):
        raise argparse.ArgumentTypeError(f"{text!r}: a slot's name is 1-63 lower-case letters, digits and underscores")
    return text


def run_follow(args: argparse.Namespace) -> int:
    import psycopg2

    from .source.follower import FollowSettings, connected, follow
    from .source.setup import mapped_columns, one_line, setup_sql

    if args.print_setup:  # with a DSN, for the columns that database has
        tables = None
        if args.dsn is not None:
            try:
                with connected(args.dsn) as database:
                    tables = mapped_columns(database)
            except psycopg2.Error as error:
                raise CommandError(f"source database: {one_line(error)}") from None
        print(setup_sql(args.publication, args.slot, tables))
        return 0
    if args.dsn is None or args.origin is None:
        raise CommandError("snapshot follow takes the source database (DSN) and the origin directory (ORIGIN)")
    follow(FollowSettings(dsn=args.dsn, origin=args.origin, public_url=args.public_url, slot=args.slot,
                          publication=args.publication, window=args.window, pages_from=args.pages_from, metrics_host=args.metrics_host,
                          metrics_port=args.metrics_port))
    return 0


def run_index(args: argparse.Namespace) -> int:
    from .search.location import build_index_aside, fingerprint, index_directories
    from .serve.served import resolve
    from .snapshot.published import publish_ranges
    from .snapshot.records import INDEX
    from .snapshot.write import seal_index
    from .store.loaded import load_store, prepare

    snapshot = resolve(args.path)
    store = load_store(snapshot, trust=False, keep=True)  # what it publishes stands for a whole check
    digest = fingerprint(snapshot)
    directory = index_directories(snapshot, digest)[0]
    seconds = build_index_aside(store, directory, digest)
    size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    print(f"indexed {len(store.pages)} pages of {store.name} in {seconds:.1f} s ({size / 2**20:.1f} MiB at {directory})")
    if directory == snapshot / INDEX and (snapshot / "manifest.json").is_file():
        # The scan of the build commands, published so that no replica does it again.
        commands = store.commands
        assert isinstance(commands, CommandFile)  # a store loaded from its files
        publish_ranges(snapshot, store.manifest, commands.ranges, commands.total)
        sealed = seal_index(snapshot, directory)
        print(f"manifest.json lists the index's {sealed} files: it is published and pulled with the snapshot")
    del store
    report_prepared(prepare(snapshot), snapshot)
    return 0


def run_prepare(args: argparse.Namespace) -> int:
    from .serve.served import resolve
    from .store.loaded import prepare

    report_prepared(prepare(resolve(args.path)), args.path)
    return 0


def report_prepared(store: Store, path: Path) -> None:
    how = "a record of an earlier check stands" if store.trusted else "checked whole"
    print(f"prepared {path} for serving ({how}; {store.load_seconds:.1f} s): a server trusts it while its files stay as they are")


def add_delivery(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--purge", metavar="URL", default=None, help="send the keys to this purge endpoint instead of printing them")
    parser.add_argument("--dialect", choices=["varnish-xkey", "fastly", "cloudflare"], default="varnish-xkey",
                        help="the request shape of --purge (default: %(default)s); fastly and cloudflare read their token from "
                             "FASTLY_API_TOKEN and CLOUDFLARE_API_TOKEN")


def run_keys(args: argparse.Namespace) -> int:
    import time

    from .replica.publish import published_keys

    started = time.perf_counter()
    keys = published_keys(args.origin, args.since)
    if args.purge is None:
        sys.stdout.write("".join(key + "\n" for key in keys))
        return 0
    return purge(keys, args, started)


def purge(keys: list[str], args: argparse.Namespace, started: float) -> int:
    """Deliver ``keys`` to ``--purge`` in ``--dialect``; say what was done in one line."""
    import asyncio
    import time

    from .edge.delivery import PurgeError, deliver

    try:
        done = asyncio.run(deliver(keys, args.purge, args.dialect))
    except PurgeError as error:
        print(f"docsrv: purge failed: {error}", file=sys.stderr)
        return 1
    print(f"purged {done.keys} keys in {done.requests} requests ({done.retries} retried) to {args.purge} "
          f"({args.dialect}) in {time.perf_counter() - started:.1f} s")
    return 0


def run_diff(args: argparse.Namespace) -> int:
    import json
    import time

    from .edge.diff import compare

    started = time.perf_counter()
    try:
        keys = compare(args.old, args.new)
    except SnapshotError as error:  # one line: the diff runs in scripts, between a pull and a purge
        print(f"docsrv: snapshot diff: {error.path}: {error.summary()}", file=sys.stderr)
        return 1
    if args.purge is None:
        if args.json:
            print(json.dumps(keys.by_group(), indent=2))
        else:
            sys.stdout.write("".join(key + "\n" for key in keys.all()))
        return 0
    return purge(keys.all(), args, started)


def run_fleet_wait(args: argparse.Namespace) -> int:
    import asyncio

    from .edge.fleet import wait_for_fleet

    behind = asyncio.run(wait_for_fleet(args.snapshot, args.urls, args.timeout))
    if behind:
        print(f"docsrv: after {args.timeout:g} s, {len(behind)} of {len(args.urls)} replica(s) do not serve snapshot "
              f"{args.snapshot} alone: " + "; ".join(f"{url}: {why}" for url, why in behind.items()), file=sys.stderr)
        return 1
    print(f"all {len(args.urls)} replica(s) serve snapshot {args.snapshot}, none draining an earlier one")
    return 0


def run_info(args: argparse.Namespace) -> int:
    import msgspec

    from .snapshot.errors import ProblemList
    from .snapshot.load import read_manifest

    problems = ProblemList(str(args.path))
    manifest = read_manifest(args.path, problems)
    problems.raise_if_any()
    print(msgspec.json.format(msgspec.json.encode(manifest), indent=2).decode())
    return 0
