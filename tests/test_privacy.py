"""Privacy as a property: for generated snapshots with random privacy flags and secret user
fields, crawl every endpoint, every page of every list, and search for every title; nothing
private (id, slug, title) and no secret (email, names) appears in any response."""

import json
import random
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Server


def token(rng: random.Random, kind: str) -> str:
    return f"{kind}{rng.getrandbits(48):012x}"


def generate(rng: random.Random, directory):
    """A small snapshot with random privacy; every private or secret string is a unique token.

    Returns the records, the strings that must never be served, and the hidden ids by kind.
    """
    directory.mkdir()
    secrets: set[str] = set()
    hidden = {"projects": set(), "versions": set(), "builds": set()}
    users = [
        {"id": uid, "username": token(rng, "user"), "email": token(rng, "mail") + "@example.com",
         "first_name": token(rng, "first"), "last_name": token(rng, "last")}
        for uid in range(1, rng.randint(2, 5) + 1)
    ]
    secrets |= {u[field] for u in users for field in ("email", "first_name", "last_name")}
    projects, versions, builds, commands, pages = [], [], [], [], []
    for pid in range(1, rng.randint(3, 6) + 1):
        project_private = pid > 1 and rng.random() < 0.4  # project 1 stays public: something is served
        project = {"id": pid, "name": token(rng, "pname"), "slug": token(rng, "pslug"), "description": token(rng, "pdesc"),
                   "pub_date": "2020-01-01T00:00:00Z", "modified_date": "2021-01-01T00:00:00Z",
                   "users": [rng.randint(1, len(users))], "privacy_level": "private" if project_private else "public"}
        projects.append(project)
        if project_private:
            hidden["projects"].add(pid)
            secrets |= {project["name"], project["slug"], project["description"]}
        for _ in range(rng.randint(1, 4)):
            version_private = rng.random() < 0.3
            version = {"id": len(versions) + 1, "project": pid, "slug": token(rng, "vslug"), "verbose_name": token(rng, "vname"),
                       "active": rng.random() < 0.7, "privacy_level": "private" if version_private else "public"}
            versions.append(version)
            unseen = project_private or version_private
            if unseen:
                hidden["versions"].add(version["id"])
                secrets |= {version["slug"], version["verbose_name"]}
            for _ in range(rng.randint(0, 3)):
                build = {"id": len(builds) + 1, "project": pid, "version": version["id"],
                         "date": f"2024-01-{rng.randint(1, 28):02d}T00:00:00Z", "commit": token(rng, "commit"), "error": token(rng, "berr")}
                builds.append(build)
                own = [{"id": len(commands) + n + 1, "build": build["id"], "command": token(rng, "cmd"),
                        "start_time": f"2024-01-01T00:00:0{n}Z", "end_time": f"2024-01-01T00:00:0{n + 1}Z", "output": token(rng, "out")}
                       for n in range(rng.randint(1, 2))]
                commands += own
                if unseen:
                    hidden["builds"].add(build["id"])
                    secrets |= {build["commit"], build["error"]} | {c["command"] for c in own} | {c["output"] for c in own}
            for _ in range(rng.randint(0, 2)):
                page = {"id": len(pages) + 1, "project": pid, "version": version["id"], "path": token(rng, "path") + ".html",
                        "title": token(rng, "title"), "sections": [[token(rng, "anchor"), token(rng, "heading")]],
                        "text": "common words " + token(rng, "text")}
                pages.append(page)
                if unseen:
                    secrets |= {page["title"], page["path"], *page["sections"][0], page["text"].split()[-1]}
    # Project 1 is the parent of some others, public or private: its searches reach the public ones only.
    relationships = [{"id": n + 1, "parent": 1, "child": pid} for n, pid in enumerate(p["id"] for p in projects[1:] if rng.random() < 0.6)]
    kinds = {"users": users, "projects": projects, "relationships": relationships, "versions": versions, "builds": builds,
             "build_commands": commands, "pages": pages}
    for kind, items in kinds.items():
        (directory / f"{kind}.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    (directory / "manifest.json").write_text(json.dumps({
        "format": "docsrv-snapshot", "format_version": 1, "name": "privacy", "created_at": "2024-02-01T00:00:00Z",
        "public_url": "https://docs.example.org", "counts": {k: len(v) for k, v in kinds.items()}}))
    return kinds, secrets, hidden


def crawl(server: Server, kinds: dict) -> list[tuple[str, object]]:
    """Every response a client can get: lists page by page (both APIs), details, searches."""
    seen = []

    def fetch(path):
        response = server.get(path)
        assert response.status < 500, path
        seen.append((path, response.body.decode()))
        return response

    for endpoint in ("/api/v2/project/", "/api/v2/version/", "/api/v2/build/"):
        link = endpoint + "?limit=2"
        while link:
            body = fetch(link).json()
            link = body["next"] and body["next"].split(str(server.port), 1)[1]
    for endpoint in ("project", "version", "build", "file", "user"):
        link = f"/api/v1/{endpoint}/?limit=2"
        while link:
            link = fetch(link).json()["meta"]["next"]
    for kind, single in (("projects", "project"), ("versions", "version"), ("builds", "build")):
        for item in kinds[kind]:
            fetch(f"/api/v2/{single}/{item['id']}/")
            fetch(f"/api/v1/{single}/{item['id']}/")
    for project in kinds["projects"]:
        fetch(f"/api/v2/project/{project['id']}/active_versions/")
        fetch(f"/api/v1/project/{project['slug']}/")
        fetch(f"/api/v1/version/{project['slug']}/")
        fetch(f"/api/v2/project/?slug={project['slug']}")
    for page in kinds["pages"]:
        fetch(f"/api/v1/file/{page['id']}/")
        fetch(f"/api/v1/file/search/?q={quote(page['title'])}")
        fetch(f"/api/v1/file/anchor/?q={quote(page['sections'][0][0])}")
        for version in kinds["versions"]:
            project = next(p for p in kinds["projects"] if p["id"] == version["project"])
            fetch(f"/api/v2/docsearch/?project={project['slug']}&version={version['slug']}&q={quote(page['title'])}")
            fetch(f"/api/v2/docsearch/?project={project['slug']}&version={version['slug']}&q=common")
    for user in kinds["users"]:
        fetch(f"/api/v1/user/{user['id']}/")
        fetch(f"/api/v1/user/?username={user['username']}")
    return seen


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32))
def test_nothing_private_or_secret_is_ever_served(tmp_path_factory, seed):
    rng = random.Random(seed)
    directory = tmp_path_factory.mktemp("privacy") / "snapshot"
    kinds, secrets, hidden = generate(rng, directory)
    server = Server(["--snapshot", str(directory), "--workers", "1"])
    try:
        seen = crawl(server, kinds)
    finally:
        server.stop()
    for path, body in seen:
        for secret in secrets:
            assert secret not in body, (secret, path)
        data = json.loads(body)
        ids = collect(data)
        for kind in ("projects", "versions", "builds"):
            assert not (ids[kind] & hidden[kind]), (kind, path)


def collect(data) -> dict[str, set[int]]:
    """The ids of projects, versions and builds that a response shows, found by their shapes."""
    found = {"projects": set(), "versions": set(), "builds": set()}

    def walk(node):
        if isinstance(node, dict):
            if "resource_uri" in node:
                kind = node["resource_uri"].split("/")[3]
                key = {"project": "projects", "version": "versions", "build": "builds"}.get(kind)
                if key:
                    found[key].add(int(node["id"]))
            elif "slug" in node and "canonical_url" in node:
                found["projects"].add(node["id"])
            elif "verbose_name" in node and "downloads" in node:
                found["versions"].add(node["id"])
            elif "commands" in node and "version_slug" in node:
                found["builds"].add(node["id"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    return found
