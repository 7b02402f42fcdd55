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


async def test_builds_sharing_a_commit_are_all_found_in_order(tmp_path):
    """Most commits are one build's (the store keeps one build per commit, and lists only for
    the commits several builds share): three builds of two projects made from one commit."""
    import json

    import orjson

    from docsrv.api import v2
    from docsrv.api.request import ApiRequest
    from docsrv.api.state import ApiState
    from docsrv.config import Settings
    from docsrv.observe.runtime import Runtime
    from docsrv.serve.served import load_served
    from helpers import sealed

    commit = "c0ffee" * 6 + "c0ff"

    def share_a_commit(directory):
        path = directory / "builds.jsonl"
        builds = [json.loads(line) for line in path.read_text().splitlines()]
        for project in (1, 2):
            for build in [b for b in builds if b["project"] == project][: 3 - project]:
                build["commit"] = commit
        path.write_text("".join(json.dumps(b) + "\n" for b in builds))

    served = load_served(sealed(tmp_path / "shared", "shared", edit=share_a_commit), progress=False)
    store = served.store
    sharing = [b.id for b in store.builds_ordered if b.commit == commit]
    assert len(sharing) >= 2 and len({store.builds[i].project for i in sharing}) == 2
    state = ApiState(store, served.search, Settings(), Runtime())
    other = next(p for p in store.projects_ordered if p.id not in {store.builds[i].project for i in sharing})
    for query, expected in ((f"commit={commit}", sharing),
                            (f"commit={commit}&project__slug={store.projects[1].slug}", [i for i in sharing if store.builds[i].project == 1]),
                            (f"commit={commit}&project__slug={other.slug}", [])):
        body = orjson.loads((await v2.build_list(ApiRequest.of(f"/api/v2/build/?{query}&limit=100"), state)).body)
        assert [b["id"] for b in body["results"]] == expected and body["count"] == len(expected)
    one = next(b for b in store.builds_ordered if b.commit != commit)
    assert store.builds_where(commit=one.commit) == [b for b in store.builds_ordered if b.commit == one.commit]
