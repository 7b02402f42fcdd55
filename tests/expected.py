"""The tests' own reading of the spec: what v2 must answer for records read with the json module.

Written from api-spec.md and DECISIONS.md, apart from docsrv's code, so that the two can disagree.
"""

from __future__ import annotations

from datetime import datetime

PUBLIC_URL = "https://docs.example.org"

PROJECT_FIELDS = [
    "id", "name", "slug", "description", "language", "programming_language", "repo", "repo_type",
    "default_version", "default_branch", "documentation_type", "users", "canonical_url",
]  # fmt: skip
VERSION_FIELDS = ["id", "project", "slug", "identifier", "verbose_name", "active", "built", "downloads", "type"]
# The original's serializers (DECISIONS.md section 2): declared fields first, then the model's, then relations.
BUILD_FIELDS = [
    "id", "commands", "project_slug", "version_slug", "docs_url", "type", "state", "date", "success", "error",
    "commit", "length", "project", "version",
]
COMMAND_FIELDS = ["id", "run_time", "command", "description", "output", "exit_code", "start_time", "end_time", "build"]


class Public:
    """The public part of a snapshot, in the orders the spec rules."""

    def __init__(self, raw: dict) -> None:
        self.raw = raw
        self.projects = {i: p for i, p in raw["projects"].items() if p.get("privacy_level", "public") == "public"}
        self.versions = {
            i: v
            for i, v in raw["versions"].items()
            if v.get("privacy_level", "public") == "public" and v["project"] in self.projects
        }
        self.builds = {i: b for i, b in raw["builds"].items() if b["version"] in self.versions}
        self.private_projects = [p for p in raw["projects"].values() if p not in self.projects.values()]
        self.private_versions = [v for v in raw["versions"].values() if v["id"] not in self.versions]
        self.private_builds = [b for b in raw["builds"].values() if b["id"] not in self.builds]

    def projects_by_slug(self) -> list[dict]:
        return sorted(self.projects.values(), key=lambda p: p["slug"])

    def versions_in_order(self, keep=lambda v: True) -> list[dict]:
        chosen = sorted((v for v in self.versions.values() if keep(v)), key=lambda v: v["id"])
        return sorted(chosen, key=lambda v: v["verbose_name"], reverse=True)

    def builds_in_order(self, keep=lambda b: True) -> list[dict]:
        chosen = [b for b in self.builds.values() if keep(b)]
        return sorted(chosen, key=lambda b: (parse(b["date"]), b["id"]), reverse=True)

    def project(self, project: dict) -> dict:
        lang = project.get("language", "en")
        return {
            "id": project["id"],
            "name": project["name"],
            "slug": project["slug"],
            "description": project.get("description", ""),
            "language": lang,
            "programming_language": project.get("programming_language", "words"),
            "repo": project.get("repo", ""),
            "repo_type": project.get("repo_type", "git"),
            "default_version": project.get("default_version", "latest"),
            "default_branch": project.get("default_branch", "main"),
            "documentation_type": project.get("documentation_type", "generator"),
            "users": project.get("users", []),
            "canonical_url": f"{PUBLIC_URL}/projects/{project['slug']}/{lang}/{project.get('default_version', 'latest')}/",
        }

    def version(self, version: dict) -> dict:
        project = self.projects[version["project"]]
        host = PUBLIC_URL.split("://")[1]
        return {
            "id": version["id"],
            "project": self.project(project),
            "slug": version["slug"],
            "identifier": version.get("identifier", ""),
            "verbose_name": version["verbose_name"],
            "active": version.get("active", True),
            "built": version.get("built", False),
            "downloads": {
                kind: f"//{host}/projects/{project['slug']}/downloads/{kind}/{version['slug']}/"
                for kind in ("pdf", "htmlzip", "epub")
                if kind in version.get("downloads", [])
            },
            "type": version.get("type", "unknown"),
        }

    def build(self, build: dict) -> dict:
        project = self.projects[build["project"]]
        version = self.versions[build["version"]]
        commands = sorted(
            (c for c in self.raw["build_commands"].values() if c["build"] == build["id"]),
            key=lambda c: parse(c["start_time"]),
        )
        return {
            "id": build["id"],
            "project": project["id"],
            "project_slug": project["slug"],
            "version": version["id"],
            "version_slug": version["slug"],
            "date": build["date"],
            "length": build.get("length", 0),
            "type": build.get("type", "html"),
            "state": build.get("state", "finished"),
            "success": build.get("success", True),
            "error": build.get("error", ""),
            "commit": build.get("commit", ""),
            "docs_url": f"{PUBLIC_URL}/projects/{project['slug']}/{project.get('language', 'en')}/{version['slug']}/",
            "commands": [
                {
                    "id": c["id"],
                    "build": c["build"],
                    "command": c["command"],
                    "description": c.get("description", ""),
                    "start_time": c["start_time"],
                    "end_time": c["end_time"],
                    "run_time": int((parse(c["end_time"]) - parse(c["start_time"])).total_seconds()),
                    "exit_code": c.get("exit_code", 0),
                    "output": c.get("output", ""),
                }
                for c in commands
            ],
        }


def parse(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))
