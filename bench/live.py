"""A replica following an origin's changesets under steady load: what one change costs from the
publisher to every worker serving it, what following costs the hot path and memory, and whether
what it serves equals a fresh server's.

    python bench/live.py [--scale medium] [--sizes 1 10 100 1000] [--rounds 50] [--pss-changesets 1000]
                         [--crawl-changesets 20] [--skip publisher hot pss crawl] [--mix] [--pages 0]
                         [--kept-page-ids] [--same-text] [--private-pages 0] [--sidecar-core N] [--tag NAME]

A synthetic snapshot (bench/scratch/, indexed: its index is published with it) is published whole
on an origin directory that Python's http.server serves on loopback, pulled into a replica, and
served there by ``docsrv serve --watch`` (two workers), while ``docsrv snapshot pull --every 0.2``
follows the origin as a sidecar and wrk asks the server for a project list without a pause.

1. The publisher: for each size, one snapshot with that many builds changed (made outside the
   measurement) is published with ``docsrv snapshot publish --since``: its seconds and bytes;
   and ``docsrv snapshot keys`` reads its purge keys back (seconds, the process's start included).
2. The lag: for each size, ``--rounds`` changesets of that many changed builds (with ``--mix``,
   records of every kind a replica applies in memory: ``mixed``; with ``--pages N``, each also
   uploads every page of N versions again, as a build's end does (each page under a new id, the
   one it replaces deleted; with ``--kept-page-ids``, under its own), and with ``--private-pages N``
   makes N versions that hold pages private: the sidecar builds the index of what it makes), one
   a second,
   written by a feed (the service's own publisher would emit them from its database: it writes
   each changeset with docsrv's format code, then ``head.json``, as ``publish`` does). For each,
   the seconds from ``head.json`` being written to each worker serving it, as the worker logs
   it; the lag of a changeset is that of its slowest worker (p50, p99, max). The bytes a
   replica fetched for it: ``head.json`` and the changeset.
3. The hot path: wrk on a cached project detail for ``--hot-seconds``, against docsrv and nginx
   (tuned as its documentation advises, two workers like docsrv, serving the same body as a
   file), with no changeset arriving and with one a second (of one build, and with ``--pages`` and
   ``--private-pages`` those too); each ratio docsrv/nginx, and the
   CPU time docsrv's processes spent per request, and over docsrv's run the changesets served
   and the CPU seconds of the server, the sidecar, the origin and the feed (they share
   the machine's two cores with both servers, on core 1, and wrk, on core 0; with
   ``--sidecar-core 0`` they run on wrk's, off the servers').
4. Memory: ``--pss-changesets`` changesets of 10 builds as fast as the replica applies them
   (the pull folds them into a snapshot every 200, and the server reloads onto it); the PSS of
   the server's processes every 100 changesets.
5. Equivalence, by a crawl: ``--crawl-changesets`` changesets that flip, move (a new date) and
   add builds, add projects and versions, edit them in place, make versions without pages private
   and rename users (and with ``--pages`` and ``--private-pages``, upload pages and make versions
   that hold pages private), applied in memory; then
   the sidecar is stopped, the changesets kept are folded into the snapshot they make (as the
   pull folds them), a fresh server is started on it, and every URL of a crawl
   (``tests/crawl.py``: each kind of URL of the projects whose builds, versions or settings
   changed and of ``--crawl-projects`` more, the changed builds' own, the renamed users') is
   asked of both. A reply
   differs when its status, a header (``Date`` aside) or its body does.

Failed requests are counted in each phase under load (wrk's errors and non-2xx): the publisher's,
the lag's (changesets in memory alone) and the memory's (folds and their reloads included).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "tests")]
import msgspec  # noqa: E402
from crawl import crawl  # noqa: E402

from docsrv.replica.kept import fold_kept  # noqa: E402
from docsrv.replica.publish import read_head, write_head  # noqa: E402
from docsrv.replica.pull import FOLD_CHANGESETS  # noqa: E402
from docsrv.search.index_files import SCHEMA_VERSION  # noqa: E402
from docsrv.snapshot.changeset import FORMAT, FORMAT_VERSION, Header, Product  # noqa: E402
from docsrv.snapshot.load import manifest_of  # noqa: E402
from docsrv.snapshot.origin import CHANGESETS, PublishedChangeset, changeset_path  # noqa: E402
from docsrv.snapshot.records import Manifest  # noqa: E402
from docsrv.snapshot.write import write_manifest  # noqa: E402
from docsrv.utils.files import clone_or_copy, replace_file  # noqa: E402
from run import WORK, System, ensure_tools, free_port, pinned, pss_kb, snapshot_path, tree  # noqa: E402

#: A record's id, first in its line.
RECORD_ID = re.compile(rb'\{"id":(\d+)[,}]')
#: The kind and id of a change line the feed writes.
CHANGED = re.compile(rb'\{"op":"upsert","kind":"(\w+)","record":\{"id":(\d+)[,}]')
PAGE_VERSION = re.compile(rb'"version":(\d+)')
APPLIED = re.compile(r"worker (\d+) applied changeset (\d+): serving \S+, ([\d.]+) s after it was published")
#: The sidecar's line once the replica's ``head.json`` lists what it pulled: when, and the state's name.
PULLED = re.compile(r"^(\S+ \S+) INFO pulled snapshot (\S+) ", re.MULTILINE)


def docsrv(*args: str) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "docsrv", *args], capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - started, out


def indexed_snapshot(scale: str) -> Path:
    """The synthetic snapshot of ``scale`` (``run.snapshot_path``), with a search index of this
    docsrv's schema (built when it has none)."""
    base = snapshot_path(scale, 1)
    marker = base / "index" / "docsrv-index.json"
    if not marker.exists() or json.loads(marker.read_bytes()).get("schema_version") != SCHEMA_VERSION:
        docsrv("index", str(base))
    return base


def changed(previous: Path, new: Path, name: str, builds: int, turn: int) -> None:
    """``new``: ``previous`` with ``builds`` builds' states flipped (every other file cloned or
    copied: a hard link would move the change time of ``previous``'s files, and the publisher
    would check it whole again)."""
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    for path in previous.glob("*.jsonl*"):
        if not path.name.startswith("builds."):
            clone_or_copy(path, new / path.name)
    lines = (previous / "builds.jsonl").read_bytes().split(b"\n")
    step = max(1, (len(lines) - 1) // builds)
    for number in range(builds):
        at = (number * step + turn) % (len(lines) - 1)
        lines[at] = flipped(lines[at])
    (new / "builds.jsonl").write_bytes(b"\n".join(lines))
    manifest = msgspec.json.decode((previous / "manifest.json").read_bytes(), type=Manifest)
    write_manifest(new, msgspec.structs.replace(manifest, name=name, index={}, sequence=0))


def flipped(line: bytes, date: str | None = None) -> bytes:
    """A build's line with its state flipped (and its date set, with ``date``)."""
    build = json.loads(line)
    build["state"] = "building" if build.get("state", "finished") == "finished" else "finished"
    if date is not None:
        build["date"] = date
    return json.dumps(build, separators=(",", ":"), ensure_ascii=False).encode()


def project_edited(line: bytes, mark: str, user: int, now: str) -> bytes:
    """A project's line edited in place, as a maintainer's settings edit it: a new description,
    its first user (if any) replaced by ``user``, and its ``modified_date``."""
    project = json.loads(line)
    project.update(description=f"{project.get('description', '')} {mark}".strip(), modified_date=now)
    if project.get("users"):
        project["users"] = list(dict.fromkeys([user, *project["users"][1:]]))
    return json.dumps(project, separators=(",", ":"), ensure_ascii=False).encode()


def user_renamed(line: bytes, mark: str) -> bytes:
    user = json.loads(line)
    user["username"] = f"{user['username']}-{mark}"
    return json.dumps(user, separators=(",", ":"), ensure_ascii=False).encode()


def edited_in_place(line: bytes, how: int, mark: str) -> bytes:
    """A version's line edited in place (its slug, project and privacy kept): renamed (``how`` 0),
    made active or inactive (1), or given a new identifier (2)."""
    version = json.loads(line)
    if how == 0:
        version["verbose_name"] = f"{version['verbose_name']} {mark}"
    elif how == 1:
        version["active"] = not version.get("active", True)
    else:
        version["identifier"] = hashlib.sha1(mark.encode()).hexdigest()
    return json.dumps(version, separators=(",", ":"), ensure_ascii=False).encode()


def build_id(line: bytes) -> int:
    """The id of a build's line, which begins with it (as ``docsrv`` writes records)."""
    found = RECORD_ID.match(line)
    assert found is not None, line[:80]
    return int(found.group(1))


def renumbered(line: bytes, identity: int, date: str) -> bytes:
    """A new build like the one of ``line``: another id, triggered at ``date``."""
    build = json.loads(line)
    build.update(id=identity, date=date, state="triggered")
    return json.dumps(build, separators=(",", ":"), ensure_ascii=False).encode()


def equivalence(live: System, into: Path, base: Path, feed: Feed, projects: int) -> dict:
    """Fold the changesets kept after ``into/current`` into the snapshot they make, start a fresh
    server on it, and ask both servers every URL of a crawl: the replies that differ."""
    folded = fold_kept(into)
    product = into / (folded.last.product if folded is not None else os.readlink(into / "current"))
    port = free_port()
    fresh = System("docsrv-fresh", [sys.executable, "-m", "docsrv", "serve", "--snapshot", str(product), "--workers", "1",
                                    "--port", str(port)], port)
    try:
        builds = [json.loads(line) for line in (product / "builds.jsonl").read_bytes().splitlines() if line]
        changed = [b for b in builds if b["id"] in feed.changed]
        all_projects = sorted({b["project"] for b in builds})
        kept = {b["project"] for b in changed} | feed.edited_projects
        kept |= set(random.Random(35).sample(all_projects, min(projects, len(all_projects))))
        urls = crawl(base, product, projects_kept=kept, per_project=5, users_kept=frozenset(feed.edited_users))
        urls += [f"/api/{api}/build/{b['id']}/" for b in changed for api in ("v2", "v1")]
        urls = list(dict.fromkeys(urls))
        differing = []
        started = time.perf_counter()
        host = {"Host": "replica.example.org"}  # one host for both: the links of a reply are made from it
        for url in urls:
            ours, theirs = live.get(url, host), fresh.get(url, host)
            for _ in range(50):  # another worker of the live server may apply the last changeset a moment later
                if ours[1].get("X-Snapshot", product.name) == product.name:
                    break
                time.sleep(0.1)
                ours = live.get(url, host)
            if without_date(ours) != without_date(theirs):
                differing.append({"url": url, **first_difference(without_date(ours), without_date(theirs))})
        return {"snapshot": product.name, "urls": len(urls), "projects": len(kept), "changed_builds": len(changed),
                "edited_projects": len(feed.edited_projects), "renamed_users": len(feed.edited_users),
                "crawl_s": round(time.perf_counter() - started, 1),
                "differing": len(differing), "first_differing": differing[:5]}
    finally:
        fresh.stop()
        if folded is not None:
            shutil.rmtree(product, ignore_errors=True)


def first_difference(ours: tuple[int, dict, bytes], theirs: tuple[int, dict, bytes]) -> dict:
    """Where two replies first differ: status, the headers that differ, or the body around the first byte that does."""
    if ours[0] != theirs[0]:
        return {"status": [ours[0], theirs[0]]}
    headers = {name: [ours[1].get(name), theirs[1].get(name)] for name in ours[1].keys() | theirs[1].keys()
               if ours[1].get(name) != theirs[1].get(name) and name != "ETag"}
    at = next((i for i, (a, b) in enumerate(zip(ours[2], theirs[2], strict=False)) if a != b), min(len(ours[2]), len(theirs[2])))
    body = {"at": at, "live": ours[2][max(0, at - 60):at + 60].decode(errors="replace"),
            "fresh": theirs[2][max(0, at - 60):at + 60].decode(errors="replace")} if ours[2] != theirs[2] else {}
    return {"headers": headers, "body": body}


def without_date(reply: tuple[int, dict, bytes]) -> tuple[int, dict, bytes]:
    status, headers, body = reply
    return status, {name: value for name, value in headers.items() if name != "Date"}, body


class Feed:
    """The service's publisher, emitting changesets of builds (and of versions and projects edited in place, and users)
    from what it knows changed: each written with docsrv's format code, then ``head.json`` in one
    rename, as ``publish`` does."""

    def __init__(self, origin: Path, snapshot: Path, kept_page_ids: bool = False, same_text: bool = False) -> None:
        self.origin = origin
        self.snapshot = snapshot
        #: Whether pages uploaded again keep their ids, and their text (``uploaded``).
        self.kept_page_ids = kept_page_ids
        self.same_text = same_text
        #: The id of the next page made (found at the first upload).
        self.next_page_id = 0
        self.manifest = manifest_of(snapshot)
        #: The lines of versions, projects and users, each read at the first edit of one.
        self.others: dict[str, list[bytes]] = {}
        #: The projects whose versions or settings were edited, and the users renamed.
        self.edited_projects: set[int] = set()
        self.edited_users: set[int] = set()
        #: How many projects and versions were created.
        self.made = {"projects": 0, "versions": 0}
        #: The versions that have pages (read at the first made private).
        self.paged: set[int] = set()
        #: The lines of the pages of each version, as uploaded so far (read at the first upload).
        self.page_lines: dict[int, list[bytes]] = {}
        self.lines = [line for line in (snapshot / "builds.jsonl").read_bytes().split(b"\n") if line]
        self.loaded = len(self.lines)
        self.turn = 0
        #: The id of the next build added (found at the first: decoding every build is seconds at large).
        self.next_id = 0
        #: The ids of the builds changed so far.
        self.changed: set[int] = set()

    def publish(self, builds: int, moved: int = 0, added: int = 0, versions: int = 0, projects: int = 0,
                users: int = 0, created: int = 0, hidden: int = 0, pages: int = 0, private_pages: int = 0) -> tuple[int, int, float]:
        """Publish a changeset of ``builds`` builds flipped, of which ``moved`` also get a new date
        (they move to the top of their lists), ``added`` new ones, ``versions`` versions edited
        in place (renamed, made active or inactive, or given a new identifier, in turn),
        ``projects`` projects edited in place (``project_edited``), ``users`` users renamed, and
        ``created`` new projects, each with its first version, as many new versions of existing
        projects (a tag pushed), ``hidden`` versions without pages made private, every page
        of ``pages`` versions uploaded again (``uploaded``), and ``private_pages`` versions that
        hold pages made private: (its sequence, its bytes, when head.json was written)."""
        head = read_head(self.origin)
        assert head is not None
        sequence = head.sequence + 1
        self.turn += 1
        step = max(1, len(self.lines) // builds)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = []
        for number in range(builds + added):
            at = (number * step + self.turn) % len(self.lines)
            if number < builds:
                self.lines[at] = flipped(self.lines[at], now if number < moved else None)
            else:
                self.next_id = self.next_id or max(build_id(line) for line in self.lines) + 1
                self.lines.append(renumbered(self.lines[at], self.next_id, now))
                self.next_id += 1
                at = len(self.lines) - 1
            self.changed.add(build_id(self.lines[at]))
            body.append(b'{"op":"upsert","kind":"builds","record":%s}' % self.lines[at])
        for kind, count in (("versions", versions), ("projects", projects), ("users", users)):
            lines = self.lines_of(kind) if count else []
            for number in range(count):
                at = (number * max(1, len(lines) // count) + self.turn * 7919) % len(lines)
                mark = f"{self.turn}-{number}"
                if kind == "versions":
                    lines[at] = edited_in_place(lines[at], number % 3, mark)
                    self.edited_projects.add(json.loads(lines[at])["project"])
                elif kind == "projects":
                    user = self.lines_of("users")[(at * 31 + self.turn) % len(self.lines_of("users"))]
                    lines[at] = project_edited(lines[at], mark, json.loads(user)["id"], now)
                    self.edited_projects.add(json.loads(lines[at])["id"])
                else:
                    lines[at] = user_renamed(lines[at], mark)
                    self.edited_users.add(json.loads(lines[at])["id"])
                body.append(b'{"op":"upsert","kind":"%s","record":%s}' % (kind.encode(), lines[at]))
        for number in range(created):
            body += self.created(f"{self.turn}-{number}", now)
        body += self.hidden(hidden)
        uploads, removed = self.uploaded(pages, f"{self.turn}")
        body += uploads
        body += self.hidden(private_pages, paged=True)
        # A record changed twice (a version edited, then made private) is sent once, as it is last.
        body = list({CHANGED.match(line).groups(): line for line in body}.values())  # type: ignore[union-attr]
        body += removed
        name = f"feed-{sequence}"
        manifest = self.manifest
        counts = {**manifest.counts, "builds": manifest.counts["builds"] + len(self.lines) - self.loaded,
                  **{kind: manifest.counts[kind] + self.made[kind] for kind in ("projects", "versions")}}
        product = Product(name=name, created_at=datetime.now(UTC), public_url=manifest.public_url, counts=counts,
                          description=manifest.description)
        header = Header(format=FORMAT, format_version=FORMAT_VERSION, sequence=sequence, follows=head.name, product=product,
                        changes=len(body), in_place=not private_pages, unmoved=True)
        data = b"\n".join([msgspec.json.encode(header), *body]) + b"\n"
        (self.origin / CHANGESETS).mkdir(exist_ok=True)
        replace_file(self.origin / changeset_path(sequence), data)
        now = datetime.now(UTC)
        entry = PublishedChangeset(sequence=sequence, follows=head.name, product=name, size=len(data),
                                   sha256=hashlib.sha256(data).hexdigest(), published_at=now)
        write_head(self.origin, msgspec.structs.replace(head, changesets=[*head.changesets, entry], published_at=now))
        return sequence, len(data), time.time()


    def created(self, mark: str, now: str) -> list[bytes]:
        """The change lines of a new project with its first version, and of a new version of an
        existing project (the projects and versions of ``lines_of`` are written in order of id)."""
        projects, versions = self.lines_of("projects"), self.lines_of("versions")
        project_id = json.loads(projects[-1])["id"] + 1
        version_id = json.loads(versions[-1])["id"] + 1
        tagged = json.loads(projects[(project_id * 7919) % (len(projects) - self.made["projects"])])["id"]
        new = [
            ("projects", {"id": project_id, "name": f"Feed {mark}", "slug": f"feed-{mark}", "pub_date": now, "modified_date": now}),
            ("versions", {"id": version_id, "project": project_id, "slug": "latest", "verbose_name": "latest"}),
            ("versions", {"id": version_id + 1, "project": tagged, "slug": f"v{mark}", "verbose_name": f"v{mark}", "type": "tag"}),
        ]
        lines = []
        for kind, record in new:
            line = json.dumps(record, separators=(",", ":")).encode()
            self.lines_of(kind).append(line)
            self.made[kind] += 1
            self.edited_projects.add(record.get("project", record["id"]))
            lines.append(b'{"op":"upsert","kind":"%s","record":%s}' % (kind.encode(), line))
        return lines

    def hidden(self, count: int, paged: bool = False) -> list[bytes]:
        """The change lines of ``count`` public versions without pages (or, ``paged``, with
        pages) made private."""
        if not count:
            return []
        if not self.paged:
            self.paged = {page["version"] for page in map(json.loads, (self.snapshot / "pages.jsonl").read_bytes().splitlines()) if page}
        versions = self.lines_of("versions")
        lines = []
        for at in range((self.turn * 104729) % len(versions), len(versions)):
            version = json.loads(versions[at])
            if (version["id"] in self.paged) is paged and version.get("privacy_level", "public") == "public":
                version["privacy_level"] = "private"
                versions[at] = json.dumps(version, separators=(",", ":"), ensure_ascii=False).encode()
                self.edited_projects.add(version["project"])
                lines.append(b'{"op":"upsert","kind":"versions","record":%s}' % versions[at])
                if len(lines) == count:
                    break
        return lines

    def uploaded(self, count: int, mark: str) -> tuple[list[bytes], list[bytes]]:
        """The change lines of every page of ``count`` versions with pages, uploaded again as the
        service's build's end uploads them: (the upserts, the deletes). Each page is made again
        under a new id, and the page it replaces deleted (the service creates a build's files
        anew and deletes those of the build before: ``_process_files`` and ``collect`` in
        ``readthedocs/projects/tasks/search.py``), its text with a sentence more; with
        ``kept_page_ids``, each keeps its id; with ``same_text``, its text (a build of a commit that
        changed no page). The pages file is read at the first upload."""
        if not count:
            return [], []
        if not self.page_lines:
            for line in (self.snapshot / "pages.jsonl").read_bytes().split(b"\n"):
                if line:
                    self.page_lines.setdefault(int(PAGE_VERSION.search(line)[1]), []).append(line)  # type: ignore[index]
                    self.next_page_id = max(self.next_page_id, int(RECORD_ID.match(line)[1]) + 1)  # type: ignore[index]
        versions = sorted(self.page_lines)
        lines, removed = [], []
        for number in range(count):
            version = versions[(self.turn * 7919 + number * 104729) % len(versions)]
            edited = []
            for line in self.page_lines[version]:
                page = json.loads(line)
                if not self.same_text:
                    page["text"] = f"{page.get('text', '')} Install it again with pip: upload {mark}."
                if not self.kept_page_ids:
                    removed.append(b'{"op":"delete","kind":"pages","id":%d}' % page["id"])
                    page["id"] = self.next_page_id
                    self.next_page_id += 1
                edited.append(json.dumps(page, separators=(",", ":"), ensure_ascii=False).encode())
                self.edited_projects.add(page["project"])
            self.page_lines[version] = edited
            lines += [b'{"op":"upsert","kind":"pages","record":%s}' % line for line in edited]
        return lines, removed

    def lines_of(self, kind: str) -> list[bytes]:
        """The lines of ``kind`` as edited so far (read from the snapshot the first time)."""
        if kind not in self.others:
            self.others[kind] = [line for line in (self.snapshot / f"{kind}.jsonl").read_bytes().split(b"\n") if line]
        return self.others[kind]


def whole_lines(path: Path, offset: int) -> tuple[str, int]:
    """The whole lines a log written by another process holds past ``offset``, and the offset after them."""
    with open(path, "rb") as log:
        log.seek(offset)
        data = log.read()
    whole = data.rfind(b"\n") + 1
    return data[:whole].decode(errors="replace"), offset + whole


class ServerLog:
    """What the workers of the live server logged of the changesets they applied."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        #: Seconds from publish to serving, by sequence, by worker.
        self.lags: dict[int, dict[int, float]] = {}

    def read(self) -> None:
        text, self.offset = whole_lines(self.path, self.offset)
        for worker, sequence, seconds in APPLIED.findall(text):
            self.lags.setdefault(int(sequence), {})[int(worker)] = float(seconds)

    def wait(self, sequence: int, workers: int, published: float, served: Callable[[], int], timeout: float = 120.0) -> float:
        """The seconds from ``sequence``'s publish (at ``published``, wall clock) to its slowest
        worker serving it: as the workers log it, or, when a reload onto a fold's product took
        their place (whose workers apply what they find before serving, without a line each),
        when ``served()`` (the sequence /readyz names) first reaches it."""
        deadline = time.monotonic() + timeout
        seen: float | None = None
        while time.monotonic() < deadline:
            self.read()
            found = self.lags.get(sequence, {})
            if len(found) >= workers:
                return max(found.values())
            if not found and seen is None and served() >= sequence:
                seen = time.time() - published
            if seen is not None and not found and time.time() - published > seen + 5:
                return seen  # served, and no worker says so: new workers caught up at start
            time.sleep(0.01)
        raise TimeoutError(f"changeset {sequence} not applied by {workers} workers within {timeout} s: {self.lags.get(sequence)}")


class Load:
    """wrk asking the server for a project list without a pause, from ``start`` to ``stop``."""

    def __init__(self, port: int) -> None:
        self.process = subprocess.Popen(pinned(["wrk", "-t1", "-c8", "-d3600s", "--timeout", "10s", "--latency",
                                                f"http://127.0.0.1:{port}/api/v2/project/"], 0),
                                        stdout=subprocess.PIPE, text=True, start_new_session=True)

    def stop(self) -> dict:
        """The requests it made, those that failed (non-2xx, and socket errors by kind), and the
        latency of half of them and of 99 in 100 (ms)."""
        os.killpg(self.process.pid, signal.SIGINT)
        summary = self.process.communicate(timeout=30)[0]
        non_2xx = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", summary))
        sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", summary)
        errors = dict(zip(("connect", "read", "write", "timeout"), map(int, sockets.groups()), strict=True)) if sockets else {}
        latency = {f"latency_p{share}_ms": milliseconds(re.search(rf"^\s*{share}%\s+(\S+)$", summary, re.MULTILINE).group(1))
                   for share in (50, 99)}
        return {"requests": int(re.search(r"(\d+) requests in", summary).group(1)), "failed": non_2xx + sum(errors.values()),
                "non_2xx": non_2xx, "socket_errors": errors, **latency}

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)


def milliseconds(shown: str) -> float:
    """A duration as wrk shows it (``812.00us``, ``1.23ms``, ``2.01s``), in milliseconds."""
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", shown).groups()  # type: ignore[union-attr]
    return round(float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit], 3)


def mixed(size: int) -> dict[str, int]:
    """A changeset of about ``size`` records of every kind a replica applies in memory, as the
    service changes them: a tenth versions edited in place and a tenth projects edited, a
    twentieth users renamed, a fiftieth versions without pages made private, a hundredth
    projects created (with a version, and a tag of another project), builds for the rest."""
    others = {"versions": size // 10, "projects": size // 10, "users": size // 20, "hidden": size // 50, "created": size // 100}
    return {"builds": max(1, size - sum(others.values()) - 2 * others["created"]), **others}


def lag_split(published: dict[str, tuple[float, float]], sidecar_log: Path) -> dict[str, float | int]:
    """Where the lag of the changesets ``published`` (by their product's name: when the origin
    listed each, wall clock, and its lag) went: from the publish to the replica's ``head.json``
    listing it (the sidecar: fetching, checking, and building the index of a change of pages),
    and from there to the slowest worker serving it (the workers: finding, reading, applying,
    opening the index), as the sidecar's log times it; the median and 99th percentile of each,
    over the changesets the sidecar pulled one by one (of several pulled together, it names the
    last)."""
    listed = {name: datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # the log writes local time
              for stamp, name in PULLED.findall(sidecar_log.read_text(errors="replace"))}
    sidecar = [listed[name] - written for name, (written, _lag) in published.items() if name in listed]
    workers = [written + lag - listed[name] for name, (written, lag) in published.items() if name in listed]
    if not sidecar:
        return {}
    return {"split_changesets": len(sidecar), "sidecar_p50_s": round(percentile(sidecar, 0.5), 3),
            "sidecar_p99_s": round(percentile(sidecar, 0.99), 3), "workers_p50_s": round(percentile(workers, 0.5), 3),
            "workers_p99_s": round(percentile(workers, 0.99), 3)}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def wrk_rps(port: int, path: str, seconds: int) -> tuple[float, int]:
    out = subprocess.run(pinned(["wrk", "-t1", "-c8", f"-d{seconds}s", "--timeout", "10s", f"http://127.0.0.1:{port}{path}"], 0),
                         capture_output=True, text=True, check=True).stdout
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors += sum(map(int, sockets.groups())) if sockets else 0
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), errors


def cpu_seconds(pids: list[int]) -> float:
    """The CPU time (user and system) the processes ``pids`` have used."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def nginx(root: Path, port: int) -> System:
    prefix = WORK / "nginx-live"
    prefix.mkdir(exist_ok=True)
    (prefix / "tmp").mkdir(exist_ok=True)
    (prefix / "nginx.conf").write_text(
        f"user root;\nworker_processes 2;\ndaemon off;\npid {prefix}/nginx.pid;\nerror_log stderr;\n"
        "events { worker_connections 4096; }\n"
        "http {\n  access_log off;\n  default_type application/json;\n"
        "  open_file_cache max=1000 inactive=60s;\n  open_file_cache_valid 60s;\n  open_file_cache_min_uses 1;\n"
        "  open_file_cache_errors on;\n  sendfile on;\n  tcp_nopush on;\n  tcp_nodelay on;\n  keepalive_requests 100000;\n"
        f"  client_body_temp_path {prefix}/tmp;\n  proxy_temp_path {prefix}/tmp;\n  fastcgi_temp_path {prefix}/tmp;\n"
        f"  uwsgi_temp_path {prefix}/tmp;\n  scgi_temp_path {prefix}/tmp;\n"
        f"  server {{ listen 127.0.0.1:{port}; root {root}; location / {{ try_files $uri =404; }} }}\n}}\n"
    )
    return System("nginx-live", ["nginx", "-p", str(prefix), "-c", str(prefix / "nginx.conf")], port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium", choices=["small", "medium", "large"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=50, help="changesets of each size for the lag")
    parser.add_argument("--hot-seconds", type=int, default=10)
    parser.add_argument("--pss-changesets", type=int, default=1000)
    parser.add_argument("--crawl-changesets", type=int, default=20, help="changesets applied before the equivalence crawl")
    parser.add_argument("--crawl-projects", type=int, default=200, help="projects crawled beside those whose builds changed")
    parser.add_argument("--skip", nargs="*", default=[], choices=["publisher", "hot", "pss", "crawl"], help="phases not to run")
    parser.add_argument("--mix", action="store_true", help="the lag's changesets change records of every kind, not builds alone")
    parser.add_argument("--pages", type=int, default=0, help="versions whose every page each changeset of the lag and the crawl "
                                                             "uploads again")
    parser.add_argument("--kept-page-ids", action="store_true", help="pages uploaded again keep their ids (the service gives "
                                                                      "them new ones)")
    parser.add_argument("--same-text", action="store_true", help="pages uploaded again keep their text (a build of a commit that "
                                                                  "changed no page)")
    parser.add_argument("--private-pages", type=int, default=0, help="versions that hold pages each changeset of the lag and the "
                                                                     "crawl makes private")
    parser.add_argument("--sidecar-core", type=int, default=None, help="a core to run the sidecar, the feeder and the origin on "
                        "(what, in a pod, has CPU of its own or runs elsewhere); the server runs on core 1, wrk on core 0")
    parser.add_argument("--tag", default="", help="added to the results file's name (bench/results/<date>-live-<scale>-<tag>.json), "
                        "so that a run does not write over another of the day")
    args = parser.parse_args()
    ensure_tools()

    def outside(command: list[str]) -> list[str]:
        """``command`` on ``--sidecar-core``, when it is given."""
        return command if args.sidecar_core is None else pinned(command, args.sidecar_core)

    base = indexed_snapshot(args.scale)
    work = WORK / f"live-{args.scale}"
    shutil.rmtree(work, ignore_errors=True)
    origin, into = work / "origin", work / "replica"
    publish_seconds, _ = docsrv("snapshot", "publish", str(base), str(origin))
    port = free_port()
    serving_origin = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(origin)]
    http_origin = System("origin", outside(serving_origin), port)
    url = f"http://127.0.0.1:{port}"
    server = load = sidecar = peer = None
    report: dict = {"date": date.today().isoformat(), "command": " ".join(["python bench/live.py", *sys.argv[1:]]), "scale": args.scale,
                    "tag": args.tag, "base_publish_s": round(publish_seconds, 1)}
    try:
        pull_seconds, _ = docsrv("snapshot", "pull", url, "--into", str(into))
        report["base_pull_s"] = round(pull_seconds, 1)
        server_port = free_port()
        server = System("docsrv-live", [sys.executable, "-m", "docsrv", "serve", "--snapshot", str(into / "current"), "--watch",
                                        "--workers", "2", "--port", str(server_port)], server_port)
        log = ServerLog(WORK / "docsrv-live.log")

        def served() -> int:
            return served_sequence(server)

        with open(work / "sidecar.log", "w") as sidecar_log:
            sidecar = subprocess.Popen(outside([sys.executable, "-m", "docsrv", "snapshot", "pull", url, "--into", str(into), "--every",
                                                "0.2"]),
                                       stdout=subprocess.DEVNULL, stderr=sidecar_log, start_new_session=True)
        # As a sidecar that has run a while: its state loaded (``replica.sidecar.tend_warming``). While it
        # loads (about 30 s at large), its looks wait on the load's long calls: that is a start's.
        wait_for_sidecar(work / "sidecar.log", "ahead of the next change of pages")
        under_load: dict = {}
        load: Load | None = Load(server_port)

        # 1. The publisher, on snapshots.
        publisher: dict = {}
        previous = base
        for turn, size in enumerate([] if "publisher" in args.skip else args.sizes, start=1):
            new = work / f"s{turn}"
            changed(previous, new, f"live-{turn}", size, turn)
            seconds, _ = docsrv("snapshot", "publish", str(new), str(origin), "--since", str(previous))
            head = read_head(origin)
            assert head is not None
            written = (origin / "head.json").stat().st_mtime
            keys_seconds, keys = docsrv("snapshot", "keys", str(origin))
            publisher[size] = {"publish_s": round(seconds, 2), "changeset_bytes": head.changesets[-1].size,
                               "lag_s": round(log.wait(head.sequence, 2, written, served), 3), "purge_keys": len(keys.splitlines()),
                               "purge_keys_s": round(keys_seconds, 3)}
            print("publisher", size, publisher[size], flush=True)
            if previous != base:
                shutil.rmtree(previous, ignore_errors=True)
            previous = new
        if publisher:
            report["publisher"] = publisher
            save(report)
            under_load["publisher"] = load.stop()
            load = Load(server_port)

        # 2. The lag, one changeset a second.
        feed = Feed(origin, previous, args.kept_page_ids, args.same_text)
        by_size: dict = {}
        for size in args.sizes:
            lags, sizes, heads, published = [], [], [], {}
            for _ in range(args.rounds):
                started = time.monotonic()
                kinds = mixed(size) if args.mix else {"builds": size}
                sequence, size_bytes, written = feed.publish(**kinds, pages=args.pages, private_pages=args.private_pages)
                heads.append((origin / "head.json").stat().st_size)
                sizes.append(size_bytes)
                lags.append(log.wait(sequence, 2, written, served))
                published[f"feed-{sequence}"] = (written, lags[-1])
                time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
            by_size[size] = {"changesets": len(lags), "lag_p50_s": round(percentile(lags, 0.5), 3),
                             "lag_p99_s": round(percentile(lags, 0.99), 3), "lag_max_s": round(max(lags), 3),
                             **lag_split(published, work / "sidecar.log"),
                             "changeset_bytes": round(sum(sizes) / len(sizes)), "head_bytes": max(heads),
                             "fetched_bytes_per_changeset": round(sum(sizes) / len(sizes)) + max(heads)}
            print("lag", size, by_size[size], flush=True)
        report["lag_by_changed_records" if args.mix else "lag_by_changed_builds"] = by_size
        save(report)
        under_load["lag"] = load.stop()
        load = None

        # 3. The hot path, against nginx, with and without changesets arriving; once any fold the
        # sidecar began is done and the server has reloaded onto it (neither is the hot path).
        while len(json.loads((into / "head.json").read_bytes())["changesets"]) >= FOLD_CHANGESETS:
            time.sleep(0.5)
        folds = (work / "sidecar.log").read_text().count("folded the changesets kept after")
        while not settled(server, folds):
            time.sleep(0.5)
        hot_path: dict = {"quiet": [], "changesets": []}
        if "hot" not in args.skip:
            hot = "/api/v2/project/1/"
            body = server.get(hot)[2]
            root = work / "nginx-root"
            (root / "hot").mkdir(parents=True, exist_ok=True)
            (root / "hot" / "project.json").write_bytes(body)
            peer = nginx(root, free_port())
            wrk_rps(server_port, hot, 2)  # warm both (nginx's first run was a third faster than every later one)
            wrk_rps(peer.port, "/hot/project.json", 2)
            for condition in ("quiet", "changesets", "quiet", "changesets"):
                feeding = [str(origin), str(previous), "1", str(args.pages), str(args.private_pages), str(int(args.kept_page_ids)),
                           str(int(args.same_text))]
                feeder = subprocess.Popen(outside([sys.executable, __file__, "--feed-only", *feeding]),
                                          start_new_session=True) if condition == "changesets" else None
                try:
                    if feeder is not None:  # its start (reading every build) is not the server's cost
                        wait_for_sequence(server, read_head(origin).sequence + 1)
                    else:  # quiet: once the replica serves what the origin published (the sidecar may be building an index)
                        wait_for_sequence(server, read_head(origin).sequence)
                    parts = {"sidecar": sidecar.pid, "origin": http_origin.process.pid, **({"feed": feeder.pid} if feeder else {})}
                    spent = {name: cpu_seconds(tree(pid)) for name, pid in parts.items()}
                    first = served()
                    used = cpu_seconds(tree(server.process.pid))
                    ours, ours_errors = wrk_rps(server_port, hot, args.hot_seconds)
                    used = cpu_seconds(tree(server.process.pid)) - used
                    applied = served() - first
                    spent = {name: cpu_seconds(tree(pid)) - spent[name] for name, pid in parts.items()}
                    theirs, theirs_errors = wrk_rps(peer.port, "/hot/project.json", args.hot_seconds)
                finally:
                    if feeder is not None:
                        os.killpg(feeder.pid, signal.SIGTERM)
                        feeder.wait()
                hot_path[condition].append({"docsrv_rps": ours, "nginx_rps": theirs, "ratio": round(ours / theirs, 3),
                                            "docsrv_cpu_us_per_request": round(used / (ours * args.hot_seconds) * 1e6, 2),
                                            "changesets_served": applied,
                                            "cpu_seconds": {name: round(cpu, 2) for name, cpu in {"docsrv": used, **spent}.items()},
                                            "errors": ours_errors + theirs_errors})
                print("hot path", condition, hot_path[condition][-1], flush=True)
            report["hot_path"] = {condition: {"runs": runs, "ratio_mean": round(sum(r["ratio"] for r in runs) / len(runs), 3)}
                                  for condition, runs in hot_path.items()}
            save(report)

        # 4. Memory over many changesets.
        if "pss" not in args.skip:
            load = Load(server_port)
            master = server.process.pid
            pss = [{"changesets": 0, "pss_mb": round(pss_kb(tree(master)) / 1024, 1)}]
            for number in range(1, args.pss_changesets + 1):
                sequence, _bytes, _written = feed.publish(10)
                wait_for_sequence(server, sequence)
                if number % 100 == 0:
                    pss.append({"changesets": number, "pss_mb": round(pss_kb(tree(master)) / 1024, 1)})
                    print("pss", pss[-1], flush=True)
                    save({**report, "pss": pss})
            report["pss"] = pss
            under_load["pss"] = load.stop()
            load = None
        # 5. Equivalence, by a crawl.
        if "crawl" not in args.skip:
            for _ in range(args.crawl_changesets):
                sequence, _bytes, _written = feed.publish(100, moved=20, added=5, versions=10, projects=10, users=10, created=2,
                                                          hidden=2, pages=args.pages, private_pages=args.private_pages)
            wait_for_sequence(server, sequence)
            os.killpg(sidecar.pid, signal.SIGTERM)
            sidecar.wait(timeout=300)
            report["crawl"] = equivalence(server, into, base, feed, args.crawl_projects)
            print("crawl", report["crawl"], flush=True)
            save(report)
        hot_errors = sum(run["errors"] for runs in hot_path.values() for run in runs)
        report.update({"under_load": under_load, "hot_path_errors": hot_errors,
                       "failed_requests": sum(phase["failed"] for phase in under_load.values()) + hot_errors})
        print(json.dumps(report, indent=2))
        save(report)
    finally:
        if load is not None:
            load.kill()
        if sidecar is not None and sidecar.poll() is None:
            os.killpg(sidecar.pid, signal.SIGKILL)
        for system in (peer, server):
            if system is not None:
                system.stop()
        http_origin.stop()


def served_sequence(server: System) -> int:
    """The sequence the server's /readyz says it serves (that of the worker which answers)."""
    return int(json.loads(server.get("/readyz")[2]).get("sequence", 0))


def wait_for_sequence(server: System, sequence: int, timeout: float = 300.0) -> None:
    """Until the server's /readyz says it serves ``sequence`` or later (a fold on the way reloads it)."""
    until(lambda: served_sequence(server) >= sequence, timeout, f"changeset {sequence} not served", 0.02)


def wait_for_sidecar(log: Path, said: str, timeout: float = 600.0) -> None:
    """Until the sidecar's log says ``said``."""
    until(lambda: said in log.read_text(), timeout, f"the sidecar did not say {said!r}", 0.2)


def until(done: Callable[[], bool], timeout: float, failure: str, pause: float) -> None:
    """Until ``done()``, looking every ``pause`` seconds; TimeoutError (``failure`` within the
    timeout) past ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{failure} within {timeout} s")
        time.sleep(pause)


def settled(server: System, reloads: int) -> bool:
    """Whether the server has reloaded ``reloads`` times and no old worker is left."""
    status, _headers, body = server.get("/readyz")
    ready = json.loads(body)
    return status == 200 and ready["reloads"] >= reloads and not ready["draining_workers"]


def save(report: dict) -> None:
    """Write what is measured so far (a long run that is stopped keeps it)."""
    tag = f"-{report['tag']}" if report["tag"] else ""
    out_path = HERE / "results" / f"{date.today().isoformat()}-live-{report['scale']}{tag}.json"
    out_path.write_text(json.dumps(report, indent=2) + "\n")


def feed_only(origin: Path, snapshot: Path, builds: int, pages: int, private_pages: int, kept_page_ids: int, same_text: int) -> None:
    """One changeset a second until stopped (a process of its own, beside wrk)."""
    feed = Feed(origin, snapshot, bool(kept_page_ids), bool(same_text))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        started = time.monotonic()
        feed.publish(builds, pages=pages, private_pages=private_pages)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--feed-only"]:
        feed_only(Path(sys.argv[2]), Path(sys.argv[3]), *map(int, sys.argv[4:]))
    else:
        main()
