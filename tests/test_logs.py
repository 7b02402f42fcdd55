"""Logs a collector can parse: with `--log-format json` every line of every process (the server,
a pull, the pull sidecar) is one JSON object; in text, one record is one line, a failed reload's
problems included; the sidecar says in a line each time it looks, and when it recovers."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading

from conftest import ROOT
from helpers import Origin, docsrv, make_snapshot, poll, sealed


def parsed(lines: list[str]) -> list[dict]:
    records = [json.loads(line) for line in lines if line.strip()]
    assert all(set(record) >= {"time", "level", "logger", "pid", "message"} for record in records), records
    return records


def test_serve_logs_json_one_object_a_line(start_server):
    server = start_server("--workers", "2", "--log-format", "json")
    records = parsed(server.log)
    serving = [r for r in records if r["message"].startswith("serving snapshot demo on http://")]
    assert len(serving) == 1 and serving[0]["level"] == "info" and serving[0]["logger"] == "docsrv"
    assert serving[0]["time"].endswith("Z") and serving[0]["pid"] == server.process.pid


def test_a_failed_reload_is_one_line_of_text_and_one_object_of_json(tmp_path, start_server):
    for log_format in ("text", "json"):
        snapshot = make_snapshot(tmp_path / log_format, "snap-a", "pip (a)")
        server = start_server("--snapshot", str(snapshot), "--workers", "1", "--log-format", log_format)
        versions = snapshot / "versions.jsonl"
        versions.write_text(versions.read_text().replace('"project":1,', '"project":"one",', 1))
        start = len(server.log)
        os.kill(server.process.pid, signal.SIGHUP)
        line = server.wait_for("reload failed", start=start)
        message = json.loads(line)["message"] if log_format == "json" else line
        assert "has 1 problem(s):" in message and "versions.jsonl:2: Expected `int`, got `str`" in message, message
        if log_format == "text":
            assert line.count("\n") == 1 and " ERROR reload failed; still serving snapshot snap-a: " in line
        else:
            parsed(server.log)


def test_the_sidecar_logs_each_look_and_its_recovery_as_json(tmp_path):
    origin = Origin(tmp_path / "origin")
    into = tmp_path / "replica"
    lines: list[str] = []
    sidecar = subprocess.Popen([sys.executable, "-m", "docsrv", "snapshot", "pull", origin.url, "--into", str(into), "--every", "0.2",
                                "--log-format", "json"], cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    reader = threading.Thread(target=lambda: lines.extend(sidecar.stderr), daemon=True)
    reader.start()
    try:
        messages = lambda: [r["message"] for r in parsed(list(lines))]  # noqa: E731
        poll(lambda: any(m.startswith("pull failed (") for m in messages()), what="a failure: nothing published yet")
        origin.publish(sealed(tmp_path / "a", "snap-a"))
        poll(lambda: any(m.startswith("pulled snapshot snap-a (") for m in messages()), timeout=60, what="the pull")
        poll(lambda: "pulling works again after" in " ".join(messages()), what="the recovery")
        heartbeat = re.compile(r"snapshot snap-a is current; looking again in 0\.[0-2] s")  # 0.2 s after the look began
        poll(lambda: sum(heartbeat.fullmatch(m) is not None for m in messages()) >= 2, what="heartbeats")
        levels = {r["level"] for r in parsed(list(lines))}
        assert levels <= {"info", "error", "warning"}
    finally:
        sidecar.terminate()
        sidecar.wait(timeout=30)
        origin.close()


def test_a_pull_logs_json_and_prints_its_report(tmp_path):
    origin = Origin(tmp_path / "origin")
    try:
        origin.publish(sealed(tmp_path / "a", "snap-a"))
        result = docsrv("snapshot", "pull", origin.url, "--into", str(tmp_path / "replica"), "--log-format", "json")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("pulled snapshot snap-a (")
        parsed(result.stderr.splitlines())
    finally:
        origin.close()
