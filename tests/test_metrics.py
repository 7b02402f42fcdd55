"""/metrics counts every request of every worker by route template; the access log, when asked for, one JSON line a request."""

import json
import re
import shutil
import subprocess
from importlib.metadata import version

import pytest

from helpers import fresh_get, poll


def test_metrics_count_requests_by_route_template_over_all_workers(start_server):
    # A server of its own: the shared one's other workers may still be sharing the counts of an
    # earlier test's requests.
    demo = start_server("--workers", "2")
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
    assert "docsrv_reload_failures_total 0" in text and "# TYPE docsrv_reload_failures_total counter" in text
    assert "# TYPE docsrv_request_duration_seconds histogram" in text


def test_access_log_is_one_json_line_per_request(start_server):
    server = start_server("--access-log", "--workers", "1")
    start = len(server.log)
    server.get("/api/v2/project/1/?from=log-test")
    line = server.wait_for("log-test", timeout=10, start=start)
    record = json.loads(line)
    assert record["path"] == "/api/v2/project/1/?from=log-test" and record["status"] == 200
    assert record["route"] == "/api/v2/project/{id}/" and record["method"] == "GET" and record["snapshot"] == "demo"


def test_no_access_log_by_default(start_server):
    demo = start_server("--workers", "1")
    demo.get("/api/v2/project/2/?from=quiet")
    poll(lambda: "/api/v2/project/{id}/" in demo.get("/metrics").body.decode(), what="the request counted")  # it was handled
    assert not any("from=quiet" in line for line in demo.log)


def test_metrics_pass_promtool_with_process_metrics_and_build_info(start_server):
    """Prometheus's own linter (Debian's prometheus package, installed by `make test` when
    missing) finds nothing to say; the standard process metrics, the server's memory by kind of
    process and a build-info gauge are there."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (make test installs Debian's prometheus package)")
    server = start_server("--workers", "2")
    server.get("/api/v2/project/1/")
    text = poll(lambda: (body := server.get("/metrics").body.decode()) and "/api/v2/project/{id}/" in body and body,
                what="the request counted")
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == "", checked.stdout + checked.stderr
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "process_max_fds",
                 "process_start_time_seconds", "process_virtual_memory_bytes"):
        assert re.search(rf"^{name} \d", text, re.MULTILINE), name
    assert f'docsrv_build_info{{version="{version("docsrv")}",snapshot_format="1",python="' in text
    kinds = set(re.findall(r'^docsrv_memory_pss_bytes\{process="(\w+)"\} \d+', text, re.MULTILINE))
    assert kinds == {"master", "snapshot", "worker"}
