"""Handlers called directly with a request value (``ApiRequest``), no server and no aiohttp: what
each reads of a request is its path parameters, its canonical query, its links' base and whether
its client has gone."""

import orjson
import pytest

from docsrv.api import docsearch, v1, v2
from docsrv.api.admission import CLIENT_GONE
from docsrv.api.errors import ApiError
from docsrv.api.request import ApiRequest


@pytest.fixture(scope="module")
def state(demo_state):
    return demo_state


async def test_list_links_start_with_the_base_and_keep_the_canonical_query(state, public):
    request = ApiRequest.of("/api/v2/version/?active=true&limit=2", base="https://replica.example")
    reply = await v2.version_list(request, state)
    assert reply.status == 200
    body = orjson.loads(reply.body)
    expected = public.versions_in_order(lambda v: v.get("active", True))
    assert [v["id"] for v in body["results"]] == [v["id"] for v in expected[:2]]
    assert body["count"] == len(expected)
    assert body["next"] == "https://replica.example/api/v2/version/?active=true&limit=2&offset=2"
    assert body["previous"] is None


async def test_v1_links_are_paths_whatever_the_base(state):
    reply = await v1.project_list(ApiRequest.of("/api/v1/project/?limit=1&offset=1", base="https://replica.example"), state)
    meta = orjson.loads(reply.body)["meta"]
    assert meta["next"] == "/api/v1/project/?limit=1&offset=2"
    assert meta["previous"] == "/api/v1/project/?limit=1"


@pytest.mark.parametrize(
    ("handler", "body"),
    [(v2.project_detail, {"detail": "Not found."}), (v2.build_detail, {"detail": "Not found."}),
     (v1.project_detail, {"error": "Not found."}), (v1.build_detail, {"error": "Not found."})],
)
@pytest.mark.parametrize("ident", ["999999", "0", "-1", "x1"])
async def test_an_id_that_names_nothing_is_404_in_each_api_s_words(state, handler, body, ident):
    if handler is v1.project_detail and ident == "x1":
        ident = "no-such-project"  # v1 takes a slug there
    with pytest.raises(ApiError) as raised:
        await handler(ApiRequest.of("/", params={"id": ident}), state)
    assert (raised.value.status, raised.value.body) == (404, body)


async def test_a_detail_reads_its_id_from_the_path_parameters(state, public):
    project = public.projects_by_slug()[0]
    reply = await v2.project_detail(ApiRequest.of("/", params={"id": str(project["id"])}), state)
    assert orjson.loads(reply.body)["slug"] == project["slug"]
    assert reply.headers["ETag"].startswith('"')


async def test_a_search_whose_client_has_gone_is_not_run(state):
    target = "/api/v2/docsearch/?project=requests&version=latest&q=session"
    with pytest.raises(ApiError) as raised:
        await docsearch.docsearch(ApiRequest.of(target, gone=lambda: True), state)
    assert raised.value.status == CLIENT_GONE
    assert state.searches.counts["dropped"] == 1 and state.searches.counts["run"] == 0
    reply = await docsearch.docsearch(ApiRequest.of(target), state)
    assert reply.status == 200 and state.searches.counts["run"] == 1
