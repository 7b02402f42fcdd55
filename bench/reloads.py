"""Memory across reloads: PSS of the whole server (master, the process holding the snapshot,
and its workers) fresh, after 1, 10 and 50 reloads (SIGHUP, each waited for until no old worker
is left), and its peak during the reloads, sampled every 0.1 s; and how soon /healthz answers
after the port opens, during the first load.

    python bench/reloads.py [--scale medium] [--reloads 50] [--source DIR]

``--source`` runs the docsrv of another checkout (e.g. a ``git worktree`` of an older commit),
for a before and after in one session. The snapshot (bench/scratch/, synthesised when missing)
is indexed and prepared first. Results: bench/results/<date>-reloads-<scale>.md, .json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import free_port, snapshot_path, tree  # noqa: E402


def pss_mb(pid: int) -> float:
    total = 0
    for each in tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{each}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return round(total / 1024, 1)


def readyz(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return json.loads(response.read()) if response.status == 200 else None
    except OSError:
        return None


def first_healthz_ms(port: int, process: subprocess.Popen) -> float | None:
    """Milliseconds from the port accepting connections to /healthz answering 200."""
    while process.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        time.sleep(0.001)
    opened = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=60) as response:
            return round((time.perf_counter() - opened) * 1000, 1) if response.status == 200 else None
    except OSError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium", choices=["demo", "small", "medium", "large"])
    parser.add_argument("--reloads", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--source", type=Path, default=None, help="a checkout whose docsrv to run (default: this one)")
    parser.add_argument("--out", default=None, help="results path without suffix")
    args = parser.parse_args()
    snapshot = snapshot_path(args.scale, 1)
    env = dict(os.environ)
    if args.source is not None:
        env["PYTHONPATH"] = str(args.source.resolve())
    subprocess.run([sys.executable, "-m", "docsrv", "index", str(snapshot)], check=True, capture_output=True, env=env)
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "docsrv", "serve", "--snapshot", str(snapshot), "--port", str(port),
                                "--workers", str(args.workers)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    peak = [0.0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            peak[0] = max(peak[0], pss_mb(process.pid))
            time.sleep(0.1)

    try:
        healthz_ms = first_healthz_ms(port, process)
        while not ((ready := readyz(port)) and ready["workers"] == args.workers):
            time.sleep(0.05)
        time.sleep(1.0)
        fresh = pss_mb(process.pid)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        after: dict[int, float] = {}
        seconds: list[float] = []
        for number in range(1, args.reloads + 1):
            started = time.perf_counter()
            os.kill(process.pid, signal.SIGHUP)
            while True:
                ready = readyz(port)
                if ready and ready["reloads"] >= number and ready["draining_workers"] == 0 and ready["workers"] == args.workers:
                    break
                if process.poll() is not None:
                    raise SystemExit(f"docsrv exited with {process.returncode}")
                time.sleep(0.05)
            seconds.append(time.perf_counter() - started)
            if number in (1, 10, 50) or number == args.reloads:
                time.sleep(1.0)
                after[number] = pss_mb(process.pid)
                print(f"after {number} reload(s): {after[number]} MB (fresh {fresh} MB)", file=sys.stderr)
        sampling.set()
        sampler.join()
    finally:
        process.terminate()
        process.wait(timeout=120)
    last = max(after)
    result = {"scale": args.scale, "workers": args.workers, "source": str(args.source or "this checkout"), "fresh_pss_mb": fresh,
              "pss_mb_after": after, "peak_pss_mb": peak[0], "ratio_after_last": round(after[last] / fresh, 2),
              "ratio_peak": round(peak[0] / fresh, 2), "reload_seconds_median": round(sorted(seconds)[len(seconds) // 2], 2),
              "first_healthz_ms": healthz_ms}
    out = Path(args.out) if args.out else HERE / "results" / f"{date.today().isoformat()}-reloads-{args.scale}"
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    rows = " | ".join(f"{after[n]}" for n in sorted(after))
    lines = [f"# Memory across reloads, {args.scale}, {args.workers} workers, {date.today().isoformat()} ({result['source']})", "",
             "PSS of the server's whole process tree (MB); reloads by SIGHUP, each waited for until no old worker is left.", "",
             "| fresh | " + " | ".join(f"after {n}" for n in sorted(after)) + " | peak during reloads | last / fresh | peak / fresh "
             "| reload (median s) | /healthz after the port opens (ms) |",
             "|---" * (len(after) + 6) + "|",
             f"| {fresh} | {rows} | {peak[0]} | {result['ratio_after_last']} | {result['ratio_peak']} "
             f"| {result['reload_seconds_median']} | {healthz_ms} |"]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
