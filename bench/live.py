"""A replica following an origin's changesets, under steady load: what one change costs from the
publisher to a server serving it.

    python bench/live.py [--scale medium] [--sizes 1 10 100 1000] [--rounds 3]

A synthetic snapshot (bench/scratch/, indexed: its index is published with it) is published
whole on an origin directory that Python's http.server serves on loopback, pulled into a
replica, and served there by ``docsrv serve --watch`` (two workers) while wrk asks it for a
project list without a pause. Then, for each size, ``--rounds`` times: that many builds change
state (a new snapshot, made outside the measurement), ``docsrv snapshot publish --since`` writes
the changeset, ``docsrv snapshot pull`` applies it, and the server is polled until /readyz
names the new sequence. Reported per size: the publisher's seconds, the bytes a replica fetched,
the pull's seconds, and the seconds from the publish finishing to the server serving the change
(p50, p99 and max over the rounds); and the failed requests of the whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from docsrv.snapshot.records import Manifest  # noqa: E402
from docsrv.snapshot.write import write_manifest  # noqa: E402
from docsrv.utils.files import clone_or_copy  # noqa: E402
from run import WORK, System, free_port, pinned, snapshot_path  # noqa: E402


def docsrv(*args: str) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "docsrv", *args], capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - started, out


def changed(previous: Path, new: Path, name: str, builds: int, turn: int) -> None:
    """``new``: ``previous`` with ``builds`` builds' states flipped (every other file cloned or
    copied: a hard link would move the change time of ``previous``'s files, and the publisher
    would check it whole again)."""
    import msgspec

    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    for path in previous.glob("*.jsonl*"):
        if not path.name.startswith("builds."):
            clone_or_copy(path, new / path.name)
    lines = (previous / "builds.jsonl").read_bytes().split(b"\n")
    step = max(1, (len(lines) - 1) // builds)
    for number in range(builds):
        at = (number * step + turn) % (len(lines) - 1)
        build = json.loads(lines[at])
        build["state"] = "building" if build.get("state", "finished") == "finished" else "finished"
        lines[at] = json.dumps(build, separators=(",", ":"), ensure_ascii=False).encode()
    (new / "builds.jsonl").write_bytes(b"\n".join(lines))
    manifest = msgspec.json.decode((previous / "manifest.json").read_bytes(), type=Manifest)
    write_manifest(new, msgspec.structs.replace(manifest, name=name, index={}, sequence=0))


def sequence_served(port: int) -> int | None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return json.loads(response.read()).get("sequence")
    except OSError:
        return None


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium", choices=["small", "medium", "large"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = snapshot_path(args.scale, 1)
    if not (base / "index" / "docsrv-index.json").exists():
        docsrv("index", str(base))
    work = WORK / f"live-{args.scale}"
    shutil.rmtree(work, ignore_errors=True)
    origin, into = work / "origin", work / "replica"
    publish_seconds, _ = docsrv("snapshot", "publish", str(base), str(origin))
    port = free_port()
    served = System("origin", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(origin)], port)
    url = f"http://127.0.0.1:{port}"
    server = load = None
    try:
        pull_seconds, _ = docsrv("snapshot", "pull", url, "--into", str(into))
        server_port = free_port()
        server = System("docsrv-live", [sys.executable, "-m", "docsrv", "serve", "--snapshot", str(into / "current"), "--watch",
                                        "--watch-interval", "0.1", "--workers", "2", "--port", str(server_port)], server_port)
        target = f"http://127.0.0.1:{server_port}/api/v2/project/"
        load = subprocess.Popen(pinned(["wrk", "-t1", "-c8", "-d3600s", "--timeout", "10s", target], 0),
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        results: dict = {}
        previous, sequence, turn = base, 1, 0
        for size in args.sizes:
            rows = []
            for _ in range(args.rounds):
                turn += 1
                new = work / f"s{turn}"
                changed(previous, new, f"live-{turn}", size, turn)
                published, out = docsrv("snapshot", "publish", str(new), str(origin), "--since", str(previous))
                finished = time.perf_counter()
                whole = "whole" in out
                sequence += 1
                pulled, out = docsrv("snapshot", "pull", url, "--into", str(into))
                # What the replica fetched: head.json and the changeset (or, published whole, the snapshot).
                changeset = origin / "changesets" / f"{sequence}.jsonl"
                body = float(re.search(r"([\d.]+) MB in", out).group(1)) * 1e6 if whole else changeset.stat().st_size
                fetched = (origin / "head.json").stat().st_size + body
                while sequence_served(server_port) != sequence:
                    time.sleep(0.02)
                rows.append({"publish_s": published, "pull_s": pulled, "lag_s": time.perf_counter() - finished,
                             "fetched_bytes": fetched, "changeset_bytes": None if whole else changeset.stat().st_size,
                             "published_whole": whole})
                if previous != base:
                    shutil.rmtree(previous, ignore_errors=True)
                previous = new
            lags = [row["lag_s"] for row in rows]
            results[size] = {
                "publish_s": round(sum(r["publish_s"] for r in rows) / len(rows), 2),
                "pull_s": round(sum(r["pull_s"] for r in rows) / len(rows), 2),
                "lag_p50_s": round(percentile(lags, 0.5), 2), "lag_p99_s": round(percentile(lags, 0.99), 2),
                "lag_max_s": round(max(lags), 2),
                "fetched_bytes": round(sum(r["fetched_bytes"] for r in rows) / len(rows)),
                "changeset_bytes": [r["changeset_bytes"] for r in rows],
            }
            print(size, results[size], flush=True)
        os.killpg(load.pid, signal.SIGINT)
        summary = load.communicate(timeout=30)[0]
        non_2xx = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", summary))
        sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", summary)
        requests = int(re.search(r"(\d+) requests in", summary).group(1))
        errors = dict(zip(("connect", "read", "write", "timeout"), map(int, sockets.groups()), strict=True)) if sockets else {}
        report = {"date": date.today().isoformat(), "command": " ".join(["python bench/live.py", *sys.argv[1:]]), "scale": args.scale,
                  "base_publish_s": round(publish_seconds, 1), "base_pull_s": round(pull_seconds, 1), "by_changed_builds": results,
                  "requests_under_load": requests, "failed_requests": non_2xx + sum(errors.values()), "non_2xx": non_2xx,
                  "socket_errors": errors}
        print(json.dumps(report, indent=2))
        out_path = HERE / "results" / f"{date.today().isoformat()}-live-{args.scale}.json"
        out_path.write_text(json.dumps(report, indent=2) + "\n")
    finally:
        if load is not None and load.poll() is None:
            os.killpg(load.pid, signal.SIGKILL)
        if server is not None:
            server.stop()
        served.stop()


if __name__ == "__main__":
    main()
