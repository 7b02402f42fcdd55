"""What every response shares: JSON bodies, methods, redirects, 404s, validators and CORS."""

import pytest


def test_every_200_carries_validators_purge_keys_and_cors(demo):
    response = demo.get("/api/v2/version/?project__slug=attrs&limit=2")
    assert response.status == 200
    headers = response.headers
    assert headers["Content-Type"] == "application/json"
    assert headers["ETag"].startswith('"') and headers["ETag"].endswith('"')
    assert headers["Last-Modified"] == "Thu, 01 Feb 2024 12:00:00 GMT"
    assert headers["Cache-Control"] == "public, max-age=300, stale-while-revalidate=60, stale-if-error=86400"
    assert headers["Vary"] == "Accept-Encoding, Origin"
    assert headers["Access-Control-Allow-Origin"] == "*" and "Access-Control-Allow-Credentials" not in headers
    assert headers["X-Snapshot"] == "demo"
    slugs = [v["slug"] for v in response.json()["results"]]
    assert headers["Surrogate-Key"].split() == ["v2", "list-v2-version-project-attrs", "project-attrs", *(f"version-attrs-{s}" for s in slugs)]
    assert headers["Cache-Tag"].split(",") == headers["Surrogate-Key"].split()


def test_etag_is_a_hash_of_the_body(demo, start_server):
    first = demo.get("/api/v2/build/101/")
    again = start_server("--snapshot", "snapshots/demo").get("/api/v2/build/101/")
    assert first.body == again.body and first.headers["ETag"] == again.headers["ETag"]
    assert demo.get("/api/v2/build/102/").headers["ETag"] != first.headers["ETag"]


def test_if_none_match_gives_304_with_the_same_validators(demo):
    fresh = demo.get("/api/v2/project/3/")
    etag = fresh.headers["ETag"]
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        response = demo.get("/api/v2/project/3/", headers={"If-None-Match": header})
        assert response.status == 304, header
        assert response.body == b""
        assert response.headers["ETag"] == etag
        assert response.headers["Last-Modified"] == fresh.headers["Last-Modified"]
        assert response.headers["Cache-Control"] == fresh.headers["Cache-Control"]
    assert demo.get("/api/v2/project/3/", headers={"If-None-Match": '"other"'}).status == 200


def test_if_modified_since_and_its_precedence(demo):
    path = "/api/v2/project/3/"
    assert demo.get(path, headers={"If-Modified-Since": "Thu, 01 Feb 2024 12:00:00 GMT"}).status == 304
    assert demo.get(path, headers={"If-Modified-Since": "Fri, 02 Feb 2024 00:00:00 GMT"}).status == 304
    assert demo.get(path, headers={"If-Modified-Since": "Wed, 31 Jan 2024 12:00:00 GMT"}).status == 200
    assert demo.get(path, headers={"If-Modified-Since": "not a date"}).status == 200
    # If-None-Match wins: a mismatching tag means 200 however recent If-Modified-Since is.
    both = {"If-None-Match": '"stale"', "If-Modified-Since": "Fri, 02 Feb 2024 00:00:00 GMT"}
    assert demo.get(path, headers=both).status == 200


def test_head_has_the_headers_of_get_and_no_body(demo):
    get = demo.get("/api/v2/build/?limit=3")
    head = demo.request("/api/v2/build/?limit=3", method="HEAD")
    assert head.status == 200 and head.body == b""
    assert head.headers["Content-Length"] == str(len(get.body))
    assert head.headers["ETag"] == get.headers["ETag"]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_writes_are_405(demo, method):
    response = demo.request("/api/v2/project/", method=method)
    assert response.status == 405
    assert response.headers["Allow"] == "GET, HEAD, OPTIONS"
    assert response.json() == {"detail": f'Method "{method}" not allowed.'}


def test_cors_preflight_is_204(demo):
    response = demo.request(
        "/api/v2/project/",
        method="OPTIONS",
        headers={"Origin": "https://example.com", "Access-Control-Request-Method": "GET"},
    )
    assert response.status == 204 and response.body == b""
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert response.headers["Access-Control-Allow-Methods"] == "GET, HEAD, OPTIONS"


def test_a_path_without_its_slash_redirects_keeping_the_query(demo):
    for path, location in [
        ("/api/v2/project", "/api/v2/project/"),
        ("/api/v2/project/1", "/api/v2/project/1/"),
        ("/api/v2/version?project__slug=pip&limit=2", "/api/v2/version/?project__slug=pip&limit=2"),
        ("/api/v2/project/1/active_versions", "/api/v2/project/1/active_versions/"),
    ]:
        response = demo.get(path)
        assert response.status == 301, path
        assert response.headers["Location"] == location
        assert response.json()["location"] == location


@pytest.mark.parametrize(
    "path",
    ["/", "/api/", "/api/v2/", "/api/v2/search/", "/api/v2/footer_html", "/api/v2/footer_html/",
     "/api/v2/sustainability/", "/api/v3/project/", "/api/v2/projects/", "/nope"],
)
def test_unknown_and_undocumented_paths_are_404(demo, path):
    response = demo.get(path)
    assert response.status == 404
    assert response.json() == {"detail": "Not found."}


def test_unknown_query_parameters_are_ignored(demo):
    plain = demo.get("/api/v2/project/2/")
    assert demo.get("/api/v2/project/2/?utm_source=feed&_=123").body == plain.body


def test_health_and_readiness(demo):
    assert demo.json("/healthz") == {"status": "ok"}
    ready = demo.json("/readyz")
    assert ready["status"] == "ready" and ready["snapshot"] == "demo"
    assert ready["counts"]["projects"] == 12 and ready["reload_failures"] == 0
