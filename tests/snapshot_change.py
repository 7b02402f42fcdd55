"""A realistic change between two snapshots, as an operator sees one between two pulls: projects
edited, added and removed, a version made private, new builds, a build's state changed.

Shared by the edge-cache test (``tests/edge``) and ``bench/edge.py``. Deterministic: the same
snapshot gives the same change.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from docsrv.snapshot.load import record_file
from docsrv.snapshot.records import Manifest
from docsrv.snapshot.write import write_manifest

KINDS = ("users", "projects", "relationships", "versions", "builds", "build_commands", "pages")


def read(directory: Path, kind: str) -> list[dict]:
    paths = record_file(directory, kind)
    if not paths:
        return []
    assert paths[0].suffix == ".jsonl", "the change is made on plain JSON Lines"
    return [json.loads(line) for line in paths[0].read_text(encoding="utf-8").splitlines() if line.strip()]


def write(directory: Path, kind: str, records: list[dict]) -> None:
    if records or (directory / f"{kind}.jsonl").exists():
        text = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)
        (directory / f"{kind}.jsonl").write_text(text, encoding="utf-8")


def realistic_change(old: Path, new: Path, name: str, *, scale: int = 1) -> dict[str, list]:
    """Write ``new``: ``old`` changed. ``scale`` multiplies how many objects each change touches.
    Returns what was changed, by kind of change."""
    shutil.copytree(old, new, ignore=shutil.ignore_patterns("index", "index.*", ".*"))
    records = {kind: read(new, kind) for kind in KINDS}
    related = {r["parent"] for r in records["relationships"]} | {r["child"] for r in records["relationships"]}
    public = [p for p in records["projects"] if p.get("privacy_level", "public") == "public" and p["id"] not in related]
    versions_of: dict[int, list[dict]] = {}
    for version in records["versions"]:
        versions_of.setdefault(version["project"], []).append(version)
    builds_of_version: dict[int, list[dict]] = {}
    for build in records["builds"]:
        builds_of_version.setdefault(build["version"], []).append(build)
    with_builds = [p for p in public if any(builds_of_version.get(v["id"]) for v in versions_of.get(p["id"], []))]
    done: dict[str, list] = {}

    # Projects edited: a description, a name.
    edited = with_builds[1 : 1 + 2 * scale]
    for number, project in enumerate(edited):
        if number % 2:
            project["name"] = project["name"] + " (renamed)"
        else:
            project["description"] = (project.get("description") or "") + " Now with more."
    done["edited projects"] = [p["slug"] for p in edited]

    # A project removed, with everything of it.
    removed = with_builds[-scale:]
    gone = {p["id"] for p in removed}
    gone_versions = {v["id"] for v in records["versions"] if v["project"] in gone}
    gone_builds = {b["id"] for b in records["builds"] if b["project"] in gone}
    records["projects"] = [p for p in records["projects"] if p["id"] not in gone]
    records["versions"] = [v for v in records["versions"] if v["id"] not in gone_versions]
    records["builds"] = [b for b in records["builds"] if b["id"] not in gone_builds]
    records["build_commands"] = [c for c in records["build_commands"] if c["build"] not in gone_builds]
    records["pages"] = [p for p in records["pages"] if p["version"] not in gone_versions]
    done["removed projects"] = [p["slug"] for p in removed]

    # A version made private (one with builds, of a project that stays).
    kept = [p for p in with_builds if p["id"] not in gone and p not in edited]
    made_private = []
    for project in kept[:scale]:
        version = next(v for v in versions_of[project["id"]] if builds_of_version.get(v["id"]) and v.get("privacy_level") != "private")
        version["privacy_level"] = "private"
        made_private.append(f"{project['slug']}/{version['slug']}")
    done["versions made private"] = made_private

    # A build's state changed (of a project that stays, in a version still public).
    state_changed = []
    for project in kept[scale : 2 * scale]:
        build = next(b for v in versions_of[project["id"]] if v.get("privacy_level") != "private" for b in builds_of_version.get(v["id"], []))
        build["state"] = "building" if build.get("state", "finished") == "finished" else "finished"
        build["success"] = not build.get("success", True)
        state_changed.append(build["id"])
    done["builds whose state changed"] = state_changed

    # New builds, with their commands, after every other build.
    next_build = max(b["id"] for b in records["builds"]) + 1
    next_command = max(c["id"] for c in records["build_commands"]) + 1
    latest = max(datetime.fromisoformat(b["date"].replace("Z", "+00:00")) for b in records["builds"])
    new_builds = []
    for number, project in enumerate(kept[2 * scale : 2 * scale + 2 * scale] or kept[:1]):
        version = next(v for v in versions_of[project["id"]] if v.get("privacy_level") != "private")
        when = latest + timedelta(minutes=10 * (number + 1))
        commit = f"{number + 1:02d}" + "c0ffee" * 6
        build = {"id": next_build, "project": project["id"], "version": version["id"], "date": stamp(when), "length": 42,
                 "type": "html", "state": "finished", "success": True, "error": "", "commit": commit[:40]}
        records["builds"].append(build)
        for step, command in enumerate(("git checkout " + build["commit"], "python -m sphinx -b html . _build/html")):
            records["build_commands"].append({
                "id": next_command, "build": next_build, "command": command, "description": "",
                "start_time": stamp(when + timedelta(seconds=step)), "end_time": stamp(when + timedelta(seconds=step + 1)),
                "exit_code": 0, "output": "",
            })
            next_command += 1
        new_builds.append(next_build)
        next_build += 1
    done["new builds"] = new_builds

    # A project added, with a version, a build and a page.
    added = []
    for number in range(scale):
        pid = max(p["id"] for p in records["projects"]) + 1
        vid = max(v["id"] for v in records["versions"]) + 1
        slug = f"brand-new-{number + 1}"
        records["projects"].append({"id": pid, "name": f"Brand new {number + 1}", "slug": slug, "pub_date": stamp(latest),
                                    "modified_date": stamp(latest), "description": "Just arrived.", "users": []})
        records["versions"].append({"id": vid, "project": pid, "slug": "latest", "verbose_name": "latest", "identifier": "main",
                                    "active": True, "built": True, "type": "branch"})
        when = latest + timedelta(hours=1, minutes=number)
        records["builds"].append({"id": next_build, "project": pid, "version": vid, "date": stamp(when), "commit": "f" * 40})
        records["build_commands"].append({"id": next_command, "build": next_build, "command": "make html",
                                          "start_time": stamp(when), "end_time": stamp(when + timedelta(seconds=5))})
        if records["pages"]:
            page_id = max(p["id"] for p in records["pages"]) + 1
            records["pages"].append({"id": page_id, "project": pid, "version": vid, "path": "index.html", "title": "Brand new",
                                     "text": "A brand new project documents installation and configuration."})
        next_build += 1
        next_command += 1
        added.append(slug)
    done["added projects"] = added

    for kind, kept_records in records.items():
        write(new, kind, kept_records)
    manifest = msgspec.json.decode((new / "manifest.json").read_bytes(), type=Manifest)
    counts = {kind: len(records[kind]) for kind in manifest.counts}
    write_manifest(new, msgspec.structs.replace(manifest, name=name, counts=counts))
    return done


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
