"""Attacks on one docsrv worker, as a replica on the open internet meets them, with figures before
and during each:

    python bench/attacks.py flood [--seconds 60] [--cache-mb 64]   unique-URL flood beside hot traffic
    python bench/attacks.py heavy [--seconds 20]                    cold 1,000-item brotli lists beside a cached detail
    python bench/attacks.py descriptors [--idle 1500]               ulimit -n 1024 and more idle connections than that
    python bench/attacks.py abandoned [--searches 3000]             searches sent and abandoned at once
    python bench/attacks.py big-changeset [--seconds 20]            a changeset of the largest size applied beside a cached detail
    python bench/attacks.py all

The small synthetic snapshot; docsrv pinned to one core, the attackers on the other. Each prints
its figures as JSON and whether the issue's target was met; the exit status is 1 when one was not.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import HERE, WORK, System, ensure_tools, free_port, pinned, snapshot_path, tree, wrk


def serve(snapshot: Path, *extra: str, limit_files: int | None = None) -> System:
    port = free_port()
    command = [sys.executable, "-m", "docsrv", "serve", "--snapshot", str(snapshot), "--port", str(port), "--workers", "1", *extra]
    if limit_files is not None:
        command = ["prlimit", f"--nofile={limit_files}:{limit_files}", "--", *command]
    return System("docsrv-attack", command, port)


def worker_of(system: System) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = tree(system.process.pid)
        python = [p for p in pids if "docsrv" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
        if len(python) >= 2:
            return python[-1]
        time.sleep(0.1)
    raise RuntimeError("no worker")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics(system: System) -> str:
    return system.get("/metrics")[2].decode()


def counter(text: str, name: str, labels: str = "") -> float:
    found = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def paths_file(name: str, paths: list[str]) -> Path:
    WORK.mkdir(exist_ok=True)
    path = WORK / f"paths-{name}.txt"
    path.write_text("\n".join(paths) + "\n")
    return path


HOT_ROUTES = ('{route="/api/v2/version/{id}/"}', '{route="/api/v2/version/"}')


def hot_paths(system: System) -> list[str]:
    versions = json.loads(system.get("/api/v2/version/?limit=50")[2])["results"]
    projects = json.loads(system.get("/api/v2/project/?limit=25")[2])["results"]
    # Version details, and filtered lists written as clients write them (not in canonical order).
    return [f"/api/v2/version/{v['id']}/" for v in versions] + [
        f"/api/v2/version/?project__slug={p['slug']}&active=true" for p in projects
    ]


def flood(args) -> dict:
    """A unique-URL flood (7 KB of junk each) beside hot traffic; RSS, hot hits and throughput."""
    snapshot = snapshot_path("small", 1)
    system = serve(snapshot, "--response-cache-mb", str(args.cache_mb))
    try:
        worker = worker_of(system)
        hot = paths_file("hot", hot_paths(system))
        wrk(system, hot, 3, 20)
        before = wrk(system, hot, 10, 20)
        rss_before = rss_mb(worker)
        text = metrics(system)
        hits0 = sum(counter(text, "docsrv_reply_cache_hits_total", r) for r in HOT_ROUTES)
        misses0 = sum(counter(text, "docsrv_reply_cache_misses_total", r) for r in HOT_ROUTES)
        attacker = subprocess.Popen(
            pinned(["wrk", "-t1", "-c50", f"-d{args.seconds}s", "-s", str(HERE / "wrk-flood.lua"), f"http://127.0.0.1:{system.port}"], 0),
            env={**os.environ, "BENCH_FLOOD_PATH": "/api/v2/project/1/?x=", "BENCH_FLOOD_PAD": "7000"},
            stdout=subprocess.PIPE, text=True,
        )
        samples: list[float] = []
        beside: dict = {}
        hot_thread = threading.Thread(target=lambda: beside.update(wrk(system, hot, args.seconds - 4, 10)))
        time.sleep(1)
        hot_thread.start()
        while attacker.poll() is None:
            samples.append(rss_mb(worker))
            time.sleep(1)
        hot_thread.join()
        flood_out = attacker.stdout.read() if attacker.stdout else ""
        text = metrics(system)
        hits = sum(counter(text, "docsrv_reply_cache_hits_total", r) for r in HOT_ROUTES) - hits0
        misses = sum(counter(text, "docsrv_reply_cache_misses_total", r) for r in HOT_ROUTES) - misses0
        after = wrk(system, hot, 10, 20)
        cache_bytes = counter(text, "docsrv_reply_cache_bytes")
        evictions = counter(text, "docsrv_reply_cache_evictions_total")
    finally:
        system.stop()
    flood_rps = float(re.search(r"Requests/sec:\s+([\d.]+)", flood_out).group(1))
    bound = (rss_before + args.cache_mb) * 1.10
    hit_share = hits / max(1, hits + misses)
    result = {
        "cache_mb": args.cache_mb, "flood_seconds": args.seconds, "flood_rps": flood_rps,
        "rss_mb_before": round(rss_before, 1), "rss_mb_peak_during": round(max(samples), 1), "rss_mb_bound": round(bound, 1),
        "cache_bytes_after": cache_bytes, "evictions": evictions,
        "hot_before": before, "hot_during": beside, "hot_after": after,
        "hot_hit_share_during": round(hit_share, 4),
        "hot_after_vs_before": round(after["rps"] / before["rps"], 3),
    }
    result["targets_met"] = bool(max(samples) <= bound and hit_share >= 0.95 and after["rps"] >= 0.9 * before["rps"])
    return result


def heavy(args) -> dict:
    """Four clients of cold 1,000-item build lists with brotli, beside a cached project detail."""
    snapshot = snapshot_path("small", 1)
    system = serve(snapshot, "--response-cache-mb", str(args.cache_mb))
    stop = threading.Event()
    served = [0]

    def heavy_client(start: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", system.port, timeout=60)
        offset = start
        while not stop.is_set():
            connection.request("GET", f"/api/v2/build/?limit=1000&offset={offset}", headers={"Accept-Encoding": "br"})
            response = connection.getresponse()
            response.read()
            assert response.status == 200
            served[0] += 1
            offset += 4  # never the same page twice: every one is rendered and compressed anew

    try:
        projects = json.loads(system.get("/api/v2/project/?limit=100")[2])["results"]
        detail = paths_file("detail", [f"/api/v2/project/{p['id']}/" for p in projects])
        wrk(system, detail, 3, 10)
        alone = wrk(system, detail, 10, 10)
        clients = [threading.Thread(target=heavy_client, args=(n,), daemon=True) for n in range(4)]
        started = time.monotonic()
        for client in clients:
            client.start()
        time.sleep(1)
        during = wrk(system, detail, args.seconds, 10)
        stop.set()
        for client in clients:
            client.join(timeout=60)
        heavy_rate = served[0] / (time.monotonic() - started)
    finally:
        system.stop()
    return {"detail_alone": alone, "detail_beside_heavy": during, "heavy_pages_per_second": round(heavy_rate, 1),
            "targets_met": bool(during["p99_ms"] is not None and during["p99_ms"] < 10 and during["errors"] == 0)}


def descriptors(args) -> dict:
    """More idle connections than descriptors: log lines, CPU, and how soon a new client is served."""
    snapshot = snapshot_path("small", 1)
    system = serve(snapshot, limit_files=1024)
    log = WORK / "docsrv-attack.log"
    held: list[socket.socket] = []
    try:
        worker = worker_of(system)
        for _ in range(args.idle):
            held.append(socket.create_connection(("127.0.0.1", system.port), timeout=10))
        time.sleep(1)  # the worker has taken all it can
        lines_before = log.read_text(errors="replace").count("cannot accept")
        cpu_before = cpu_seconds(worker)
        time.sleep(10)
        cpu = (cpu_seconds(worker) - cpu_before) / 10
        lines = log.read_text(errors="replace").count("cannot accept") - lines_before
        for sock in held[:10]:
            sock.close()
        held = held[10:]
        freed = time.monotonic()
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", system.port, timeout=5)
                connection.request("GET", "/healthz")
                if connection.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.01)
        served_after = time.monotonic() - freed
    finally:
        for sock in held:
            sock.close()
        system.stop()
    return {"idle_connections": args.idle, "nofile": 1024, "log_lines_in_10_s": lines, "worker_cpu_share": round(cpu, 4),
            "new_client_served_after_s": round(served_after, 3),
            "targets_met": bool(lines < 20 and cpu < 0.10 and served_after <= 1.0)}


def abandoned(args) -> dict:
    """Thousands of distinct searches sent and abandoned at once; then how long one search takes."""
    snapshot = snapshot_path("small", 1)
    system = serve(snapshot)
    try:
        project = json.loads(system.get("/api/v2/project/?limit=1")[2])["results"][0]
        version = json.loads(system.get(f"/api/v2/version/?project__slug={project['slug']}&limit=1")[2])["results"][0]["slug"]
        search = f"/api/v2/docsearch/?project={project['slug']}&version={version}&q="
        assert system.get(search + "warm")[0] == 200
        started = time.monotonic()
        for n in range(args.searches):
            with socket.create_connection(("127.0.0.1", system.port), timeout=10) as sock:
                sock.sendall(f"GET {search}word{n}+guide HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        sent = time.monotonic() - started
        asked = time.monotonic()
        status = system.get(search + "installation")[0]
        next_search = time.monotonic() - asked
        time.sleep(1.5)
        text = metrics(system)
    finally:
        system.stop()
    outcomes = {o: counter(text, "docsrv_searches_total", f'{{outcome="{o}"}}') for o in ("run", "refused", "dropped")}
    return {"abandoned": args.searches, "sent_in_s": round(sent, 3), "next_search_status": status,
            "next_search_s": round(next_search, 3), "searches": outcomes,
            "targets_met": bool(status == 200 and outcomes["run"] < args.searches)}


def loop_held(replica: Path) -> dict:
    """The longest the event loop waited, in milliseconds, while a worker's own code applied the
    changesets ``replica`` keeps to its state, in this process: read, checked and applied in the
    heavy-work thread (``serve.following.step``), then swapped in on the loop
    (``ApiState.following``), then 0.3 s of the allocations requests make, with the collections
    they bring; and for 0.3 s before, idle. A ticker waking every half millisecond measures it:
    wrk's largest latency also counts its own waits on a machine of two cores."""
    import asyncio
    import gc

    from docsrv.api.state import ApiState
    from docsrv.config import Settings
    from docsrv.http.offload import offload
    from docsrv.observe.runtime import Runtime
    from docsrv.serve.following import step
    from docsrv.serve.served import load_served
    from docsrv.utils.held_calls import GIL_SWITCH_SECONDS

    sys.setswitchinterval(GIL_SWITCH_SECONDS)  # as a worker's
    served = load_served(replica / "current", progress=False)
    state = ApiState(served.store, served.search, Settings(), Runtime())
    gc.collect()
    gc.freeze()  # as a generation leaves the state it forks its workers with
    phase = ["idle"]
    held = {"idle": 0.0, "apply": 0.0}

    async def ticker() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.0005)
            now = time.perf_counter()
            held[phase[0]] = max(held[phase[0]], (now - last) * 1000)
            last = now

    async def measured() -> int:
        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.3)
        phase[0] = "apply"
        done = await offload(step, replica, state.store, state.search)
        state.following(done.store, done.touched, done.search)
        alive: list[list[dict]] = []
        for _ in range(300):
            alive = [*alive[-20:], [{} for _ in range(50)]]
            await asyncio.sleep(0.001)
        ticking.cancel()
        return len(done.entries)

    applied_here = asyncio.run(measured())
    return {"changesets_applied": applied_here, "idle_ms": round(held["idle"], 2), "apply_ms": round(held["apply"], 2)}


def big_changeset(args) -> dict:
    """A changeset as large as a publisher writes (``origin.MAX_CHANGESET_BYTES``: builds flipped),
    applied by a following worker (``serve --watch``, the sidecar pulling every 0.2 s from
    Python's http.server on loopback) while wrk asks it for cached details: their latency with no
    changeset, and from one second before the changeset is published until ``--seconds`` later.
    Then the longest the event loop is held while the same changeset is applied (``loop_held``)."""
    from live import Feed, docsrv, indexed_snapshot, served_sequence, until

    from docsrv.snapshot.origin import MAX_CHANGESET_BYTES

    snapshot = indexed_snapshot("small")
    work = WORK / "attack-big-changeset"
    shutil.rmtree(work, ignore_errors=True)
    origin, into = work / "origin", work / "replica"
    docsrv("snapshot", "publish", str(snapshot), str(origin))
    port = free_port()
    http_origin = System("origin", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(origin)],
                         port)
    system = sidecar = None
    try:
        url = f"http://127.0.0.1:{port}"
        docsrv("snapshot", "pull", url, "--into", str(into))
        system = serve(into / "current", "--watch")
        sidecar = subprocess.Popen(pinned([sys.executable, "-m", "docsrv", "snapshot", "pull", url, "--into", str(into), "--every", "0.2"],
                                          0), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        feed = Feed(origin, snapshot)
        line = sum(map(len, feed.lines)) / len(feed.lines) + len(b'{"op":"upsert","kind":"builds","record":}\n')
        builds = min(len(feed.lines), int(0.95 * MAX_CHANGESET_BYTES / line))
        projects = json.loads(system.get("/api/v2/project/?limit=100")[2])["results"]
        detail = paths_file("detail", [f"/api/v2/project/{p['id']}/" for p in projects])
        wrk(system, detail, 3, 10)
        alone = wrk(system, detail, args.seconds, 10)
        published: dict = {}

        def publish() -> None:
            time.sleep(1)
            published["sequence"], published["bytes"], _written = feed.publish(builds)
            published["at"] = time.monotonic()

        publisher = threading.Thread(target=publish)
        publisher.start()
        during = wrk(system, detail, args.seconds, 10)
        publisher.join()
        until(lambda: served_sequence(system) >= published["sequence"], 120, "the changeset was not applied", 0.1)
        applied = re.findall(r"applied changeset \d+: serving \S+, ([\d.]+) s after it was published",
                             (WORK / "docsrv-attack.log").read_text())
    finally:
        if sidecar is not None:
            os.killpg(sidecar.pid, signal.SIGKILL)
            sidecar.wait()
        if system is not None:
            system.stop()
        http_origin.stop()
    held = loop_held(into)
    return {"changeset_bytes": published["bytes"], "builds_changed": builds, "applied_s_after_publish": float(applied[-1]),
            "detail_alone": alone, "detail_beside_apply": during, "loop_held": held,
            "targets_met": bool(during["p99_ms"] is not None and during["p99_ms"] < 10 and during["errors"] == 0
                                and held["changesets_applied"] == 1 and held["apply_ms"] < 10)}


def main() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(65536, hard), hard))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("attack", choices=["flood", "heavy", "descriptors", "abandoned", "big-changeset", "all"])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--cache-mb", type=int, default=64)
    parser.add_argument("--idle", type=int, default=1500)
    parser.add_argument("--searches", type=int, default=3000)
    args = parser.parse_args()
    ensure_tools()
    attacks = {"flood": flood, "heavy": heavy, "descriptors": descriptors, "abandoned": abandoned, "big-changeset": big_changeset}
    chosen = list(attacks) if args.attack == "all" else [args.attack]
    results = {name: attacks[name](args) for name in chosen}
    print(json.dumps(results, indent=2))
    sys.exit(0 if all(r["targets_met"] for r in results.values()) else 1)


if __name__ == "__main__":
    main()
