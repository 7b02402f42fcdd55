"""The deprecated v1 API: envelope, shapes, lookups, filters, schemas, errors and privacy."""

import pytest
import slumber

from expected import PUBLIC_URL, parse

# Keys sorted, as the original's v1 serializer wrote them (DECISIONS.md section 4).
V1_PROJECT_FIELDS = sorted([
    "id", "name", "slug", "description", "absolute_url", "analytics_code", "copyright", "crate_url",
    "framework_packages_url", "default_branch", "default_version", "documentation_type", "modified_date", "pub_date",
    "project_url", "repo", "repo_type", "requirements_file", "resource_uri", "subdomain", "suffix", "theme",
    "use_virtualenv", "users", "version",
])
V1_VERSION_FIELDS = sorted(["id", "slug", "verbose_name", "identifier", "active", "built", "uploaded", "project", "resource_uri"])
V1_BUILD_FIELDS = sorted(["id", "date", "state", "success", "type", "error", "output", "setup", "setup_error", "project", "version", "resource_uri"])
V1_FILE_FIELDS = sorted(["id", "name", "path", "absolute_url", "project", "resource_uri"])
FOLD = {"triggered": "triggered", "building": "building", "installing": "building", "cloning": "building", "finished": "finished"}


def v1_project(raw_project):
    slug = raw_project["slug"]
    return {
        "id": str(raw_project["id"]),
        "name": raw_project["name"],
        "slug": slug,
        "description": raw_project.get("description", ""),
        "absolute_url": f"{PUBLIC_URL}/projects/{slug}/",
        "analytics_code": raw_project.get("analytics_code", ""),
        "copyright": raw_project.get("copyright", ""),
        "crate_url": raw_project.get("crate_url", ""),
        "framework_packages_url": raw_project.get("framework_packages_url", ""),
        "default_branch": raw_project.get("default_branch", "main"),
        "default_version": raw_project.get("default_version", "latest"),
        "documentation_type": raw_project.get("documentation_type", "generator"),
        "modified_date": raw_project["modified_date"],
        "pub_date": raw_project["pub_date"],
        "project_url": raw_project.get("project_url", ""),
        "repo": raw_project.get("repo", ""),
        "repo_type": raw_project.get("repo_type", "git"),
        "requirements_file": raw_project.get("requirements_file", ""),
        "resource_uri": f"/api/v1/project/{raw_project['id']}/",
        "subdomain": f"https://{slug}.docs.example.org/",
        "suffix": raw_project.get("suffix", ".rst"),
        "theme": raw_project.get("theme", "default"),
        "use_virtualenv": raw_project.get("use_virtualenv", False),
        "users": [f"/api/v1/user/{u}/" for u in raw_project.get("users", [])],
        "version": raw_project.get("version", ""),
    }


def test_root_lists_every_resource(demo):
    assert demo.json("/api/v1/") == {
        name: {"list_endpoint": f"/api/v1/{name}/", "schema": f"/api/v1/{name}/schema/"}
        for name in ("build", "file", "project", "user", "version")
    }


def test_project_list_envelope_and_shapes(demo, public):
    body = demo.json("/api/v1/project/")
    assert list(body) == ["meta", "objects"]
    assert body["meta"] == {"limit": 20, "next": None, "offset": 0, "previous": None, "total_count": len(public.projects)}
    assert body["objects"] == [v1_project(p) for p in public.projects_by_slug()]
    for project in body["objects"]:
        assert list(project) == V1_PROJECT_FIELDS
        assert type(project["id"]) is str and type(project["use_virtualenv"]) is bool


def test_envelope_both_ways(demo, public):
    first = demo.json("/api/v1/version/?limit=5&format=json")
    assert first["meta"]["next"] == "/api/v1/version/?format=json&limit=5&offset=5"
    assert first["meta"]["previous"] is None
    second = demo.json(first["meta"]["next"])
    assert second["meta"]["offset"] == 5 and second["meta"]["previous"] == "/api/v1/version/?format=json&limit=5"
    assert demo.json(second["meta"]["previous"]) == first
    everything = demo.json("/api/v1/version/?limit=0")
    assert everything["meta"]["limit"] == 1000
    assert everything["meta"]["total_count"] == len(public.versions) == len(everything["objects"])


@pytest.mark.parametrize("path", ["/api/v1/project/1/", "/api/v1/project/1", "/api/v1/project/pip/", "/api/v1/project/pip"])
def test_project_detail_by_id_or_slug_with_or_without_slash(demo, raw, path):
    assert demo.json(path) == v1_project(raw["projects"][1])


@pytest.mark.parametrize("path", ["/api/v1/version/14/", "/api/v1/version/14"])
def test_version_detail_embeds_the_whole_project(demo, raw, path):
    body = demo.json(path)
    version = raw["versions"][14]
    assert list(body) == V1_VERSION_FIELDS
    assert body == {
        "id": "14",
        "slug": version["slug"],
        "verbose_name": version["verbose_name"],
        "identifier": version["identifier"],
        "active": version["active"],
        "built": version["built"],
        "uploaded": version["uploaded"],
        "project": v1_project(raw["projects"][version["project"]]),
        "resource_uri": "/api/v1/version/14/",
    }


def test_version_path_with_a_project_slug_lists_that_projects_versions(demo, public):
    body = demo.json("/api/v1/version/pip/?limit=100")
    expected = public.versions_in_order(lambda v: v["project"] == 1)
    assert [v["id"] for v in body["objects"]] == [str(v["id"]) for v in expected]
    assert demo.json("/api/v1/version/no-such-project/")["meta"]["total_count"] == 0


def test_build_shape_and_folded_states(demo, public):
    body = demo.json("/api/v1/build/?limit=1000")
    expected = public.builds_in_order()
    assert [b["id"] for b in body["objects"]] == [str(b["id"]) for b in expected]
    for build, raw_build in zip(body["objects"], expected, strict=True):
        assert list(build) == V1_BUILD_FIELDS
        assert build["state"] == FOLD[raw_build["state"]]
        assert build["project"] == f"/api/v1/project/{raw_build['project']}/"
        assert build["version"] == f"/api/v1/version/{raw_build['version']}/"
        assert parse(build["date"]) == parse(raw_build["date"]) and build["date"].endswith("Z")
    assert {b["state"] for b in body["objects"]} <= {"triggered", "building", "finished"}
    assert {b["state"] for b in expected} & {"installing", "cloning"}, "the demo should exercise the folding"


def test_file_shape(demo, raw):
    body = demo.json("/api/v1/file/5003/")
    page = raw["pages"][5003]
    assert list(body) == V1_FILE_FIELDS
    assert body["name"] == "pip_install.html" and body["path"] == "cli/pip_install.html"
    assert body["absolute_url"] == f"{PUBLIC_URL}/projects/pip/en/latest/cli/pip_install.html"
    assert body["project"] == v1_project(raw["projects"][page["project"]])


def test_users_show_only_id_username_and_uri(demo, raw):
    body = demo.json("/api/v1/user/?limit=100")
    assert body["objects"] == [
        {"id": str(u["id"]), "username": u["username"], "resource_uri": f"/api/v1/user/{u['id']}/"}
        for u in sorted(raw["users"].values(), key=lambda u: u["id"])
    ]
    assert demo.json("/api/v1/user/eric/") == demo.json("/api/v1/user/1/")
    for user in raw["users"].values():
        for secret in (user["email"], user["last_name"]):
            assert secret not in demo.get("/api/v1/user/?limit=100").body.decode()


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("project/?slug=flask", 1),
        ("project/?users=5", 2),
        ("project/?users=5&slug=click", 1),
        ("project/?users=5&slug=pip", 0),
        ("version/?project=2", 7),
        ("version/?project__slug=requests&active=false", 1),
        ("version/?slug=latest", 10),
        ("version/?slug=latest&project__slug=pip", 1),
        ("version/?project=2&project__slug=pip", 0),
        ("build/?project__slug=pip", None),
        ("user/?username=hynek", 1),
        ("user/?username=nobody", 0),
    ],
)
def test_filters(demo, public, query, count):
    body = demo.json(f"/api/v1/{query}")
    if count is None:
        count = len([b for b in public.builds.values() if b["project"] == 1])
    assert body["meta"]["total_count"] == count


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("project/?name=pip", "The 'name' field does not allow filtering."),
        ("project/?slug__icontains=pi", "'icontains' is not an allowed filter on the 'slug' field."),
        ("build/?success=true", "The 'success' field does not allow filtering."),
        ("version/?active=maybe", "Invalid 'active': Must be true or false."),
        ("project/?users=abc", "Invalid 'users': 'abc' is not an id."),
        ("version/?project=x", "Invalid 'project': 'x' is not an id."),
        ("project/?limit=-1", "Invalid 'limit': A positive integer is required."),
        ("project/?offset=abc", "Invalid 'offset': A non-negative integer is required."),
        ("project/?format=xml", "The format 'xml' is not served; use format=json or leave it out."),
        ("project/pip/?format=yaml", "The format 'yaml' is not served; use format=json or leave it out."),
    ],
)
def test_errors_are_400_with_an_error_key(demo, query, message):
    response = demo.get(f"/api/v1/{query}")
    assert response.status == 400
    assert response.json() == {"error": message}


@pytest.mark.parametrize("path", ["project/13/", "project/acme-handbook/", "project/999", "version/999/", "build/1/", "file/1/", "user/nobody/", "user/0/"])
def test_missing_objects_are_404_with_an_error_key(demo, path):
    response = demo.get(f"/api/v1/{path}")
    assert response.status == 404
    assert response.json() == {"error": "Not found."}


def test_private_records_are_in_no_v1_list_count_or_detail(demo, public):
    lists = {name: demo.json(f"/api/v1/{name}/?limit=0") for name in ("project", "version", "build", "file")}
    assert lists["project"]["meta"]["total_count"] == len(public.projects)
    assert lists["version"]["meta"]["total_count"] == len(public.versions)
    assert lists["build"]["meta"]["total_count"] == len(public.builds)
    text = "".join(demo.get(f"/api/v1/{n}/?limit=0").body.decode() for n in lists)
    for project in public.private_projects:
        assert project["slug"] not in text
        assert demo.get(f"/api/v1/version/{project['slug']}/").json()["meta"]["total_count"] == 0
    for version in public.private_versions:
        assert demo.get(f"/api/v1/version/{version['id']}/").status == 404
    for build in public.private_builds:
        assert demo.get(f"/api/v1/build/{build['id']}/").status == 404
    assert "Embargoed" not in text and "Secret escalation" not in text


@pytest.mark.parametrize("name", ["build", "file", "project", "user", "version"])
def test_schemas_describe_exactly_the_rendered_fields(demo, name):
    schema = demo.json(f"/api/v1/{name}/schema/")
    assert schema["allowed_detail_http_methods"] == ["get"] and schema["allowed_list_http_methods"] == ["get"]
    assert schema["default_format"] == "application/json" and schema["default_limit"] == 20
    obj = demo.json(f"/api/v1/{name}/?limit=1")["objects"][0]
    assert list(schema["fields"]) == list(obj)
    for field, described in schema["fields"].items():
        assert set(described) >= {"type", "nullable", "readonly", "unique", "blank", "default", "help_text"}
        assert described["help_text"]
        python = {"string": str, "boolean": bool, "datetime": str, "related": (str, list, dict)}[described["type"]]
        assert isinstance(obj[field], python), field


def test_schema_filtering_matches_what_filters_accept(demo):
    assert demo.json("/api/v1/project/schema/")["filtering"] == {"slug": ["exact"], "users": ["exact"]}
    assert demo.json("/api/v1/user/schema/")["filtering"] == {"username": ["exact"]}
    assert demo.json("/api/v1/version/schema/")["filtering"] == {"project": ["exact", "slug"], "slug": ["exact"], "active": ["exact"]}


def test_the_slumber_client_of_the_original_documentation(demo, raw):
    api = slumber.API(f"{demo.base}/api/v1/")
    projects = api.project.get(slug="pip")
    assert projects["meta"]["total_count"] == 1 and projects["objects"][0]["name"] == "pip"
    assert api.project("pip").get() == v1_project(raw["projects"][1])
    assert api.user.get(username="davidism")["objects"] == [{"id": "5", "username": "davidism", "resource_uri": "/api/v1/user/5/"}]
    builds = api.build.get(project__slug="attrs")
    assert builds["meta"]["total_count"] == len([b for b in raw["builds"].values() if b["project"] == 5])
    versions = api.version("attrs").get()
    assert {v["project"]["slug"] for v in versions["objects"]} == {"attrs"}
    with pytest.raises(slumber.exceptions.HttpNotFoundError):
        api.project("acme-handbook").get()
