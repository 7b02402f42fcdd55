"""v2 projects: list, detail, slug filter and active_versions, against the spec's field table."""

from expected import PROJECT_FIELDS, VERSION_FIELDS


def test_project_list_is_the_first_page_by_slug(demo, public):
    body = demo.json("/api/v2/project/")
    assert list(body) == ["count", "next", "previous", "results"]
    ordered = public.projects_by_slug()
    assert body["count"] == len(ordered) == 12
    assert body["previous"] is None
    assert body["next"] == f"{demo.base}/api/v2/project/?limit=10&offset=10"
    assert body["results"] == [public.project(p) for p in ordered[:10]]


def test_project_fields_order_and_types(demo, public):
    for project in public.projects.values():
        body = demo.json(f"/api/v2/project/{project['id']}/")
        assert list(body) == PROJECT_FIELDS
        assert body == public.project(project)
        for name in ("id",):
            assert type(body[name]) is int
        for name in [*PROJECT_FIELDS[1:11], "canonical_url"]:
            assert type(body[name]) is str, name
        assert all(type(u) is int for u in body["users"])


def test_slug_filter_is_exact(demo, public):
    body = demo.json("/api/v2/project/?slug=pip")
    assert body["count"] == 1
    assert body["results"] == [public.project(public.projects[1])]
    assert demo.json("/api/v2/project/?slug=PIP")["count"] == 0
    assert demo.json("/api/v2/project/?slug=pi")["count"] == 0
    empty = demo.json("/api/v2/project/?slug=no-such-project")
    assert empty == {"count": 0, "next": None, "previous": None, "results": []}


def test_private_project_is_nowhere(demo, public):
    (private,) = public.private_projects
    assert demo.get(f"/api/v2/project/{private['id']}/").status == 404
    assert demo.get(f"/api/v2/project/{private['id']}/active_versions/").status == 404
    assert demo.json(f"/api/v2/project/?slug={private['slug']}")["count"] == 0
    listing = demo.json("/api/v2/project/?limit=1000")
    assert private["slug"] not in {p["slug"] for p in listing["results"]}


def test_active_versions_are_active_public_and_in_list_order(demo, public):
    for project in public.projects.values():
        body = demo.json(f"/api/v2/project/{project['id']}/active_versions/")
        assert list(body) == ["versions"]
        expected = public.versions_in_order(lambda v, project=project: v["project"] == project["id"] and v.get("active", True))
        assert body["versions"] == [public.version(v) for v in expected]
        for version in body["versions"]:
            assert list(version) == VERSION_FIELDS


def test_active_versions_leave_out_a_private_version(demo, public):
    (private,) = [v for v in public.private_versions if v["project"] in public.projects]
    body = demo.json(f"/api/v2/project/{private['project']}/active_versions/")
    assert private["id"] not in {v["id"] for v in body["versions"]}
    assert private["slug"] not in demo.get(f"/api/v2/project/{private['project']}/active_versions/").body.decode()


def test_unknown_and_malformed_project_ids_are_404(demo):
    for path in ("/api/v2/project/999/", "/api/v2/project/0/", "/api/v2/project/-1/", "/api/v2/project/abc/",
                 "/api/v2/project/1.0/", "/api/v2/project/99999999999999999999999/", "/api/v2/project/999/active_versions/"):
        response = demo.get(path)
        assert response.status == 404, path
        assert response.json() == {"detail": "Not found."}
