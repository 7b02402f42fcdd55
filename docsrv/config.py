"""Every setting of ``docsrv serve``, declared once, and the Settings a serving process runs with.

Each Option names its command-line flag (``--max-age``), its environment variable
(``DOCSRV_MAX_AGE``: what a container or a systemd unit sets), its type, its default and its
help text. The argument parser, ``--help``, the README's table of settings (``python -m
docsrv.config`` rewrites it; a test checks it is current) and the Settings are all made from
this table. A flag given on the command line wins over the environment, which wins over the
default.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec


@dataclass(frozen=True)
class Deadlines:
    """How long an origin may take when ``docsrv snapshot pull`` fetches from it: the manifest has
    a deadline of its own; a file may take as long as it needs while at least ``min_kib`` KiB of it
    arrive in every ``window`` seconds (an origin that drips a byte now and then is given up on,
    not waited for for ever). The defaults of ``--manifest-timeout``, ``--min-kib`` and
    ``--rate-window``."""

    manifest_seconds: float = 30.0
    min_kib: int = 32
    window: float = 30.0
    connect_seconds: float = 30.0


class Settings(msgspec.Struct, frozen=True):
    """What a serving process needs to answer requests (the rest concerns the master)."""

    #: Base of the absolute ``next``/``previous`` links of v2 lists, e.g. ``https://api.example.org``.
    #: Unset: each request's own scheme and Host.
    public_url: str | None = None
    #: ``Cache-Control`` of every 200: max-age, stale-while-revalidate and stale-if-error, in seconds.
    max_age: int = 300
    stale_while_revalidate: int = 60
    stale_if_error: int = 86400
    #: How many bytes of encoded responses each worker keeps ready to send.
    response_cache_bytes: int = 256 << 20
    #: Searches that may wait for the search thread in each worker; more get 503.
    search_queue: int = 64
    #: Host headers answered when ``public_url`` is unset (see ``http/hosts.py``).
    allowed_hosts: tuple[str, ...] = ("localhost", "127.0.0.1", "[::1]")
    #: Answer cached GETs and HEADs in the fast lane (``http/fast_lane.py``) before aiohttp.
    fast_path: bool = True
    #: Seconds an idle keep-alive connection is kept open (aiohttp's timer and the fast lane's).
    keepalive_timeout: float = 15.0

    @property
    def cache_control(self) -> str:
        return (
            f"public, max-age={self.max_age}, stale-while-revalidate={self.stale_while_revalidate}, "
            f"stale-if-error={self.stale_if_error}"
        )


DEFAULTS = Settings()
ENV_PREFIX = "DOCSRV_"
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class Option:
    name: str
    #: ``str``, ``int``, ``float``, ``Path``, ``bool`` (a flag) or ``list`` (repeatable; comma-separated in the environment).
    kind: type
    default: object
    help: str
    #: How the default reads in the documentation, when it is not a plain value.
    shown_default: str | None = None
    #: The values it may take, when they are few.
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    def from_env(self, environ: dict[str, str]) -> object:
        """The value the environment sets, or the default (an empty value sets nothing, as a
        variable left empty in a manifest means); a malformed value is an error that names the variable."""
        text = environ.get(self.env)
        if text is None or not text.strip():
            return self.default
        try:
            if self.kind is bool:
                lowered = text.strip().lower()
                if lowered not in TRUE + FALSE:
                    raise ValueError("not a true or false value")
                return lowered in TRUE
            if self.kind is list:
                return [item.strip() for item in text.split(",") if item.strip()]
            if self.choices is not None and text not in self.choices:
                raise ValueError(f"not one of {', '.join(self.choices)}")
            return self.kind(text)
        except ValueError as error:
            raise SystemExit(f"docsrv: {self.env}={text!r}: {error}") from None

    def documented_default(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        if self.kind is bool:
            return "off"
        return f"`{self.default}`"


#: Every command takes it.
LOG_FORMAT = Option("log_format", str, "text", "how log lines are written: `text`, or `json` (one object a line, as the access log)",
                    choices=("text", "json"))

SERVE_OPTIONS: tuple[Option, ...] = (
    Option("snapshot", Path, None, "the snapshot directory to serve (a `current` symlink is read once per load)", "the bundled demo"),
    Option("host", str, "127.0.0.1", "address to listen on"),
    Option("port", int, 8000, "port to listen on"),
    Option("workers", int, None, "worker processes, all accepting on the one port", "the number of cores"),
    Option("public_url", str, None, "base of the absolute `next`/`previous` links of v2 lists; Host is then never used",
           "the request's own scheme and Host"),
    Option("allowed_host", list, None, "a Host header answered when `--public-url` is unset (repeatable; a name, `.domain` for it "
           "and its subdomains, or `*`); any other gets `400 Invalid Host header.` (`/healthz`, `/readyz`, `/metrics` answer any)",
           "the listening address, `localhost`, `127.0.0.1`, `[::1]`"),
    Option("max_age", int, DEFAULTS.max_age, "`Cache-Control: max-age` of every 200, in seconds"),
    Option("stale_while_revalidate", int, DEFAULTS.stale_while_revalidate, "`stale-while-revalidate` of every 200, in seconds"),
    Option("stale_if_error", int, DEFAULTS.stale_if_error, "`stale-if-error` of every 200, in seconds"),
    Option("response_cache_mb", int, DEFAULTS.response_cache_bytes >> 20, "encoded replies each worker keeps ready to send, in MiB: "
           "every byte counted (keys, headers, compressed variants, bookkeeping); S3-FIFO keeps what is asked for again"),
    Option("keepalive_timeout", float, DEFAULTS.keepalive_timeout, "seconds an idle keep-alive connection is kept open; behind a "
           "load balancer that reuses its connections, set it above the balancer's own idle timeout, so that the balancer, not "
           "docsrv, closes an idle one (a connection closed as the balancer reuses it costs a `502`)"),
    Option("search_queue", int, DEFAULTS.search_queue, "searches that may wait for a worker's search thread; more are refused with "
           "`503` and `Retry-After: 1`, and a search whose client has gone is dropped before it runs"),
    Option("watch", bool, False, "reload when a new snapshot appears at `--snapshot` (a `current` symlink swapped, or new files), "
           "once it is complete (every file at the size its manifest records); and, on a pull's `current`, apply in memory the "
           "changesets the pull keeps beside it"),
    Option("watch_interval", float, 2.0, "seconds between looks at the snapshot's files: for a new snapshot (with `--watch`) and, "
           "always, for files of the snapshot being served changed on disk (which is then reloaded)"),
    Option("worker_timeout", float, 30.0, "a worker whose event loop has not run for this many seconds (a request that holds it, "
           "a process stopped) is killed and replaced; the master reads a heartbeat each worker's loop writes every second"),
    Option("no_workers_timeout", float, 60.0, "when no worker has been able to serve for this many seconds, close the port and exit 1 "
           "(so that systemd or Kubernetes restarts the server)"),
    Option("access_log", bool, False, "one JSON line per request on standard output"),
    LOG_FORMAT,
    Option("no_fast_path", bool, False, "answer every request through aiohttp, cached replies too (the fast lane answers those "
           "from prebuilt bytes: turn it off to rule it out)"),
)


def add_options(parser: argparse.ArgumentParser, options: Sequence[Option], environ: dict[str, str] | None = None) -> None:
    """One argument per option, its default taken from the environment where it is set."""
    environ = dict(os.environ) if environ is None else environ
    for option in options:
        default = option.from_env(environ)
        shown = option.documented_default().replace("`", "")
        text = f"{option.help.replace('`', '')} (env {option.env}; default: {shown})".replace("%", "%%")
        if option.kind is bool:
            parser.add_argument(option.flag, action="store_true", default=default, help=text)
        elif option.kind is list:
            parser.add_argument(option.flag, action="append", default=None, metavar=option.name.split("_")[-1].upper(), help=text)
            parser.set_defaults(**{option.name + "_from_env": default})
        else:
            parser.add_argument(option.flag, type=option.kind, default=default, choices=option.choices, help=text)


def listed(args: argparse.Namespace, name: str) -> list[str] | None:
    """A repeatable option's values: the flags given, else the environment's, else None."""
    given: list[str] | None = getattr(args, name)
    return given if given is not None else getattr(args, name + "_from_env")


TABLE_START = "<!-- serve settings: generated by `python -m docsrv.config` -->"
TABLE_END = "<!-- end of serve settings -->"


def settings_table(options: Sequence[Option] = SERVE_OPTIONS) -> str:
    rows = ["| option | environment | default | meaning |", "|---|---|---|---|"]
    rows += [f"| `{o.flag}` | `{o.env}` | {o.documented_default()} | {o.help} |" for o in options]
    return "\n".join(rows)


def with_table(readme: str, table: str) -> str:
    pattern = re.compile(re.escape(TABLE_START) + ".*?" + re.escape(TABLE_END), re.DOTALL)
    return pattern.sub(lambda _: f"{TABLE_START}\n{table}\n{TABLE_END}", readme)


def main(argv: list[str] | None = None, readme: Path = Path("README.md")) -> int:
    """Rewrite the README's table of serve settings from SERVE_OPTIONS."""
    text = readme.read_text()
    readme.write_text(with_table(text, settings_table()))
    print(f"wrote the table of {len(SERVE_OPTIONS)} settings into {readme}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
