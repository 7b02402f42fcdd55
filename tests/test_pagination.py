"""v2 pagination: limit and offset, absolute next/previous links both ways, and their 400s."""

from urllib.parse import parse_qsl, urlsplit

import pytest

from expected import PUBLIC_URL


def path_of(link: str, base: str) -> str:
    assert link.startswith(base + "/"), link
    return link[len(base):]


def test_links_keep_known_parameters_drop_unknown_ones_and_replace_limit_and_offset(demo):
    body = demo.json("/api/v2/version/?project__slug=pip&limit=3&offset=3&utm=x")
    assert body["next"] == f"{demo.base}/api/v2/version/?limit=3&offset=6&project__slug=pip"
    assert body["previous"] == f"{demo.base}/api/v2/version/?limit=3&project__slug=pip"
    # DECISIONS.md section 1: a request with extra parameters answers exactly as the one without.
    assert demo.get("/api/v2/version/?utm=x&project__slug=pip&offset=3&limit=3").body == \
        demo.get("/api/v2/version/?project__slug=pip&limit=3&offset=3").body
    second = demo.json("/api/v2/version/?project__slug=pip&limit=3&offset=7")
    assert dict(parse_qsl(urlsplit(second["previous"]).query)) == {"limit": "3", "offset": "4", "project__slug": "pip"}


@pytest.mark.parametrize("endpoint", ["/api/v2/project/", "/api/v2/version/", "/api/v2/build/"])
def test_walking_next_then_previous_visits_every_item_once(demo, endpoint):
    everything = demo.json(f"{endpoint}?limit=1000")["results"]
    forward, link = [], f"{endpoint}?limit=7"
    while link:
        body = demo.json(link)
        assert body["count"] == len(everything)
        forward.append(body["results"])
        last = link
        link = body["next"] and path_of(body["next"], demo.base)
    assert [item for page in forward for item in page] == everything
    backward, link = [], last
    while link:
        body = demo.json(link)
        backward.append(body["results"])
        link = body["previous"] and path_of(body["previous"], demo.base)
    assert backward == forward[::-1]


def test_default_limit_is_10_and_largest_is_1000(demo, public):
    assert len(demo.json("/api/v2/version/")["results"]) == 10
    body = demo.json("/api/v2/build/?limit=5000")
    assert len(body["results"]) == len(public.builds) and body["next"] is None
    assert "limit=1000" in demo.json("/api/v2/build/?limit=5000&offset=1")["previous"]


def test_offset_past_the_end_is_an_empty_page(demo, public):
    body = demo.json("/api/v2/project/?offset=500")
    assert body["results"] == [] and body["next"] is None and body["count"] == len(public.projects)
    assert body["previous"] == f"{demo.base}/api/v2/project/?limit=10&offset=490"


@pytest.mark.parametrize(
    ("query", "name", "message"),
    [
        ("limit=0", "limit", "A positive integer is required."),
        ("limit=-1", "limit", "A positive integer is required."),
        ("limit=abc", "limit", "A positive integer is required."),
        ("limit=1.5", "limit", "A positive integer is required."),
        ("limit=", "limit", "A positive integer is required."),
        ("limit=%D9%A3", "limit", "A positive integer is required."),
        ("offset=-5", "offset", "A non-negative integer is required."),
        ("offset=x", "offset", "A non-negative integer is required."),
        ("offset=99999999999999999999999999", "offset", "A non-negative integer is required."),
    ],
)
@pytest.mark.parametrize("endpoint", ["/api/v2/project/", "/api/v2/version/", "/api/v2/build/"])
def test_malformed_limit_or_offset_is_400_naming_it(demo, endpoint, query, name, message):
    response = demo.get(f"{endpoint}?{query}")
    assert response.status == 400
    assert response.json() == {name: [message]}


def test_public_url_is_the_base_of_links(start_server):
    server = start_server("--public-url", "https://api.example.net")
    body = server.json("/api/v2/project/?limit=5")
    assert body["next"] == "https://api.example.net/api/v2/project/?limit=5&offset=5"
    assert server.json("/api/v2/project/1/")["canonical_url"].startswith(PUBLIC_URL)
