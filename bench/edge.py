"""The origin's load after a snapshot change, with a real Varnish in front, by how the edge is purged.

    python bench/edge.py [--scale medium] [--projects 300] [--diff-scale large]

A realistic change of the snapshot (``tests/snapshot_change.py``: projects edited, added and
removed, versions made private, new builds, builds whose state changed) is swapped in under a
docsrv with Debian's Varnish + xkey in front (``deploy/varnish/docsrv.vcl``). For each choice
the cache is warmed with the same crawl (every kind of URL of a sample of projects, the changed
ones among them), the snapshot swapped, ``docsrv fleet wait`` run, the choice made, and the crawl
repeated through Varnish, counting the requests that reach docsrv (Varnish's misses) and the
replies that differ from docsrv's own (stale):

- purge everything (``v1 v2 search openapi``, every reply's API key);
- purge what ``docsrv snapshot diff`` prints;
- wait out max-age: nothing purged; the stale replies are served until each copy expires, and
  then every copy is fetched again.

With ``--diff-scale large``, ``docsrv snapshot diff`` is also timed on two snapshots of that
scale (the second made by a streaming change of the first; both written under bench/scratch).
Results: bench/results/<date>-edge.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests"), str(ROOT / "tests" / "edge")]
from crawl import crawl  # noqa: E402
from snapshot_change import read, realistic_change  # noqa: E402
from varnish import Varnish, was_hit  # noqa: E402

from conftest import Server  # noqa: E402
from run import WORK, snapshot_path  # noqa: E402

PUBLIC = "https://api.example.org"
EVERYTHING = ["v1", "v2", "search", "openapi"]


def docsrv(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "docsrv", *args], capture_output=True, text=True, check=False, cwd=ROOT)


def point(link: Path, target: Path) -> None:
    swap = link.with_name(link.name + ".new")
    swap.unlink(missing_ok=True)
    swap.symlink_to(target)
    os.replace(swap, link)


def measure(choice: str, old: Path, new: Path, urls: list[str]) -> dict:
    link = WORK / "edge-current"
    point(link, old)
    server = Server(["--snapshot", str(link), "--workers", "2", "--public-url", PUBLIC])
    varnish = Varnish(server.port)
    try:
        for url in urls:
            varnish.get(url)
        cached = [url for url in urls if was_hit(varnish.get(url)[1])]
        point(link, new)
        os.kill(server.process.pid, signal.SIGHUP)
        waited = docsrv("fleet", "wait", "--snapshot", new.name, "--timeout", "600", server.base)
        assert waited.returncode == 0, waited.stderr
        started = time.perf_counter()
        if choice == "everything":
            status, _headers, _body = varnish.request("PURGE", "/", {"xkey-purge": " ".join(EVERYTHING)})
            assert status == 200
        elif choice == "diff":
            purged = docsrv("snapshot", "diff", str(old), str(new), "--purge", f"http://127.0.0.1:{varnish.port}/")
            assert purged.returncode == 0, purged.stderr
        purge_seconds = time.perf_counter() - started
        origin = stale = 0
        for url in cached:
            status, headers, body = varnish.get(url)
            now = server.get(url)
            origin += not was_hit(headers)
            stale += (status, body) != (now.status, now.body)
        return {"cached": len(cached), "origin_requests": origin, "stale": stale, "purge_seconds": round(purge_seconds, 2)}
    finally:
        varnish.stop()
        server.stop()


def truly_changed(old: Path, new: Path, urls: list[str]) -> int:
    """How many of the URLs docsrv answers differently from the two snapshots."""
    before = Server(["--snapshot", str(old), "--workers", "1", "--public-url", PUBLIC])
    after = Server(["--snapshot", str(new), "--workers", "1", "--public-url", PUBLIC])
    try:
        return sum((before.get(url).status, before.get(url).body) != (after.get(url).status, after.get(url).body) for url in urls)
    finally:
        before.stop()
        after.stop()


def streamed_change(old: Path, new: Path, name: str) -> None:
    """A realistic change of a snapshot too large to hold as dictionaries: every file copied line by
    line, a few records edited, one project removed with everything of it, a version made private,
    builds added after every other."""
    import msgspec

    from docsrv.snapshot.records import Manifest
    from docsrv.snapshot.write import write_manifest

    if new.exists():
        shutil.rmtree(new)
    new.mkdir()
    removed_project = 7
    gone_versions: set[int] = set()
    gone_builds: set[int] = set()
    counts: dict[str, int] = {}
    last = {"builds": 0, "build_commands": 0, "projects": 0, "versions": 0}
    for kind in ("users", "projects", "relationships", "versions", "builds", "build_commands", "pages"):
        source = old / f"{kind}.jsonl"
        if not source.exists():
            continue
        n = 0
        with open(source, encoding="utf-8") as lines, open(new / source.name, "w", encoding="utf-8") as out:
            for line in lines:
                record = json.loads(line) if kind != "build_commands" and kind != "pages" else None
                if kind == "build_commands":
                    build = int(line.split('"build":', 1)[1].split(",", 1)[0])
                    last[kind] = max(last[kind], int(line.split('"id":', 1)[1].split(",", 1)[0]))
                    if build in gone_builds:
                        continue
                elif kind == "pages":
                    if int(line.split('"version":', 1)[1].split(",", 1)[0]) in gone_versions:
                        continue
                elif kind == "relationships":
                    if removed_project in (record["parent"], record["child"]):
                        continue
                elif kind == "projects":
                    last[kind] = max(last[kind], record["id"])
                    if record["id"] == removed_project:
                        continue
                    if record["id"] in (3, 11, 19, 27, 35):
                        record["description"] = record.get("description", "") + " Edited."
                        line = json.dumps(record, separators=(",", ":")) + "\n"
                elif kind == "versions":
                    last[kind] = max(last[kind], record["id"])
                    if record["project"] == removed_project:
                        gone_versions.add(record["id"])
                        continue
                    if record["id"] in (101, 202):
                        record["privacy_level"] = "private"
                        line = json.dumps(record, separators=(",", ":")) + "\n"
                elif kind == "builds":
                    last[kind] = max(last[kind], record["id"])
                    if record["project"] == removed_project:
                        gone_builds.add(record["id"])
                        continue
                    if record["id"] % 50_000 == 1:
                        record["state"] = "building"
                        line = json.dumps(record, separators=(",", ":")) + "\n"
                out.write(line)
                n += 1
            if kind == "builds":
                for number in range(5):
                    out.write(json.dumps({"id": last["builds"] + 1 + number, "project": 1, "version": 1, "date": "2030-01-01T00:00:00Z",
                                          "commit": f"{number:040d}"}) + "\n")
                    n += 1
            if kind == "build_commands":
                for number in range(5):
                    out.write(json.dumps({"id": last[kind] + 1 + number, "build": last["builds"] + 1 + number, "command": "make html",
                                          "start_time": "2030-01-01T00:00:00Z", "end_time": "2030-01-01T00:00:05Z"}) + "\n")
                    n += 1
        counts[kind] = n
    manifest = msgspec.json.decode((old / "manifest.json").read_bytes(), type=Manifest)
    write_manifest(new, msgspec.structs.replace(manifest, name=name, counts={k: counts[k] for k in manifest.counts}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium", choices=["none", "demo", "small", "medium"], help="none: only --diff-scale")
    parser.add_argument("--projects", type=int, default=300, help="projects in the crawl's sample (with the changed ones)")
    parser.add_argument("--per-project", type=int, default=5, help="versions, builds and pages of each in the crawl")
    parser.add_argument("--diff-scale", default=None, choices=["medium", "large"], help="also time `snapshot diff` at this scale")
    args = parser.parse_args()

    results: dict = {}
    if args.scale != "none":
        results = measure_crawl(args)

    if args.diff_scale is not None:
        big = snapshot_path(args.diff_scale, 1)
        changed = WORK / f"{big.name}-streamed-change"
        if not (changed / "manifest.json").exists():
            streamed_change(big, changed, changed.name)
        started = time.perf_counter()
        output = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "docsrv", "snapshot", "diff", str(big), str(changed)],
                                capture_output=True, text=True, check=False, cwd=ROOT)
        assert output.returncode == 0, output.stderr
        results["diff_at_scale"] = {"scale": args.diff_scale, "seconds": round(time.perf_counter() - started, 1),
                                    "keys": len(output.stdout.split()), "peak_rss_mb": int(output.stderr.split()[-1]) // 1024,
                                    "record_mb": round(sum(p.stat().st_size for p in big.glob("*.jsonl")) / 2**20)}

    out = HERE / "results" / f"{date.today().isoformat()}-edge{'' if args.scale != 'none' else '-diff-' + args.diff_scale}"
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(report(results))
    print(report(results))


def measure_crawl(args: argparse.Namespace) -> dict:
    old = snapshot_path(args.scale, 1)
    new = WORK / f"{old.name}-changed"
    if not (new / "manifest.json").exists():
        shutil.rmtree(new, ignore_errors=True)
        changes = realistic_change(old, new, new.name, scale=5)
        (WORK / f"{new.name}.changes.json").write_text(json.dumps(changes))
    changes = json.loads((WORK / f"{new.name}.changes.json").read_text())
    touched = {name.split("/")[0] for names in changes.values() for name in names if isinstance(name, str)}
    projects = read(old, "projects") + [p for p in read(new, "projects") if p["slug"] in touched]
    chosen = {p["id"] for p in projects if p["slug"] in touched}
    chosen |= {p["id"] for p in random.Random(1).sample(projects, min(args.projects, len(projects)))}
    urls = crawl(old, new, projects_kept=chosen, per_project=args.per_project)
    print(f"{len(urls)} URLs of {len(chosen)} projects", file=sys.stderr)

    results = {"scale": args.scale, "urls": len(urls), "projects": len(chosen), "changes": changes}
    results["truly_changed"] = truly_changed(old, new, urls)
    started = time.perf_counter()
    keys = docsrv("snapshot", "diff", str(old), str(new)).stdout.split()
    results["diff_command"] = {"keys": len(keys), "seconds": round(time.perf_counter() - started, 2)}
    for choice in ("everything", "diff", "max-age"):
        results[choice] = measure(choice, old, new, urls)
        print(choice, results[choice], file=sys.stderr)
    return results


def report(results: dict) -> str:
    lines = []
    if "truly_changed" in results:
        lines = crawl_report(results)
    if "diff_at_scale" in results:
        at = results["diff_at_scale"]
        lines += ["", f"`docsrv snapshot diff` of two {at['scale']} snapshots ({at['record_mb']} MB of records each): "
                  f"{at['seconds']} s, peak RSS {at['peak_rss_mb']} MB, {at['keys']} keys."]
    return "\n".join(lines) + "\n"


def crawl_report(results: dict) -> list[str]:
    changed = results["truly_changed"]
    summary = ", ".join(f"{kind}: {len(names)}" for kind, names in results["changes"].items())
    titles = {"everything": "purge everything", "diff": "purge what `snapshot diff` prints", "max-age": "wait out max-age"}
    lines = [
        f"# Edge caches after a snapshot change, {date.today().isoformat()}, scale {results['scale']}",
        "",
        f"A crawl of {results['urls']} URLs (every kind, {results['projects']} projects: a seeded sample and every changed one) "
        f"through Varnish + xkey in front of docsrv (2 workers); a realistic change swapped in ({summary}); "
        f"{changed} of the URLs answer differently after it. `docsrv snapshot diff` printed {results['diff_command']['keys']} keys "
        f"in {results['diff_command']['seconds']} s.",
        "",
        "| choice | replies cached | requests reaching docsrv on the crawl after it | stale replies served |",
        "|---|---|---|---|",
    ]
    for choice, title in titles.items():
        row = results[choice]
        after = str(row["origin_requests"])
        if choice == "max-age":
            after += f" now, then all {row['cached']} as each copy expires within max-age"
        lines.append(f"| {title} | {row['cached']} | {after} | {row['stale']} |")
    return lines


if __name__ == "__main__":
    main()
