"""What a replica behind caches needs: compression, purge keys, metrics, access log, workers,
reload while serving, a corrupt snapshot on reload, and a graceful stop."""

import gzip
import http.client
import json
import os
import signal
import time

import brotli
import pytest

from helpers import BROKEN, Hammer, children, fresh_get, make_snapshot, poll


@pytest.mark.parametrize(("accept", "coding"), [
    ("gzip", "gzip"), ("br", "br"), ("gzip, br", "br"), ("br;q=0.5, gzip;q=0.9", "gzip"), ("br;q=0, gzip", "gzip"),
    ("*", "br"), ("identity", None), ("gzip;q=0", None), ("", None), ("x-gzip", "gzip"), ("GZIP;Q=1", "gzip"),
])
def test_compression_follows_accept_encoding_and_decodes_to_the_same_json(demo, accept, coding):
    plain = demo.get("/api/v2/build/?limit=5")
    assert len(plain.body) > 1024
    response = demo.get("/api/v2/build/?limit=5", headers={"Accept-Encoding": accept} if accept else {})
    assert response.status == 200
    assert response.headers.get("Content-Encoding") == coding
    assert response.headers["Vary"] == "Accept-Encoding"
    body = {"gzip": gzip.decompress, "br": brotli.decompress, None: lambda b: b}[coding](response.body)
    assert body == plain.body
    if coding:
        assert response.headers["ETag"] == plain.headers["ETag"][:-1] + f'-{coding}"'
        assert len(response.body) < len(plain.body)


def test_small_bodies_are_not_compressed(demo):
    response = demo.get("/api/v1/user/1/", headers={"Accept-Encoding": "gzip, br"})
    assert "Content-Encoding" not in response.headers and len(response.body) < 1024


def test_a_compressed_variant_revalidates_with_its_own_tag(demo):
    first = demo.get("/api/v2/build/?limit=5", headers={"Accept-Encoding": "br"})
    again = demo.get("/api/v2/build/?limit=5", headers={"Accept-Encoding": "br", "If-None-Match": first.headers["ETag"]})
    assert again.status == 304 and again.headers["ETag"] == first.headers["ETag"]


def test_purge_keys_name_every_project_version_and_build_shown(demo, public):
    builds = demo.get("/api/v2/build/?project__slug=pip&limit=3")
    keys = builds.headers["Surrogate-Key"].split()
    expected = {"v2", "project-pip"}
    for build in builds.json()["results"]:
        expected |= {f"version-pip-{build['version_slug']}", f"build-{build['id']}"}
    assert set(keys) == expected and len(keys) == len(set(keys))
    # A version embeds its project; a v1 file list names the versions of its pages.
    version = demo.get("/api/v2/version/14/")
    assert version.headers["Surrogate-Key"] == "v2 project-requests version-requests-v2.31.0"
    files = demo.get("/api/v1/file/?limit=2").headers["Cache-Tag"].split(",")
    assert files[0] == "v1" and "project-pip" in files and "version-pip-latest" in files
    search = demo.get("/api/v2/docsearch/?project=pip&version=latest&q=cache").headers["Surrogate-Key"].split()
    assert search[:2] == ["search", "v2"] and "project-pip" in search


def test_metrics_count_requests_by_route_template_over_all_workers(demo):
    before = demo.get("/metrics").body.decode()
    for build in (101, 102, 103, 104, 105, 106):
        assert fresh_get(demo.port, f"/api/v2/build/{build}/")[0] == 200
    assert demo.get("/metrics").headers["Content-Type"].startswith("text/plain")

    def count(body):
        line = next((row for row in body.splitlines() if row.startswith('docsrv_requests_total{route="/api/v2/build/{id}/",status="200"}')), None)
        return int(line.split()[-1]) if line else 0

    # Every worker shares its counts once a second: poll until all six are counted.
    text = poll(lambda: (body := demo.get("/metrics").body.decode()) and count(body) - count(before) >= 6 and body,
                what="six requests counted")
    assert count(text) - count(before) == 6
    assert 'docsrv_request_duration_seconds_bucket{route="/api/v2/build/{id}/",le="+Inf"}' in text
    assert 'docsrv_snapshot_info{snapshot="demo"} 1' in text
    assert "docsrv_reload_failures_total{} 0" in text
    assert "# TYPE docsrv_request_duration_seconds histogram" in text


def test_access_log_is_one_json_line_per_request(start_server):
    server = start_server("--access-log", "--workers", "1")
    start = len(server.log)
    server.get("/api/v2/project/1/?from=log-test")
    line = server.wait_for("log-test", timeout=10, start=start)
    record = json.loads(line)
    assert record["path"] == "/api/v2/project/1/?from=log-test" and record["status"] == 200
    assert record["route"] == "/api/v2/project/{id}/" and record["method"] == "GET" and record["snapshot"] == "demo"


def test_no_access_log_by_default(demo):
    demo.get("/api/v2/project/2/?from=quiet")
    poll(lambda: "/api/v2/project/{id}/" in demo.get("/metrics").body.decode(), what="the request counted")  # it was handled
    assert not any("from=quiet" in line for line in demo.log)


def test_reload_under_load_swaps_cleanly(tmp_path, start_server):
    first = make_snapshot(tmp_path / "a", "snap-a", "pip (a)")
    second = make_snapshot(tmp_path / "b", "snap-b", "pip (b)")
    current = tmp_path / "current"
    current.symlink_to(first)
    server = start_server("--snapshot", str(current), "--watch", "--watch-interval", "0.2", "--workers", "2")
    hammer = Hammer(server.port)
    hammer.start()
    poll(lambda: len(hammer.results) > 20, what="requests before the swap")
    swap = tmp_path / "current.new"
    swap.symlink_to(second)
    os.replace(swap, current)  # the atomic swap of a `current` link
    server.wait_for("reloaded: serving snapshot snap-b", timeout=60)
    old_workers_gone = poll(lambda: len(children(server.process.pid)) == 2 and time.monotonic(), what="the old workers gone")
    cut = old_workers_gone
    poll(lambda: sum(when > cut for when, *_ in hammer.results) > 20, what="requests after the swap")
    hammer.running = False
    hammer.join(timeout=30)

    assert hammer.failures == []
    assert all(status == 200 for _, status, _, _ in hammer.results)
    agreeing = {("snap-a", "pip (a)"), ("snap-b", "pip (b)")}
    assert all((snapshot, name) in agreeing for _, _, snapshot, name in hammer.results)
    seen = [snapshot for _, _, snapshot, _ in hammer.results]
    assert seen[0] == "snap-a" and seen[-1] == "snap-b"
    assert {snapshot for when, _, snapshot, _ in hammer.results if when > cut} == {"snap-b"}
    assert server.json("/readyz")["reloads"] == 1


def test_a_corrupt_snapshot_on_reload_leaves_the_old_one_serving(tmp_path, start_server):
    snapshot = make_snapshot(tmp_path / "a", "snap-a", "pip (a)")
    server = start_server("--snapshot", str(snapshot), "--workers", "1")
    master = server.process.pid
    versions = snapshot / "versions.jsonl"
    versions.write_text(versions.read_text().replace('"project":1,', '"project":"one",', 1))
    os.kill(master, signal.SIGHUP)
    server.wait_for("reload failed; still serving snapshot snap-a", timeout=60)
    ready = server.json("/readyz")
    assert ready["snapshot"] == "snap-a" and ready["reload_failures"] == 1
    assert "versions.jsonl:2: Expected `int`, got `str` - at `$.project`" in ready["last_reload_error"]
    assert "holds 0 records" not in ready["last_reload_error"]
    assert str(tmp_path) not in ready["last_reload_error"] and ready["last_reload_error"].startswith("snapshot a has 1 problem(s)")
    assert server.json("/api/v2/project/1/")["name"] == "pip (a)"
    assert "docsrv_reload_failures_total{} 1" in server.get("/metrics").body.decode()


@pytest.mark.parametrize("case", ["truncated file", "duplicate slug", "wrong format version", "missing file", "missing project"])
def test_each_kind_of_broken_snapshot_on_reload_leaves_the_old_one_serving(tmp_path, start_server, case):
    snapshot = make_snapshot(tmp_path / "a", "snap-a", "pip (a)")
    server = start_server("--snapshot", str(snapshot), "--workers", "1")
    spoil, message = BROKEN[case]
    spoil(snapshot)
    os.kill(server.process.pid, signal.SIGHUP)
    server.wait_for("reload failed; still serving snapshot snap-a", timeout=60)
    ready = server.json("/readyz")
    assert ready["snapshot"] == "snap-a" and ready["reload_failures"] == 1
    assert message in ready["last_reload_error"]
    assert server.json("/api/v2/project/1/")["name"] == "pip (a)"


def worker_pids(port, tries=40):
    return {json.loads(fresh_get(port, "/readyz")[2])["worker"] for _ in range(tries)}


def test_two_workers_share_one_port_and_one_snapshot_and_all_reload_on_sighup(tmp_path, start_server):
    snapshot = make_snapshot(tmp_path / "a", "snap-a", "pip (a)")
    server = start_server("--snapshot", str(snapshot), "--workers", "2")
    assert len(server.log) and sum("serving snapshot snap-a" in line for line in server.log) == 1
    before = worker_pids(server.port)
    assert len(before) == 2
    assert {json.loads(fresh_get(server.port, "/readyz")[2])["snapshot"] for _ in range(10)} == {"snap-a"}
    manifest = json.loads((snapshot / "manifest.json").read_text())
    manifest["name"] = "snap-a2"
    (snapshot / "manifest.json").write_text(json.dumps(manifest))
    os.kill(server.process.pid, signal.SIGHUP)
    server.wait_for("reloaded: serving snapshot snap-a2", timeout=60)
    poll(lambda: not (set(children(server.process.pid)) & before), what="the old workers gone")
    after = worker_pids(server.port)
    assert len(after) == 2 and not (after & before)
    assert {json.loads(fresh_get(server.port, "/readyz")[2])["snapshot"] for _ in range(10)} == {"snap-a2"}


def test_sigterm_drains_and_exits_zero(start_server):
    server = start_server("--workers", "2")
    keep_alive = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    keep_alive.request("GET", "/api/v2/project/1/")
    assert keep_alive.getresponse().read()
    assert server.stop() == 0
    assert any("stopping: workers finish the requests in flight" in line for line in server.log)
    keep_alive.close()


def test_purge_keys_of_long_lists_stay_under_the_header_limit():
    from docsrv.http.purge import MAX_BYTES, purge_keys

    few = ["v2", "project-a", "version-a-1", "build-7"]
    assert purge_keys(few + few) == few
    many_versions = ["v2"] + [k for n in range(600) for k in (f"project-p{n % 5}", f"version-p{n % 5}-{n}.0.0")]
    coarse = purge_keys(many_versions)
    assert coarse == ["v2", "project-p0", "project-p1", "project-p2", "project-p3", "project-p4"]
    many_projects = ["v2"] + [k for n in range(1000) for k in (f"project-some-long-project-name-{n}", f"version-x-{n}")]
    assert purge_keys(many_projects) == ["v2"]
    assert all(sum(len(k) + 1 for k in purge_keys(keys)) <= MAX_BYTES for keys in (few, many_versions, many_projects))


def test_a_long_list_answers_with_a_header_a_cache_takes(demo):
    response = demo.get("/api/v2/build/?limit=1000")
    assert len(response.headers["Surrogate-Key"]) <= 8000
    assert "project-pip" in response.headers["Surrogate-Key"].split()
