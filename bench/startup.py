"""Time to ready and memory of `docsrv serve --workers 2`, by scale: on a snapshot not prepared
(checked whole), the time `docsrv snapshot prepare` takes, then on the prepared snapshot (a
record of the check trusted: docsrv/snapshot/verified.py), writable and bind-mounted read-only
(as root); the time from a pull to ready; and Datasette's start on the same data exported to
SQLite.

    python bench/startup.py [--scales small medium large] [--datasette] [--pull]

Each snapshot is synthesised under bench/scratch/ and indexed first (`docsrv index`), so the
start measures loading, not index building; the page cache is warm (each start follows a
read of the files). Ready is the first 200 of /readyz naming both workers; PSS is summed over the
master and its children (the process holding the snapshot, the workers) from
/proc/<pid>/smaps_rollup once ready; the peak is the VmHWM of the process that loaded the
snapshot (docsrv-snapshot). With --pull, the snapshot (with its index, sealed by `docsrv index`)
is pulled from Python's http.server on loopback into a fresh directory and served from there:
the time from the pull's start to ready, and its ratio to the floor (the same files fetched
with curl one after another, then hashed with sha256sum). With --datasette, `datasette serve --immutable` (the
peers' virtual environment of bench/run.py) on the SQLite export, until its first 200.
Results: bench/results/<date>-startup.md, .json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import PEERS_VENV, ensure_peers, free_port, snapshot_path, sqlite_path  # noqa: E402


def pss_mb(pid: int) -> float:
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    total = 0
    for each in pids:
        for line in Path(f"/proc/{each}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
    return round(total / 1024, 1)


def peak_mb(pid: int) -> float:
    """The peak resident memory of the process that loaded the snapshot (``docsrv-snapshot``, a
    child of the master), or of ``pid`` itself where there is none."""
    loader = pid
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            if Path(f"/proc/{child}/comm").read_text().strip() == "docsrv-snapshot":
                loader = int(child)
    for line in Path(f"/proc/{loader}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def start(snapshot: Path, started: float | None = None) -> dict:
    port = free_port()
    started = time.perf_counter() if started is None else started
    process = subprocess.Popen([sys.executable, "-m", "docsrv", "serve", "--snapshot", str(snapshot), "--port", str(port),
                                "--workers", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
                    if response.status == 200:
                        ready = json.loads(response.read())
                        if ready["workers"] == 2:
                            break
            except OSError:
                pass
            if process.poll() is not None:
                raise SystemExit(f"docsrv exited with {process.returncode}")
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        return {"ready_seconds": round(seconds, 2), "load_seconds": ready["load_seconds"], "pss_mb": pss_mb(process.pid),
                "master_peak_mb": peak_mb(process.pid)}
    finally:
        process.terminate()
        process.wait(timeout=120)


def read_only_start(snapshot: Path) -> dict | None:
    """A start on ``snapshot`` bind-mounted read-only (as a ``:ro`` volume is); None where mounting is refused."""
    mount = Path(tempfile.mkdtemp(prefix="docsrv-startup-ro-"))
    try:
        for args in (["mount", "--bind", str(snapshot), str(mount)], ["mount", "-o", "remount,ro,bind", str(mount)]):
            if subprocess.run(args, capture_output=True).returncode != 0:
                print(f"read-only start skipped: {' '.join(args)} refused", file=sys.stderr)
                return None
        return start(mount)
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)
        mount.rmdir()


def pull_then_start(snapshot: Path) -> dict:
    """Pull ``snapshot`` from a loopback origin into a fresh directory, then serve it: seconds
    from the pull's start to ready."""
    port = free_port()
    origin = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(snapshot)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    into = Path(tempfile.mkdtemp(prefix="docsrv-startup-pull-"))
    try:
        wait_for(f"http://127.0.0.1:{port}/manifest.json")
        floor = fetch_and_hash(f"http://127.0.0.1:{port}", snapshot, into / "floor")
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "docsrv", "snapshot", "pull", f"http://127.0.0.1:{port}", "--into", str(into)],
                       check=True, capture_output=True)
        pulled = time.perf_counter() - started
        ready = start(into / "current", started)
        return {"pull_seconds": round(pulled, 2), "pull_to_ready_seconds": ready["ready_seconds"], "floor_seconds": floor,
                "ratio_to_floor": round(ready["ready_seconds"] / floor, 2)}
    finally:
        origin.terminate()
        origin.wait()
        shutil.rmtree(into, ignore_errors=True)


def fetch_and_hash(origin: str, snapshot: Path, into: Path) -> float:
    """The floor of a pull: every file the manifest lists (records and index) fetched with curl
    from ``origin``, one after another, then hashed with sha256sum; the seconds it takes."""
    manifest = json.loads((snapshot / "manifest.json").read_text())
    names = ["manifest.json", *manifest.get("files", {}), *(f"index/{name}" for name in manifest.get("index", {}))]
    into.mkdir(parents=True)
    started = time.perf_counter()
    for number, name in enumerate(names):
        subprocess.run(["curl", "-sSf", "-o", str(into / str(number)), f"{origin}/{name}"], check=True)
    subprocess.run(["sha256sum", *(str(into / str(number)) for number in range(len(names)))], check=True, capture_output=True)
    seconds = time.perf_counter() - started
    shutil.rmtree(into)
    return round(seconds, 2)


def datasette_start(snapshot: Path) -> dict:
    database = sqlite_path(snapshot)
    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen([str(PEERS_VENV / "bin" / "datasette"), "serve", "--immutable", str(database), "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/-/versions.json")
        return {"ready_seconds": round(time.perf_counter() - started, 2), "pss_mb": pss_mb(process.pid),
                "sqlite_mb": round(database.stat().st_size / 2**20)}
    finally:
        process.terminate()
        process.wait(timeout=60)


def wait_for(url: str) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{url}: no answer in 600 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", nargs="+", default=["small", "medium", "large"], choices=["demo", "small", "medium", "large"])
    parser.add_argument("--pull", action="store_true", help="also time a pull of each snapshot, then its start")
    parser.add_argument("--datasette", action="store_true", help="also time Datasette's start on the SQLite export")
    parser.add_argument("--out", default=None, help="results path without suffix (default: bench/results/<date>-startup)")
    args = parser.parse_args()
    if args.datasette:
        ensure_peers()
    results = {}
    for scale in args.scales:
        snapshot = snapshot_path(scale, 1)
        subprocess.run([sys.executable, "-m", "docsrv", "index", str(snapshot)], check=True, capture_output=True)
        for path in snapshot.glob(".docsrv-*"):  # what `index` prepared: the first start checks whole
            path.unlink()
        for path in snapshot.glob("*.jsonl"):  # warm the page cache
            with open(path, "rb") as data:
                while data.read(1 << 24):
                    pass
        first = start(snapshot)
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "docsrv", "snapshot", "prepare", str(snapshot)], check=True, capture_output=True)
        prepared = round(time.perf_counter() - began, 2)
        again = start(snapshot)
        results[scale] = {"first": first, "prepare_seconds": prepared, "trusted": again, "read_only": read_only_start(snapshot)}
        if args.pull:
            results[scale]["pull"] = pull_then_start(snapshot)
        if args.datasette:
            results[scale]["datasette"] = datasette_start(snapshot)
        print(scale, results[scale], file=sys.stderr)
    out = Path(args.out) if args.out else HERE / "results" / f"{date.today().isoformat()}-startup"
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [f"# Start-up of `docsrv serve --workers 2`, {date.today().isoformat()}", "",
             "Index built beforehand, page cache warm. Not prepared: no record of a check (every digest, every build "
             "command, every cross-check; nothing written). Prepared: `docsrv snapshot prepare` ran, its record matches "
             "the files; read-only: the same, bind-mounted read-only.", "",
             "| scale | ready, not prepared (s) | prepare (s) | ready, prepared (s) | ready, prepared, read-only (s) (x writable) "
             "| load, not prepared / prepared (s) | PSS, master + 2 workers (MB) "
             "| loader's peak (MB) | pull, then ready (s) (x the floor: curl and sha256sum of the same files) "
             "| Datasette ready (s), PSS (MB) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for scale, row in results.items():
        pull = row.get("pull")
        pulled = "-"
        if pull:
            pulled = f"{pull['pull_seconds']}, {pull['pull_to_ready_seconds']} ({pull['ratio_to_floor']}x {pull['floor_seconds']})"
        peer = f"{row['datasette']['ready_seconds']}, {row['datasette']['pss_mb']}" if "datasette" in row else "-"
        first, trusted, read_only = row["first"], row["trusted"], row["read_only"]
        loads = f"{first['load_seconds']} / {trusted['load_seconds']}"
        ro = f"{read_only['ready_seconds']} ({read_only['ready_seconds'] / trusted['ready_seconds']:.2f}x)" if read_only else "-"
        lines.append(f"| {scale} | {first['ready_seconds']} | {row['prepare_seconds']} | {trusted['ready_seconds']} | {ro} | {loads} "
                     f"| {trusted['pss_mb']} | {first['master_peak_mb']} | {pulled} | {peer} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
