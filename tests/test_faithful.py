"""Faithful to the original service: its real database dumps (AnonymousUser, protected and unknown
privacy, legacy build types, a model split over two files, a build filed under the wrong
project, naive datetimes and old fields, an ``@`` in a file name), subprojects in doc search,
and the shapes its clients saw (v2 key order, v1 sorted keys, ``page`` pagination)."""

import json
import shutil
import subprocess
import sys

import pytest

from conftest import DEMO, ROOT, Server
from expected import BUILD_FIELDS, COMMAND_FIELDS, PROJECT_FIELDS, VERSION_FIELDS
from helpers import add_relationships

FIXTURES = ROOT / "tests" / "fixtures"
LEGACY = [FIXTURES / "rtd@2017.json", FIXTURES / "rtd-2017-part2.json"]
#: Strings of protected, private or secret records of the legacy dump: never served.
HIDDEN = [
    "umbrella-internals", "Umbrella Internals", "Internal notes kept protected", "umbrella-secrets", "Umbrella Secrets",
    "0.9-internal", "deadbeef99", "INTERNAL-TOKEN-42", "internal-token", "runbook", "AnonymousUser",
    "legacy-mail.example", "pbkdf2_sha256", "Silva", "git.corp.example",
]


def docsrv(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "docsrv", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    out = tmp_path_factory.mktemp("legacy") / "snapshot"
    result = docsrv("snapshot", "import-dump", *map(str, LEGACY), "--out", str(out))
    assert result.returncode == 0, result.stderr
    server = Server(["--snapshot", str(out), "--workers", "1"])
    yield out, result, server
    server.stop()


def test_a_dump_of_the_v1_v2_era_imports_and_names_every_skip(legacy):
    out, result, _ = legacy
    assert result.stderr.splitlines() == [
        "skipped auth.user pk=-1: django-guardian's AnonymousUser",
        "skipped builds.build pk=7: Invalid enum value 'htmlzip-legacy' - at `$.type`",
        "kept builds.build pk=4: filed under project 2; kept under its version's project 1",
    ]
    assert "wrote " in result.stdout and "2 users, 4 projects, 2 relationships, 4 versions, 6 builds, 2 build_commands, 3 pages" in result.stdout
    assert "skipped 2 records that cannot be served faithfully: auth.user (1), builds.build (1) (each named above)" in result.stdout
    # The snapshot's name comes from the first file's, made valid; the snapshot serves.
    assert json.loads((out / "manifest.json").read_text())["name"] == "rtd-2017"
    assert docsrv("snapshot", "validate", str(out)).returncode == 0


def test_protected_and_unknown_privacy_are_private_everywhere(legacy):
    _, _, server = legacy
    assert [p["slug"] for p in server.json("/api/v2/project/?limit=100")["results"]] == ["umbrella", "umbrella_plugins"]
    for path in ("/api/v2/project/3/", "/api/v2/project/4/", "/api/v2/version/2/", "/api/v2/build/5/", "/api/v1/project/umbrella-internals/"):
        assert server.get(path).status == 404, path
    seen = "".join(server.get(path).body.decode() for path in (
        "/api/v2/project/?limit=1000", "/api/v2/version/?limit=1000", "/api/v2/build/?limit=1000", "/api/v1/project/?limit=0",
        "/api/v1/version/?limit=0", "/api/v1/build/?limit=0", "/api/v1/file/?limit=0", "/api/v1/user/?limit=0",
        "/api/v1/file/search/?q=html", "/api/v1/file/anchor/?q=run", "/api/v2/project/1/active_versions/",
        "/api/v2/docsearch/?project=umbrella&version=latest&q=runbook", "/api/v2/docsearch/?project=umbrella&version=latest&q=html",
        *(f"/api/v2/build/{n}/" for n in range(1, 8)), *(f"/api/v1/build/{n}/" for n in range(1, 8)),
    ))
    for secret in HIDDEN:
        assert secret not in seen, secret


def test_legacy_build_types_a_repeated_pk_and_a_misfiled_build_are_served_as_the_rulings_say(legacy):
    _, _, server = legacy
    assert server.json("/api/v2/build/2/")["type"] == "dash" and server.json("/api/v1/build/2/")["type"] == "dash"
    assert server.json("/api/v2/build/3/")["type"] == "man" and server.json("/api/v1/build/3/")["type"] == "man"
    repeated = server.json("/api/v2/build/1/")  # the later file's record of pk 1 replaced the earlier one
    assert (repeated["commit"], repeated["length"]) == ("c0ffee0003", 44)
    assert server.json("/api/v1/build/1/")["output"] == "done again"
    misfiled = server.json("/api/v2/build/4/")
    assert (misfiled["project"], misfiled["project_slug"], misfiled["version_slug"]) == (1, "umbrella", "latest")


def test_naive_datetimes_and_old_fields_of_a_2017_dump(legacy):
    _, _, server = legacy
    project = server.json("/api/v1/project/umbrella/")
    assert project["pub_date"] == "2016-04-02T10:11:12Z" and project["modified_date"] == "2017-02-28T23:59:59.123456Z"
    assert project["version"] == "1.0" and project["use_virtualenv"] is True
    assert server.json("/api/v2/build/6/")["date"] == "2017-03-01T09:00:00Z"
    commands = server.json("/api/v2/build/1/")["commands"]
    assert [(c["start_time"], c["end_time"], c["run_time"]) for c in commands] == [("2017-02-28T12:00:01Z", "2017-02-28T12:00:31Z", 30)]
    assert [u["username"] for u in server.json("/api/v1/user/?limit=0")["objects"]] == ["ana", "bo"]


def test_v1_subdomain_takes_no_underscore(legacy):
    _, _, server = legacy
    assert server.json("/api/v1/project/umbrella_plugins/")["subdomain"] == "https://umbrella-plugins.docs.example.org/"


def test_doc_search_on_a_parent_searches_its_public_subprojects(legacy):
    _, _, server = legacy
    hits = server.json("/api/v2/docsearch/?project=umbrella&version=latest&q=html")["results"]["hits"]
    found = {(h["fields"]["project"][0], h["fields"]["path"][0], h["fields"]["link"]) for h in hits["hits"]}
    assert found == {
        ("umbrella", "index", "https://docs.example.org/projects/umbrella/en/latest/index"),
        ("umbrella_plugins", "plugins", "https://docs.example.org/projects/umbrella_plugins/en/latest/plugins"),
    }
    assert hits["total"] == 2
    only_plugins = server.json("/api/v2/docsearch/?project=umbrella&version=latest&q=plugins")["results"]["hits"]
    assert [h["fields"]["project"] for h in only_plugins["hits"]] == [["umbrella_plugins"]]
    # The private subproject is never searched; a subproject searched alone has no parent's pages.
    assert server.json("/api/v2/docsearch/?project=umbrella&version=latest&q=runbook")["results"]["hits"]["total"] == 0
    alone = server.json("/api/v2/docsearch/?project=umbrella_plugins&version=latest&q=html")["results"]["hits"]
    assert [h["fields"]["project"] for h in alone["hits"]] == [["umbrella_plugins"]]
    response = server.get("/api/v2/docsearch/?project=umbrella&version=latest&q=html")
    assert set(response.headers["Surrogate-Key"].split()) == {
        "search", "v2", "list-v2-docsearch-project-umbrella-version-latest", "project-umbrella", "version-umbrella-latest",
        "project-umbrella_plugins", "version-umbrella_plugins-latest",
    }


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """The demo snapshot with pip as the parent of requests (public) and acme-handbook (private)."""
    snapshot = tmp_path_factory.mktemp("family") / "snap"
    shutil.copytree(DEMO, snapshot, ignore=shutil.ignore_patterns("index"))
    projects = {json.loads(line)["slug"]: json.loads(line)["id"] for line in (snapshot / "projects.jsonl").read_text().splitlines()}
    relations = [{"id": 1, "parent": projects["pip"], "child": projects["requests"], "alias": "requests"},
                 {"id": 2, "parent": projects["pip"], "child": projects["acme-handbook"], "alias": None}]
    add_relationships(snapshot, relations)
    server = Server(["--snapshot", str(snapshot), "--workers", "1"])
    yield server
    server.stop()


def test_subproject_hits_are_ranked_with_the_parents_and_counted_in_the_total(family, demo):
    def search(server, project, q):
        return server.json(f"/api/v2/docsearch/?project={project}&version=latest&q={q}")["results"]["hits"]

    for q in ("the", "install", "session", "pip+requests"):
        both = search(family, "pip", q)
        parent_alone = search(demo, "pip", q)  # the same snapshot without the relationships
        child = search(family, "requests", q)
        assert both["total"] == parent_alone["total"] + child["total"], q
        assert [h["fields"]["project"][0] for h in both["hits"]].count("requests") == len(child["hits"])
        scores = [h["_score"] for h in both["hits"]]
        assert scores == sorted(scores, reverse=True)
        for hit in both["hits"]:
            owner = hit["fields"]["project"][0]
            assert owner in ("pip", "requests")
            assert hit["fields"]["link"] == f"https://docs.example.org/projects/{owner}/en/latest/{hit['fields']['path'][0]}"
    assert {h["fields"]["project"][0] for h in search(family, "pip", "session")["hits"]} == {"requests"}
    assert search(family, "pip", "handbook")["total"] == 0  # the private subproject's page is never searched


def test_v2_objects_keep_the_original_serializers_key_order(demo):
    assert list(demo.json("/api/v2/project/1/")) == PROJECT_FIELDS
    assert list(demo.json("/api/v2/version/14/")) == VERSION_FIELDS
    assert list(demo.json("/api/v2/version/14/")["project"]) == PROJECT_FIELDS
    build = demo.json("/api/v2/build/101/")
    assert list(build) == BUILD_FIELDS
    assert build["commands"] and all(list(c) == COMMAND_FIELDS for c in build["commands"])
    for listing, fields in (("project", PROJECT_FIELDS), ("version", VERSION_FIELDS), ("build", BUILD_FIELDS)):
        body = demo.json(f"/api/v2/{listing}/?limit=3")
        assert list(body) == ["count", "next", "previous", "results"]
        assert all(list(item) == fields for item in body["results"])


def sorted_everywhere(node, where: str = "") -> None:
    if isinstance(node, dict):
        assert list(node) == sorted(node), where
        for key, value in node.items():
            sorted_everywhere(value, f"{where}.{key}")
    elif isinstance(node, list):
        for value in node:
            sorted_everywhere(value, where)


@pytest.mark.parametrize("path", [
    "/api/v1/", "/api/v1/project/", "/api/v1/project/pip/", "/api/v1/project/1", "/api/v1/version/?limit=5", "/api/v1/version/14/",
    "/api/v1/version/pip/", "/api/v1/build/?limit=5", "/api/v1/build/101/", "/api/v1/file/?limit=5", "/api/v1/file/5003/",
    "/api/v1/user/", "/api/v1/user/davidism/", "/api/v1/file/search/?q=install", "/api/v1/file/anchor/?q=install",
    *(f"/api/v1/{r}/schema/" for r in ("build", "file", "project", "user", "version")),
])
def test_v1_keys_are_sorted_everywhere(demo, path):
    body = demo.json(path)
    sorted_everywhere(body, path)
    # and in the compressed variant too (it is the same body)
    assert demo.get(path, headers={"Accept-Encoding": "gzip"}).status == 200


def test_projects_paged_by_number_as_the_original_did(tmp_path_factory):
    import msgspec

    from docsrv.snapshot.records import Manifest
    from docsrv.snapshot.write import write_manifest

    snapshot = tmp_path_factory.mktemp("paged") / "snap"
    assert docsrv("snapshot", "synth", "--scale", "small", "--seed", "5", "--out", str(snapshot)).returncode == 0
    # A thousand projects to page through; their pages (and the index a server builds of them) are not what is paged.
    (snapshot / "pages.jsonl").write_bytes(b"")
    manifest = msgspec.json.decode((snapshot / "manifest.json").read_bytes(), type=Manifest)
    write_manifest(snapshot, msgspec.structs.replace(manifest, counts={**manifest.counts, "pages": 0}))
    server = Server(["--snapshot", str(snapshot), "--workers", "1"])
    try:
        everything = server.json("/api/v2/project/?limit=1000")
        slugs = [p["slug"] for p in everything["results"]]
        count = everything["count"]
        pages = -(-count // 100)
        walked, link = [], "/api/v2/project/?page=1&limit=3&offset=7"  # limit and offset mean nothing beside page
        while link:
            body = server.json(link)
            assert body["count"] == count and len(body["results"]) <= 100
            walked += [p["slug"] for p in body["results"]]
            last_link = link
            link = body["next"] and body["next"].split(str(server.port), 1)[1]
        assert walked == slugs
        assert last_link.endswith(f"page={pages}")
        back, link = [], last_link
        while "page=" in link:
            body = server.json(link)
            back.append([p["slug"] for p in body["results"]])
            link = body["previous"].split(str(server.port), 1)[1]
        assert link == "/api/v2/project/"  # page 1: previous drops the parameter (DECISIONS.md section 2)
        back.append([p["slug"] for p in server.json("/api/v2/project/?page=1")["results"]])
        assert [slug for page in reversed(back) for slug in page] == slugs
        second = server.json("/api/v2/project/?page=2")
        assert second["previous"] == f"{server.base}/api/v2/project/"  # page 1 drops the parameter
        assert second["next"] == f"{server.base}/api/v2/project/?page=3"
        for bad in ("0", "-1", "x", "1.5", str(pages + 1), ""):
            response = server.get(f"/api/v2/project/?page={bad}")
            assert response.status == 404 and response.json() == {"detail": "Invalid page."}, bad
        assert server.json("/api/v2/project/?slug=no-such-project&page=1") == {"count": 0, "next": None, "previous": None, "results": []}
        assert server.get("/api/v2/project/?slug=no-such-project&page=2").status == 404
    finally:
        server.stop()
