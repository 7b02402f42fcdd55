"""A real edge cache in front of docsrv (``make test-edge``): Debian's Varnish with xkey, our VCL.

Varnish is warmed with a crawl of every kind of URL; a changed snapshot is swapped in (projects
edited, added and removed, a version made private, new builds, a build's state changed); once
no worker of the old snapshot remains (``docsrv fleet wait``), what ``docsrv snapshot diff``
prints is purged through Varnish. Then every crawled URL through Varnish must be what docsrv
answers directly, and what was purged is counted against what truly changed.
"""

from __future__ import annotations

import http.client
import json
import os
import signal

import pytest
from crawl import crawl
from snapshot_change import read, realistic_change
from varnish import Varnish, was_hit

from helpers import docsrv, point

pytestmark = pytest.mark.edge


def direct(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.fixture
def served(tmp_path, start_server):
    old, new = tmp_path / "old", tmp_path / "new"
    docsrv("snapshot", "synth", "--scale", "demo", "--out", str(old))
    changes = realistic_change(old, new, "demo-changed")
    link = tmp_path / "current"
    point(link, old)
    # Links name the public URL, the same through Varnish and directly.
    server = start_server("--snapshot", str(link), "--workers", "2", "--public-url", "https://api.example.org")
    varnish = Varnish(server.port)
    yield server, varnish, link, old, new, changes
    varnish.stop()


def test_purging_what_snapshot_diff_prints_leaves_no_stale_reply(served):
    server, varnish, link, old, new, changes = served
    urls = crawl(old, new)
    before = {}
    for url in urls:
        status, _headers, body = varnish.get(url)
        before[url] = (status, body)
    cached = {url for url in urls if was_hit(varnish.get(url)[1])}
    assert len(cached) > 300  # every kind of URL, and errors are not kept

    point(link, new)
    os.kill(server.process.pid, signal.SIGHUP)
    waited = docsrv("fleet", "wait", "--snapshot", "demo-changed", "--timeout", "60", server.base)
    assert waited.returncode == 0, waited.stderr
    ready = json.loads(server.get("/readyz").body)
    assert ready["snapshot"] == "demo-changed" and ready["draining_workers"] == 0

    purged = docsrv("snapshot", "diff", str(old), str(new), "--purge", f"http://127.0.0.1:{varnish.port}/", "--dialect", "varnish-xkey")
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.startswith("purged ")

    stale, refilled, changed = [], set(), set()
    for url in urls:
        status, headers, body = varnish.get(url)
        now = direct(server.port, url)
        if (status, body) != now:
            stale.append(f"{url} (from {headers.get('X-Snapshot')}, Age {headers.get('Age')})")
        if url in cached and not was_hit(headers):
            refilled.add(url)
        if now != before[url]:
            changed.add(url)
    assert stale == [], f"{len(stale)} stale replies, e.g. {stale[:5]}"
    changed_cached = changed & cached
    print(f"\n{len(cached)} replies cached, {len(changed_cached)} of them changed, {len(refilled)} purged")
    assert changed_cached <= refilled
    assert len(refilled) <= 3 * len(changed_cached) + 50, sorted(refilled - changed_cached)[:20]
    # An unchanged project's detail, its versions and its builds stayed cached.
    touched = {name.split("/")[0] for names in changes.values() for name in names if isinstance(name, str)}
    touched |= {b["project"] for b in read(new, "builds") if b["id"] in changes["builds whose state changed"] + changes["new builds"]}
    untouched = next(p for p in read(old, "projects") if p["slug"] not in touched and p["id"] not in touched)
    versions = [v["id"] for v in read(old, "versions") if v["project"] == untouched["id"]]
    builds = [b["id"] for b in read(old, "builds") if b["project"] == untouched["id"]]
    kept = [f"/api/v2/project/{untouched['id']}/", *(f"/api/v2/version/{v}/" for v in versions), *(f"/api/v2/build/{b}/" for b in builds)]
    assert builds and set(kept) <= cached and not set(kept) & refilled


def test_purge_is_refused_from_outside_the_purgers_and_needs_keys(served):
    varnish = served[1]
    status, _headers, _body = varnish.request("PURGE", "/")
    assert status == 400  # no xkey-purge header
    status, _headers, body = varnish.request("PURGE", "/", {"xkey-purge": "no-such-key"})
    assert status == 200 and b"Invalidated 0 objects" in body
