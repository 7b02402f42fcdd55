"""v2 builds: most recent first, the project__slug and commit filters, detail with commands."""

from expected import BUILD_FIELDS, COMMAND_FIELDS


def test_build_list_is_most_recent_first(demo, public):
    body = demo.json("/api/v2/build/?limit=1000")
    expected = public.builds_in_order()
    assert body["count"] == len(expected)
    assert [b["id"] for b in body["results"]] == [b["id"] for b in expected]
    assert body["results"][:5] == [public.build(b) for b in expected[:5]]


def test_build_detail_fields_and_commands(demo, public):
    for build in public.builds.values():
        body = demo.json(f"/api/v2/build/{build['id']}/")
        assert list(body) == BUILD_FIELDS
        assert body == public.build(build)
        for command in body["commands"]:
            assert list(command) == COMMAND_FIELDS
            assert type(command["run_time"]) is int
        assert body["date"].endswith("Z")


def test_build_filters(demo, public):
    body = demo.json("/api/v2/build/?project__slug=pip&limit=1000")
    expected = public.builds_in_order(lambda b: b["project"] == 1)
    assert [b["id"] for b in body["results"]] == [b["id"] for b in expected]
    commit = expected[0]["commit"]
    assert [b["id"] for b in demo.json(f"/api/v2/build/?commit={commit}")["results"]] == [expected[0]["id"]]
    assert demo.json(f"/api/v2/build/?commit={commit}&project__slug=pip")["count"] == 1
    assert demo.json(f"/api/v2/build/?commit={commit}&project__slug=flask")["count"] == 0
    assert demo.json("/api/v2/build/?project__slug=nothing")["count"] == 0


def test_builds_under_private_projects_and_versions_are_nowhere(demo, public):
    assert public.private_builds
    listing = demo.json("/api/v2/build/?limit=1000")["results"]
    shown = {b["id"] for b in listing}
    for build in public.private_builds:
        assert build["id"] not in shown
        assert demo.get(f"/api/v2/build/{build['id']}/").status == 404
        assert demo.json(f"/api/v2/build/?commit={build['commit']}")["count"] == 0


def test_state_values_are_the_v2_ones(demo):
    listing = demo.json("/api/v2/build/?limit=1000")["results"]
    assert {b["state"] for b in listing} <= {"triggered", "building", "installing", "cloning", "finished"}
    assert {b["type"] for b in listing} <= {"html", "pdf", "epub"}
    assert len({b["state"] for b in listing}) > 1
