"""Load, slow clients and a soak, against a real docsrv on 127.0.0.1.

    python bench/stress.py connections [--connections 2000] [--duration 30]
    python bench/stress.py slowloris [--slow 500] [--duration 30]
    python bench/stress.py soak [--minutes 10]
    python bench/stress.py reloads [--reloads 10] [--duration 60]

Each prints its figures as JSON and exits non-zero when a request failed or RSS grew.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import WORK, System, Workload, docsrv_url, ensure_tools, free_port, snapshot_path, tree, wrk


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def start_docsrv(snapshot: Path, workers: int) -> System:
    port = free_port()
    return System("docsrv-stress", [sys.executable, "-m", "docsrv", "serve", "--snapshot", str(snapshot), "--port", str(port),
                                    "--workers", str(workers)], port)


def paths_file(snapshot: Path) -> Path:
    workload = Workload.sample(snapshot, 1)
    path = WORK / "paths-stress.txt"
    path.write_text("\n".join(docsrv_url(kind, item) for kind, items in workload.items.items() if kind != "docsearch"
                              for item in items) + "\n")
    return path


def connections(args) -> dict:
    snapshot = snapshot_path(args.scale, 1)
    paths = paths_file(snapshot)
    system = start_docsrv(snapshot, args.workers)
    try:
        wrk(system, paths, 3, 100)
        result = wrk(system, paths, args.duration, args.connections, threads=2)
    finally:
        system.stop()
    return {"connections": args.connections, **result}


def slowloris(args) -> dict:
    """Many clients that send a header a byte a second, beside a normal load."""
    snapshot = snapshot_path(args.scale, 1)
    paths = paths_file(snapshot)
    system = start_docsrv(snapshot, 1)
    closed: list[float] = []
    started = time.monotonic()

    def dribble(sock: socket.socket) -> None:
        try:
            sock.sendall(b"GET /api/v2/project/1/ HTTP/1.1\r\nHost: x\r\n")
            while time.monotonic() - started < args.duration:
                sock.sendall(b"X")
                time.sleep(1)
        except OSError:
            closed.append(time.monotonic() - started)

    try:
        slow = [socket.create_connection(("127.0.0.1", system.port)) for _ in range(args.slow)]
        threads = [threading.Thread(target=dribble, args=(s,), daemon=True) for s in slow]
        for thread in threads:
            thread.start()
        time.sleep(1)
        beside = wrk(system, paths, args.duration - 5, 50)
        for thread in threads:
            thread.join(timeout=args.duration)
    finally:
        system.stop()
    return {"slow_clients": args.slow, "closed_by_server": len(closed),
            "median_seconds_to_close": sorted(closed)[len(closed) // 2] if closed else None, "normal_load": beside}


def soak(args) -> dict:
    """Steady load for minutes; RSS sampled every 10 s must stay flat after warm-up."""
    snapshot = snapshot_path(args.scale, 1)
    paths = paths_file(snapshot)
    system = start_docsrv(snapshot, 1)
    samples, runs = [], []
    try:
        deadline = time.monotonic() + args.minutes * 60
        while time.monotonic() < deadline:
            runs.append(wrk(system, paths, 10, 50))
            samples.append(round(rss_mb(tree(system.process.pid)), 1))
    finally:
        system.stop()
    warm = samples[min(3, len(samples) - 1)]
    growth = (max(samples[3:] or samples) - warm) / warm
    return {"minutes": args.minutes, "requests": int(sum(r["rps"] * 10 for r in runs)), "errors": sum(r["errors"] for r in runs),
            "rps_min": min(r["rps"] for r in runs), "rps_max": max(r["rps"] for r in runs), "rss_mb_samples": samples,
            "rss_growth_after_warmup": round(growth, 4), "flat": growth <= 0.05}


def reloads(args) -> dict:
    """SIGHUP reloads under wrk's keep-alive load: not one request may fail."""
    snapshot = snapshot_path(args.scale, 1)
    paths = paths_file(snapshot)
    system = start_docsrv(snapshot, 2)
    log = WORK / "docsrv-stress.log"
    load: dict = {}
    seconds: list[float] = []
    try:
        wrk(system, paths, 3, 50)
        loader = threading.Thread(target=lambda: load.update(wrk(system, paths, args.duration, 50)))
        loader.start()
        time.sleep(2)
        for _ in range(args.reloads):
            done = log.read_text(errors="replace").count("reloaded: serving")
            asked = time.monotonic()
            os.kill(system.process.pid, signal.SIGHUP)
            while log.read_text(errors="replace").count("reloaded: serving") == done:
                if time.monotonic() - asked > 120:
                    raise RuntimeError("a reload did not finish in 120 s")
                time.sleep(0.05)
            seconds.append(round(time.monotonic() - asked, 2))
            time.sleep(1)
        loader.join()
    finally:
        system.stop()
    return {"reloads": len(seconds), "reload_seconds": seconds, "connections": 50, **load}


def main() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(65536, hard), hard))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("test", choices=["connections", "slowloris", "soak", "reloads"])
    parser.add_argument("--scale", default="small", choices=["demo", "small", "medium"])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slow", type=int, default=500)
    parser.add_argument("--duration", type=int, default=30)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--reloads", type=int, default=10)
    args = parser.parse_args()
    ensure_tools()
    result = {"connections": connections, "slowloris": slowloris, "soak": soak, "reloads": reloads}[args.test](args)
    print(json.dumps(result, indent=2))
    failed = result.get("errors") or (result.get("normal_load") or {}).get("errors") or result.get("flat") is False
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
