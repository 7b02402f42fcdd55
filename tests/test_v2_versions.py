"""v2 versions: list order, the project__slug and active filters, detail and downloads."""

import pytest

from expected import VERSION_FIELDS


def test_version_list_order_is_verbose_name_descending_then_id(demo, public):
    body = demo.json("/api/v2/version/?limit=1000")
    expected = public.versions_in_order()
    assert body["count"] == len(expected)
    assert body["results"] == [public.version(v) for v in expected]
    assert body["next"] is None and body["previous"] is None


def test_version_fields_order_and_types(demo, public):
    for version in public.versions.values():
        body = demo.json(f"/api/v2/version/{version['id']}/")
        assert list(body) == VERSION_FIELDS
        assert body == public.version(version)
        assert type(body["active"]) is bool and type(body["built"]) is bool
        assert type(body["project"]) is dict and type(body["downloads"]) is dict


def test_downloads_name_only_existing_formats(demo):
    listing = demo.json("/api/v2/version/?project__slug=pip&limit=100")["results"]
    latest = next(v for v in listing if v["slug"] == "latest")
    assert latest["downloads"] == {
        "pdf": "//docs.example.org/projects/pip/downloads/pdf/latest/",
        "htmlzip": "//docs.example.org/projects/pip/downloads/htmlzip/latest/",
        "epub": "//docs.example.org/projects/pip/downloads/epub/latest/",
    }
    assert any(v["downloads"] == {} for v in listing)


@pytest.mark.parametrize("slug", ["pip", "flask", "requests", "no-such-project"])
def test_project_slug_filter(demo, public, slug):
    body = demo.json(f"/api/v2/version/?project__slug={slug}&limit=1000")
    expected = public.versions_in_order(lambda v: public.projects[v["project"]]["slug"] == slug)
    assert body["count"] == len(expected)
    assert [v["id"] for v in body["results"]] == [v["id"] for v in expected]


@pytest.mark.parametrize(("value", "active"), [("true", True), ("True", True), ("1", True), ("false", False), ("FALSE", False), ("0", False)])
def test_active_filter_takes_true_false_one_zero_in_any_case(demo, public, value, active):
    body = demo.json(f"/api/v2/version/?active={value}&limit=1000")
    expected = public.versions_in_order(lambda v: v.get("active", True) is active)
    assert [v["id"] for v in body["results"]] == [v["id"] for v in expected]
    combined = demo.json(f"/api/v2/version/?active={value}&project__slug=celery&limit=1000")
    expected = [v for v in expected if v["project"] == 6]
    assert [v["id"] for v in combined["results"]] == [v["id"] for v in expected]


@pytest.mark.parametrize("value", ["yes", "", "2", "truee", "%00"])
def test_malformed_active_is_400_naming_it(demo, value):
    response = demo.get(f"/api/v2/version/?active={value}")
    assert response.status == 400
    assert response.json() == {"active": ["Must be true or false."]}


def test_private_version_is_nowhere(demo, public):
    for version in public.private_versions:
        assert demo.get(f"/api/v2/version/{version['id']}/").status == 404
    listing = demo.get("/api/v2/version/?limit=1000").body.decode()
    for version in public.private_versions:
        assert f'"id":{version["id"]},' not in listing
    flask = demo.json("/api/v2/version/?project__slug=flask&limit=1000")
    assert "2.4.0-rc1" not in {v["slug"] for v in flask["results"]}
