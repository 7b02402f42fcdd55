"""Workers and reloads: one port, a reload under load swaps cleanly, a broken snapshot on reload leaves the old one serving, SIGTERM drains."""

import http.client
import json
import os
import signal
import time

import pytest

from helpers import BROKEN, alive, children, docsrv, fresh_get, make_snapshot, point, poll, watched_under_load


def test_reload_under_load_swaps_cleanly(tmp_path, start_server):
    first = make_snapshot(tmp_path / "a", "snap-a", "pip (a)")
    second = make_snapshot(tmp_path / "b", "snap-b", "pip (b)")
    current = tmp_path / "current"
    server, hammer = watched_under_load(start_server, first, current, "0.2")
    poll(lambda: len(hammer.results) > 20, what="requests before the swap")
    point(current, second)  # the atomic swap of a `current` link
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


def test_reloads_leave_one_process_holding_a_snapshot(tmp_path, start_server):
    """Each snapshot is held by a process of its own; a replaced one exits, so that its memory
    goes with its last draining worker (memory across reloads: bench/reloads.py)."""
    snapshot = make_snapshot(tmp_path / "a", "snap-a", "pip (a)")
    server = start_server("--snapshot", str(snapshot), "--workers", "2")
    master = server.process.pid
    first = children(master, "docsrv-snapshot")
    assert len(first) == 1
    for reload in (1, 2, 3):
        os.kill(master, signal.SIGHUP)
        poll(lambda number=reload: server.json("/readyz")["reloads"] == number, what=f"reload {reload}")
    holding = poll(lambda: len(children(master, "docsrv-snapshot")) == 1 and children(master, "docsrv-snapshot"),
                   what="one process holding a snapshot")
    assert holding != first and not alive(first[0])
    poll(lambda: len(children(master)) == 2, what="two workers and no other")


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
    assert "docsrv_reload_failures_total 1" in server.get("/metrics").body.decode()


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


def test_while_a_reload_loads_the_master_replaces_a_dead_worker_and_stops_on_sigterm(tmp_path, start_server):
    """The master loads a new snapshot in a thread and goes on supervising (issues 24 and 25): here
    the load never ends (its manifest is a FIFO no one writes), yet a killed worker is
    replaced and serves, and SIGTERM stops the server."""
    first = make_snapshot(tmp_path / "a", "snap-a", "pip (a)")
    blocked = make_snapshot(tmp_path / "b", "snap-b", "pip (b)")
    (blocked / "manifest.json").unlink()
    os.mkfifo(blocked / "manifest.json")
    current = tmp_path / "current"
    point(current, first)
    server = start_server("--snapshot", str(current), "--workers", "2")
    point(current, blocked)
    server.process.send_signal(signal.SIGHUP)
    server.wait_for("reloading (SIGHUP)")
    workers = poll(lambda: len(children(server.process.pid)) == 2 and children(server.process.pid), what="two workers")
    os.kill(workers[0], signal.SIGKILL)
    server.wait_for(f"worker {workers[0]} exited unexpectedly")
    replaced = poll(lambda: server.json("/readyz")["workers"] == 2 and set(children(server.process.pid)) - set(workers),
                    what="a worker started in place of the killed one")
    assert len(replaced) == 1
    for _ in range(20):  # fresh connections reach both workers: all serve the old snapshot
        status, headers, _body = fresh_get(server.port, "/api/v2/project/1/")
        assert (status, headers["X-Snapshot"]) == (200, "snap-a")
    assert not any("reloaded" in line or "reload failed" in line for line in server.log), "".join(server.log)  # still loading
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=60) == 0
    server.wait_for("stopping: workers finish the requests in flight")


def test_readyz_counts_old_workers_draining_and_fleet_wait_waits_for_none(tmp_path, start_server):
    """After a swap an old worker may still answer a kept-alive connection from the old snapshot:
    /readyz counts such workers, and ``docsrv fleet wait`` returns once every replica serves the
    new snapshot with none left (issue 26: purge only then)."""
    first = make_snapshot(tmp_path / "a", "snap-a", "pip (a)")
    second = make_snapshot(tmp_path / "b", "snap-b", "pip (b)")
    current = tmp_path / "current"
    point(current, first)
    server = start_server("--snapshot", str(current), "--workers", "1")
    kept = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    kept.request("GET", "/api/v2/project/1/")
    assert kept.getresponse().read()
    behind = docsrv("fleet", "wait", "--snapshot", "snap-b", "--timeout", "0.5", server.base)
    assert behind.returncode == 1
    assert behind.stderr == f"docsrv: after 0.5 s, 1 of 1 replica(s) do not serve snapshot snap-b alone: {server.base}: serves snapshot snap-a\n"
    point(current, second)
    server.process.send_signal(signal.SIGHUP)
    # A new worker answers as soon as it is ready; the swap that stops the old one (and counts it
    # as draining) comes when every new worker is: its reload count says it has come.
    ready = poll(lambda: (body := json.loads(fresh_get(server.port, "/readyz")[2]))["snapshot"] == "snap-b" and body["reloads"] == 1
                 and body, what="the new snapshot served, the old worker told to stop")
    assert ready["draining_workers"] == 1  # the old worker keeps the connection above open a while

    def on_the_kept_connection():
        kept.request("GET", "/api/v2/project/1/")
        answer = kept.getresponse()
        answer.read()
        assert answer.getheader("X-Snapshot") == "snap-a"  # the old worker, still: one snapshot a connection
        return answer

    # The old worker answers on with its snapshot, and once its SIGTERM is handled, says it closes.
    answer = poll(lambda: (found := on_the_kept_connection()).getheader("Connection") == "close" and found,
                  what="the draining worker closing the kept connection")
    assert answer.getheader("X-Snapshot") == "snap-a" and answer.getheader("Connection") == "close"
    kept.close()
    waited = docsrv("fleet", "wait", "--snapshot", "snap-b", "--timeout", "30", server.base)
    assert waited.returncode == 0 and waited.stdout == "all 1 replica(s) serve snapshot snap-b, none draining an earlier one\n"
    assert json.loads(fresh_get(server.port, "/readyz")[2])["draining_workers"] == 0


async def test_a_connection_accepted_just_before_a_worker_drains_is_answered():
    """A worker told to stop just after it accepted a connection, before the loop made its
    protocol (a turn or more later), answers the request that comes on it (``Connection: close``)
    and only then closes it: a reload drops no request of a client that had just connected."""
    import asyncio
    import socket

    from conftest import DEMO
    from docsrv.api.state import ApiState
    from docsrv.config import Settings
    from docsrv.observe.runtime import Runtime
    from docsrv.serve.served import load_served
    from docsrv.serve.worker import listening_socket, start

    served = load_served(DEMO, progress=False)
    sock = listening_socket("127.0.0.1", 0)
    listening = await start(ApiState(served.store, served.search, Settings(), Runtime()), sock, accepting=False)
    client = socket.create_connection(sock.getsockname(), timeout=30)
    try:
        listening.acceptor._accept_pending()  # accepted as the listening socket became readable
        closing = asyncio.ensure_future(listening.close())
        client.sendall(b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")

        def whole_reply() -> bytes:
            reply = b""
            while chunk := client.recv(65536):
                reply += chunk
            return reply

        reply = await asyncio.get_running_loop().run_in_executor(None, whole_reply)
        await closing
    finally:
        client.close()
        sock.close()
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"\r\nConnection: close" in head, head
    assert json.loads(body)["id"] == 1
