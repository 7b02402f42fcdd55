"""While the first snapshot loads, the process answers: ``/healthz`` 200 (it lives: a liveness
probe must not restart it), ``/readyz`` and every other path 503 (a load balancer sends nothing
yet). The load is held still with SIGSTOP on the process that loads it (``docsrv-snapshot``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from functools import partial

from conftest import ROOT, free_port
from helpers import alive, children, fresh_get, poll, sealed

#: How many answers of a worker the clients of the handover's test ask for.
ANSWERS_AFTER_THE_HANDOVER = 200


def held_load(tmp_path) -> tuple[subprocess.Popen, int, int]:
    """A server started on a snapshot whose load is held with SIGSTOP: (its process, its port, the
    process loading the snapshot). Not prepared and without an index, the load takes long enough
    for the loader to be stopped before it ends, most times; on a busy machine it may end first,
    and then the server is stopped and started anew until a load is held."""
    snapshot = sealed(tmp_path / "snap", "snap-slow")
    for _attempt in range(5):
        port = free_port()
        process = subprocess.Popen([sys.executable, "-m", "docsrv", "serve", "--snapshot", str(snapshot), "--port", str(port),
                                    "--workers", "1"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            loader = poll(partial(children, process.pid, "docsrv-snapshot"), timeout=30, what="the process loading the snapshot")[0]
            os.kill(loader, signal.SIGSTOP)
            if still_loading(port):
                return process, port, loader
        except BaseException:  # a server the test never gets is stopped here, not left running
            process.terminate()  # the master stops what it started, the stopped loader included
            process.wait(timeout=60)
            raise
        os.kill(loader, signal.SIGCONT)
        process.terminate()
        process.wait(timeout=60)
    raise AssertionError("every load ended before it could be held")


def still_loading(port: int) -> bool:
    """Whether the server on ``port`` says it waits for its snapshot's load (a load that ends as
    the question arrives may reset it: the master hands the socket to its workers)."""
    try:
        status, _headers, body = fresh_get(port, "/readyz")
    except ConnectionResetError:
        return False
    return status == 503 and json.loads(body).get("problem") == "the snapshot is loading"


def test_healthz_answers_while_the_first_snapshot_loads_and_readyz_says_503(tmp_path):
    process, port, loader = held_load(tmp_path)
    try:
        status, headers, body = fresh_get(port, "/healthz")
        assert (status, json.loads(body)) == (200, {"status": "ok"}) and headers["Connection"] == "close"
        status, headers, body = fresh_get(port, "/readyz")
        assert (status, json.loads(body)) == (503, {"status": "starting", "problem": "the snapshot is loading"})
        assert headers["Retry-After"] == "5" and headers["Cache-Control"] == "no-store"
        status, _headers, body = fresh_get(port, "/api/v2/project/")
        assert (status, json.loads(body)) == (503, {"detail": "Not ready: the snapshot is loading."})
        assert children(process.pid) == []  # no worker yet: the master itself answered
        os.kill(loader, signal.SIGCONT)
        poll(lambda: fresh_get(port, "/readyz")[0] == 200, timeout=60, what="ready once loaded")
        assert json.loads(fresh_get(port, "/api/v2/project/?slug=pip")[2])["results"][0]["slug"] == "pip"
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_no_request_is_dropped_or_refused_once_a_worker_answered_when_the_workers_take_over(tmp_path):
    """Clients ask /readyz on new connections, four at a time, while the held load ends and the
    first worker starts: each gets an answer (503, then 200), none a closed connection: the
    master answers what it accepted before the worker served, rather than dropping it. And none
    asked after a worker's first answer gets the master's 503: the master stops accepting before
    it tells the worker to start (``serve.worker.told_to_accept``)."""
    process, port, loader = held_load(tmp_path)
    asked: list[tuple[float, float, int]] = []  # began, ended, status
    failures: list[str] = []
    done = threading.Event()

    def ask() -> None:
        while not done.is_set():
            began = time.monotonic()
            try:
                status = fresh_get(port, "/readyz")[0]
            except OSError as error:
                failures.append(repr(error))
                continue
            asked.append((began, time.monotonic(), status))
            if sum(status == 200 for _began, _ended, status in asked) >= ANSWERS_AFTER_THE_HANDOVER:
                done.set()

    clients = [threading.Thread(target=ask) for _ in range(4)]
    try:
        for client in clients:
            client.start()
        os.kill(loader, signal.SIGCONT)
        poll(done.is_set, timeout=60, what=f"{ANSWERS_AFTER_THE_HANDOVER} answers of a worker to /readyz")
    finally:
        done.set()
        for client in clients:
            client.join()
        process.terminate()
        process.wait(timeout=60)
    assert failures == []
    assert {status for _began, _ended, status in asked} == {503, 200}
    served = min(ended for _began, ended, status in asked if status == 200)
    assert [status for began, _ended, status in asked if began > served and status != 200] == []


def test_a_client_that_sends_nothing_does_not_hold_the_master(tmp_path):
    """A connection that never sends its request is dropped after a short while, and requests on
    other connections are answered meanwhile."""
    process, port, loader = held_load(tmp_path)
    try:
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
        assert fresh_get(port, "/healthz")[0] == 200
        for sock in silent:
            sock.settimeout(30)
            assert sock.recv(1) == b""  # closed by the master, unanswered
            sock.close()
        os.kill(loader, signal.SIGCONT)
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_sigterm_during_the_first_load_stops_at_once(tmp_path):
    """The process loading the snapshot serves no request: a stop does not wait for its load."""
    process, _port, loader = held_load(tmp_path)
    try:
        process.terminate()
        assert process.wait(timeout=10) == 0
        poll(lambda: not alive(loader), what="the loading process gone")
    finally:
        if process.poll() is None:
            process.kill()


async def test_a_ready_worker_accepts_only_once_the_master_says_so():
    """A worker says it is ready, then waits for the master's word before it accepts
    (``serve.worker.told_to_accept``): the master stops accepting first. A master gone meanwhile (its
    end closed) is no word to accept."""
    import asyncio

    from docsrv.serve.worker import ACCEPT, READY, told_to_accept

    for word, accepts in ((ACCEPT, True), (None, False)):
        master, worker = socket.socketpair()
        told = asyncio.ensure_future(told_to_accept(worker.detach()))
        assert await asyncio.get_running_loop().run_in_executor(None, master.recv, 1) == READY
        await asyncio.sleep(0)
        assert not told.done()
        if word is None:
            master.close()
        else:
            master.sendall(word)
            master.close()
        assert await told is accepts


def test_a_worker_gone_between_ready_and_the_masters_word_is_not_counted_ready():
    """A worker that said it is ready and died before the master's word (its end closed): the
    master's answer fails, and the worker is not counted ready (the pool replaces it), rather
    than the master's loop failing on the broken socket. One that stays gets the word."""
    from docsrv.serve.supervisors.workers import Workers
    from docsrv.serve.worker import ACCEPT, READY

    for stays in (False, True):
        master, worker = socket.socketpair()
        workers = Workers(generation=None)  # type: ignore[arg-type]
        workers.started(4242, master.detach(), time.monotonic())
        worker.sendall(READY)
        if not stays:
            worker.close()
        assert workers.answered(4242) is stays
        assert workers.ready == ({4242} if stays else set())
        if stays:
            assert worker.recv(1) == ACCEPT
            worker.close()
