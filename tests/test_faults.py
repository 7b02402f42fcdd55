"""What operators do to a running replica, each done for real to a real server: files copied over
a serving snapshot, the master killed, workers that cannot start, snapshots published file by
file, a `current` link flipped fast, a second server on the same port, and commands interrupted
or given nothing to import."""

import json
import os
import resource
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import DEMO
from docsrv.serve.supervisors.generation import SPAWN_SECONDS
from helpers import alive, children, docsrv, fresh_get, point, poll, refused, sealed, watched_under_load

#: The demo snapshot's directory, as the master resolves and names it.
DEMO_DIRECTORY = os.path.realpath(DEMO)


def other_commands(directory: Path) -> None:
    """build_commands.jsonl with every build's lines in the reverse order of builds, and each output
    marked: the byte ranges of the old file now hold other builds' commands."""
    path = directory / "build_commands.jsonl"
    groups: dict[int, list[str]] = {}
    for line in path.read_text().splitlines():
        command = json.loads(line)
        command["output"] = command.get("output", "") + " (b)"
        groups.setdefault(command["build"], []).append(json.dumps(command))
    path.write_text("".join(line + "\n" for build in reversed(list(groups)) for line in groups[build]))


def test_a_file_copied_over_a_serving_snapshot_never_answers_another_records_data(tmp_path, start_server):
    served = sealed(tmp_path / "a", "snap-a")
    other = sealed(tmp_path / "b", "snap-a", edit=other_commands)
    server = start_server("--snapshot", str(served), "--workers", "2", "--watch-interval", "0.2")
    ids = [build["id"] for build in server.json("/api/v2/build/?limit=1000")["results"]]
    with_commands = {json.loads(line)["build"] for line in (served / "build_commands.jsonl").read_text().splitlines()}
    shutil.copyfile(other / "build_commands.jsonl", served / "build_commands.jsonl")  # in place, as cp does
    for build in ids:
        response = server.get(f"/api/v2/build/{build}/")
        if build not in with_commands:  # nothing is read for it: its (empty) commands are still right
            assert response.status == 200 and response.json()["commands"] == []
            continue
        assert response.status == 503, (build, response.body[:200])
        assert response.json() == {"detail": "This record's file changed on disk; the snapshot is being reloaded."}
    # Every worker says why; the files do not match the manifest yet, so nothing is reloaded.
    for _ in range(6):
        ready = poll(lambda: (r := server.get("/readyz")).status == 503 and r, what="a degraded /readyz")
        assert ready.json()["status"] == "degraded" and "build_commands.jsonl" in ready.json()["problem"]
    assert not any("reloaded" in line for line in server.log)
    # The rest of the new snapshot arrives: it is reloaded, and answers from it alone.
    start = len(server.log)
    shutil.copyfile(other / "manifest.json", served / "manifest.json")
    server.wait_for("reloaded: serving snapshot snap-a", start=start)
    # Until the old workers have drained, one may still take a new connection (fleet wait's rule).
    poll(lambda: json.loads(fresh_get(server.port, "/readyz")[2])["draining_workers"] == 0, what="the old workers drained")
    for build in ids:
        body = server.json(f"/api/v2/build/{build}/")
        assert all(c["build"] == build and c["output"].endswith(" (b)") for c in body["commands"]), build
    assert poll(lambda: server.get("/readyz").status == 200, what="ready again")


def test_kill_9_of_the_master_ends_its_workers(start_server):
    """Its workers and the process holding its snapshot end with it (each is sent a signal by the
    kernel: SIGTERM to drain, SIGKILL), so the port is freed for the restart."""
    server = start_server("--workers", "2")
    workers = poll(lambda: len(children(server.process.pid)) == 2 and children(server.process.pid), what="two workers")
    (holding,) = children(server.process.pid, "docsrv-snapshot")
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=10)
    poll(lambda: not any(alive(pid) for pid in [*workers, holding]), timeout=5.0, what="workers ending with their master")
    poll(lambda: refused(server.port), timeout=5.0, what="the port freed")


def test_a_worker_that_cannot_start_is_retried_with_backoff_and_the_master_gives_up(start_server):
    server = start_server("--workers", "1", "--no-workers-timeout", "3")
    master = server.process.pid
    killed: list[int] = []

    def kill_every_worker() -> None:  # as an OOM killer or a broken host would
        while server.process.poll() is None:
            for pid in children(master):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)

    killer = threading.Thread(target=kill_every_worker, daemon=True)
    killer.start()
    assert server.process.wait(timeout=60) == 1
    killer.join(timeout=10)
    log = "".join(server.log)
    assert "starting another in 0.5 s" in log and "starting another in 1.0 s" in log
    assert "no worker has been able to serve for 3 s; exiting" in log
    assert len(set(killed)) >= 3
    assert refused(server.port)


def test_watch_takes_a_snapshot_published_file_by_file_once_it_is_complete(tmp_path, start_server):
    served = sealed(tmp_path / "s", "snap-s", "pip (s)")
    new = sealed(tmp_path / "n", "snap-n", "pip (n)", edit=other_commands)
    server = start_server("--snapshot", str(served), "--watch", "--watch-interval", "0.1", "--workers", "1")
    # rsync-style: each file written to a temporary name, then renamed into place; the manifest first.
    names = ["manifest.json", *sorted(p.name for p in new.glob("*.jsonl"))]
    start = len(server.log)
    for name in names:
        shutil.copyfile(new / name, served / f".{name}.tmp")
        os.replace(served / f".{name}.tmp", served / name)
        if name == "manifest.json":
            server.wait_for("waiting for the snapshot", start=start)
    server.wait_for("reloaded: serving snapshot snap-n", start=start)
    # The old worker is told to drain as this is logged: a new connection made before it stops
    # listening may still be its.
    poll(lambda: server.json("/api/v2/project/1/")["name"] == "pip (n)", what="snap-n served to a new connection")
    assert not any("reload failed" in line for line in server.log)
    assert server.json("/readyz")["problem"] is None


def test_flipping_a_current_link_fast_never_mixes_two_snapshots(tmp_path, start_server):
    first = sealed(tmp_path / "a", "snap-a", "pip (a)")
    second = sealed(tmp_path / "b", "snap-b", "pip (b)")
    current = tmp_path / "current"
    server, hammer = watched_under_load(start_server, first, current, "0.05")
    for flip in range(40):  # the fault itself: a link flipped every 0.1 s
        point(current, second if flip % 2 == 0 else first)
        time.sleep(0.1)
    poll(lambda: server.json("/readyz")["snapshot"] == "snap-a" and "reloading" not in server.log[-1],
         what=lambda: "settling on snap-a:\n" + "".join(server.log[-10:]))
    hammer.running = False
    hammer.join(timeout=30)
    assert hammer.failures == [] and hammer.results
    assert {(snapshot, name) for _, _, snapshot, name in hammer.results} <= {("snap-a", "pip (a)"), ("snap-b", "pip (b)")}
    assert all(status == 200 for _, status, _, _ in hammer.results)
    assert not any("reload failed" in line for line in server.log)


def test_a_second_server_on_a_busy_port_exits_1_at_once(start_server):
    server = start_server("--workers", "1")
    result = docsrv("serve", "--snapshot", str(DEMO), "--host", "127.0.0.1", "--port", str(server.port))
    assert result.returncode == 1
    assert f"docsrv: cannot listen on 127.0.0.1:{server.port}: Address already in use" in result.stderr
    assert "loaded" not in result.stderr  # it failed before loading anything
    assert server.get("/healthz").status == 200


def files_of(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_import_sphinx_of_a_folder_with_no_pages_changes_nothing(tmp_path):
    snapshot = sealed(tmp_path / "snap", "snap")
    before = files_of(snapshot)
    empty = tmp_path / "empty"
    (empty / "_static").mkdir(parents=True)
    (empty / "_static" / "style.css").write_text("body {}")
    result = docsrv("snapshot", "import-sphinx", str(empty), "--into", str(snapshot), "--project", "pip", "--version", "latest")
    assert result.returncode == 1
    assert result.stderr.strip() == f"docsrv: {empty}: no HTML pages found (not the output directory of a Sphinx build?); the snapshot is unchanged"
    assert files_of(snapshot) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "snap"]


def test_an_interrupted_index_build_leaves_the_previous_index_current(tmp_path, monkeypatch, start_server):
    import docsrv.search.location
    from docsrv.cli import main

    snapshot = sealed(tmp_path / "snap", "snap")
    assert main(["index", str(snapshot)]) == 0
    before = files_of(snapshot / "index")
    real_build = docsrv.search.location.build_index

    def interrupted(store, directory, print_progress=None):
        real_build(store, directory, print_progress)
        (directory / "half-written").write_text("x")
        raise KeyboardInterrupt  # ^C at the worst moment: the new index is all but done

    monkeypatch.setattr(docsrv.search.location, "build_index", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main(["index", str(snapshot)])
    assert files_of(snapshot / "index") == before
    assert not [p for p in snapshot.iterdir() if p.name.startswith(".index")]
    server = start_server("--snapshot", str(snapshot), "--workers", "1")
    assert not any("built the search index" in line for line in server.log)  # still current: opened as it is


def test_a_write_that_fails_is_one_line_naming_the_path_and_leaves_nothing_behind(tmp_path):
    def small_files() -> None:  # as a full disk would: every write past 64 KB fails
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    out = tmp_path / "snap"
    result = docsrv("snapshot", "synth", "--scale", "demo", "--out", str(out), preexec_fn=small_files)
    assert result.returncode == 1
    assert result.stderr.startswith("docsrv: ") and result.stderr.count("\n") == 1 and "File too large" in result.stderr
    assert str(tmp_path) in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_worker_forked_while_an_index_lock_is_held_does_not_keep_it(tmp_path):
    """tantivy holds a flock on .tantivy-meta.lock while it opens an index (a reload's thread
    opening the next snapshot's). A worker forked meanwhile shares that open file: unless it
    closes its copy, the lock outlives the thread's close and the next open of the index waits
    for ever (the master hung so, under load, while a link was flipped fast)."""
    import fcntl

    from docsrv.search.index_files import META_LOCK
    from docsrv.serve.supervisors.master import close_inherited_meta_locks

    lock = tmp_path / "index" / META_LOCK
    lock.parent.mkdir()
    lock.touch()
    held = os.open(lock, os.O_WRONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # as tantivy's thread holds it
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        try:
            close_inherited_meta_locks()
            os.write(ready_write, b"1")
            time.sleep(30)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_read, 1) == b"1"
        os.close(held)  # the thread lets go
        again = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free, though the worker lives on
        finally:
            os.close(again)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(ready_read)
        os.close(ready_write)


def test_a_failed_start_or_first_pull_leaves_nothing_behind(tmp_path):
    """A server that cannot take its port leaves no run directory; a first pull that fails leaves
    no empty directory where it was to pull into."""
    import socket

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = docsrv("serve", "--port", str(port), env={**os.environ, "TMPDIR": str(temporary)})
    assert result.returncode == 1 and "cannot listen" in result.stderr
    assert list(temporary.iterdir()) == []
    into = tmp_path / "replica"
    pulled = docsrv("snapshot", "pull", "http://127.0.0.1:9/snapshot", "--into", str(into))
    assert pulled.returncode == 1 and pulled.stderr.startswith("docsrv: pull failed: ")
    assert not into.exists()


def test_a_worker_whose_event_loop_stops_is_killed_and_replaced(start_server):
    """A worker that stops running its event loop (here SIGSTOP; a request that held the loop
    would do the same) stops beating: once its heartbeat is older than --worker-timeout, the
    master kills it and starts another, as gunicorn's arbiter does."""
    server = start_server("--workers", "1", "--worker-timeout", "2")
    (stuck,) = poll(lambda: children(server.process.pid), what="the worker")
    os.kill(stuck, signal.SIGSTOP)
    line = server.wait_for(f"worker {stuck} has not run its event loop for", timeout=30)
    assert "(--worker-timeout 2); killing it" in line
    poll(lambda: not alive(stuck), what="the stopped worker gone")
    # A killed worker is a zombie (not alive) until the master reaps it: until then it is still listed.
    (replacement,) = poll(lambda: (found := children(server.process.pid)) and stuck not in found and found, what="a new worker")
    assert replacement != stuck
    poll(lambda: fresh_get(server.port, "/readyz")[0] == 200, what="ready again")
    assert server.json("/api/v2/project/?slug=pip")["results"][0]["slug"] == "pip"


def test_the_master_sweeps_the_links_a_killed_worker_left_and_none_in_use(start_server):
    """A worker killed while it opens a changeset's index leaves a directory of links in the
    memory file system (``search.index_files.open_index``): memory, until something removes it. The master
    sweeps such directories once they are older than any open, and leaves a fresh one alone."""
    from docsrv.search.index_files import LINKS_LEFT_SECONDS, LINKS_PREFIX, links_root

    root = Path(links_root())
    left, fresh = (Path(tempfile.mkdtemp(prefix=f"{LINKS_PREFIX}{name}-", dir=root)) for name in ("left", "fresh"))
    try:
        for directory in (left, fresh):
            (directory / "meta.json").symlink_to(DEMO / "manifest.json")
        long_ago = time.time() - LINKS_LEFT_SECONDS - 60
        os.utime(left, (long_ago, long_ago))
        server = start_server("--workers", "1")
        poll(lambda: fresh_get(server.port, "/readyz")[0] == 200, what="ready")
        poll(lambda: not left.exists(), what="the left-over links swept")
        assert (fresh / "meta.json").is_symlink()
    finally:
        for directory in (left, fresh):
            shutil.rmtree(directory, ignore_errors=True)


def test_a_killed_snapshot_process_is_replaced_and_workers_still_come_back(start_server):
    """The process holding the snapshot is killed (an OOM killer's choice): the workers go on
    serving, the master loads the snapshot anew, and a worker that dies afterwards is replaced."""
    server = start_server("--workers", "1")
    master = server.process.pid
    (holding,) = children(master, "docsrv-snapshot")
    os.kill(holding, signal.SIGKILL)
    server.wait_for(f"the process holding snapshot {DEMO_DIRECTORY} exited (status", timeout=30)
    server.wait_for("reloaded: serving snapshot demo", timeout=60)
    (renewed,) = poll(lambda: children(master, "docsrv-snapshot"), what="a new process holding the snapshot")
    assert renewed != holding
    (worker,) = poll(lambda: len(children(master)) == 1 and children(master), what="the new worker alone, the old one drained")
    os.kill(worker, signal.SIGKILL)
    poll(lambda: children(master) and children(master) != [worker], what="a worker forked by the new process")
    poll(lambda: fresh_get(server.port, "/readyz")[0] == 200, what="ready")


def test_a_snapshot_process_that_does_not_answer_never_holds_the_master(start_server):
    """The process holding the snapshot stops answering (here SIGSTOP; a hung fork would do the
    same) when the master asks it for a worker: after SPAWN_SECONDS the master lets go of it,
    answers /healthz itself meanwhile, stops at once on SIGTERM, and, once that process runs and
    exits, loads the snapshot anew and serves again."""
    server = start_server("--workers", "1")
    master = server.process.pid
    (holding,) = children(master, "docsrv-snapshot")
    (worker,) = children(master)
    os.kill(holding, signal.SIGSTOP)
    try:
        os.kill(worker, signal.SIGKILL)  # the master asks the stopped process for another
        line = server.wait_for(f"generation {holding} did not fork a worker within {SPAWN_SECONDS:g} s", timeout=30)
        assert "cannot fork a worker now" in line
        assert fresh_get(server.port, "/healthz")[0] == 200  # the master answers: no worker serves
    finally:
        os.kill(holding, signal.SIGCONT)  # it finds its socket closed and exits
    poll(lambda: not alive(holding), what="the stopped process gone once it ran")
    # Every /readyz is answered: the stopped process, run again, forks no worker for the request
    # the master gave up on (one would serve unsupervised, and its connections be dropped).
    poll(lambda: fresh_get(server.port, "/readyz")[0] == 200, timeout=60, what="ready again on a new snapshot process")
    assert server.json("/api/v2/project/?slug=pip")["results"][0]["slug"] == "pip"
    assert len(children(master, "docsrv-worker")) == 1
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=30) == 0
