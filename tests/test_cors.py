"""CORS as DECISIONS.md section 5 rules it: a docs origin is echoed with credentials (the
original's in-page search sends its request with credentials, and a browser refuses ``*`` to
such a request); every other request gets ``*``; every reply varies by Origin."""

from urllib.parse import urlsplit

import pytest

from docsrv.http.cors import MAX_ORIGINS, PREFLIGHT_HEADERS, Cors

TRUSTED = {"Access-Control-Allow-Credentials": "true"}
ANYONE = {"Access-Control-Allow-Origin": "*"}


@pytest.mark.parametrize(("origin", "echoed"), [
    ("https://docs.example.org", True),  # the docs host
    ("http://docs.example.org", True),
    ("https://pip.docs.example.org", True),  # a subdomain: the original's project subdomains
    ("https://a.b.docs.example.org", True),
    ("https://docs.example.org:8443", True),  # any port
    ("http://Docs.Example.ORG:80", True),
    ("https://evil.example", False),  # another host
    ("https://docs.example.org.evil.example", False),
    ("https://evildocs.example.org", False),
    ("https://example.org", False),
    ("null", False),  # a sandboxed frame, a file:// page
    ("ftp://docs.example.org", False),  # a docs host under another scheme
    ("chrome-extension://docs.example.org", False),
    ("https://docs.example.org/", False),  # not an origin as browsers send it
    ("https://docs.example.org\r\nX-Injected: 1", False),
    ("", False),
])
def test_the_rule_for_each_kind_of_origin(origin, echoed):
    headers = Cors("docs.example.org").headers(origin)
    assert headers == ({"Access-Control-Allow-Origin": origin, **TRUSTED} if echoed else ANYONE)


def test_no_origin_at_all_is_answered_for_anyone():
    assert Cors("docs.example.org").headers(None) == ANYONE
    assert Cors("docs.example.org").wire(None) == b"Access-Control-Allow-Origin: *\r\n"


def test_a_docs_host_with_a_port_in_the_public_url_matches_on_its_host():
    cors = Cors("127.0.0.1:8123")
    assert cors.trusted("http://127.0.0.1:9999") and not cors.trusted("http://localhost:8123")


def test_the_lane_s_bytes_are_the_dispatcher_s_headers():
    cors = Cors("docs.example.org")
    assert cors.wire(b"https://pip.docs.example.org ") == (
        b"Access-Control-Allow-Origin: https://pip.docs.example.org\r\nAccess-Control-Allow-Credentials: true\r\n")
    assert cors.wire(b"https://evil.example") == b"Access-Control-Allow-Origin: *\r\n"


def test_a_flood_of_made_up_origins_keeps_a_bounded_table():
    cors = Cors("docs.example.org")
    for n in range(5 * MAX_ORIGINS):
        cors.headers(f"https://p{n}.docs.example.org")
        cors.wire(f"https://x{n}.example".encode())
    assert len(cors._headers) <= MAX_ORIGINS and len(cors._wire) <= MAX_ORIGINS
    assert cors.headers("https://docs.example.org") == {"Access-Control-Allow-Origin": "https://docs.example.org", **TRUSTED}


def test_a_credentialed_preflight_names_the_headers_it_allows():
    cors = Cors("docs.example.org")
    assert cors.preflight("https://docs.example.org") == {
        "Access-Control-Allow-Origin": "https://docs.example.org", **TRUSTED, "Access-Control-Allow-Headers": PREFLIGHT_HEADERS}
    assert cors.preflight("https://evil.example") == ANYONE


PATHS = ["/api/v2/docsearch/?project=pip&version=stable&q=install", "/api/v2/project/1/", "/api/v1/project/pip/",
         "/api/v2/project/999/", "/api/v2/project/?limit=x", "/nowhere", "/api/v2/footer_html/?project=pip", "/openapi.json"]


@pytest.mark.parametrize("path", PATHS)
def test_every_reply_of_the_server_follows_the_rule_and_varies_by_origin(demo, path):
    canonical = demo.json("/api/v2/project/1/")["canonical_url"]
    project_origin = "{0.scheme}://{0.netloc}".format(urlsplit(canonical))
    for _ in range(2):  # made, then from the reply cache (and the fast lane)
        for origin in ("https://docs.example.org", "http://pip.docs.example.org:8000", project_origin):
            response = demo.get(path, headers={"Origin": origin})
            assert response.headers["Access-Control-Allow-Origin"] == origin, (path, origin)
            assert response.headers["Access-Control-Allow-Credentials"] == "true"
            assert "Origin" in response.headers["Vary"].split(", ")
        for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {}):
            response = demo.get(path, headers=headers)
            assert response.headers["Access-Control-Allow-Origin"] == "*" and "Access-Control-Allow-Credentials" not in response.headers
            assert "Origin" in response.headers["Vary"].split(", ")


def test_a_revalidation_and_a_preflight_follow_the_rule(demo):
    etag = demo.get("/api/v2/project/2/").headers["ETag"]
    for _ in range(2):
        response = demo.get("/api/v2/project/2/", headers={"Origin": "https://docs.example.org", "If-None-Match": etag})
        assert response.status == 304
        assert response.headers["Access-Control-Allow-Origin"] == "https://docs.example.org"
        assert response.headers["Access-Control-Allow-Credentials"] == "true"
    preflight = demo.request("/api/v2/docsearch/", method="OPTIONS", headers={
        "Origin": "https://pip.docs.example.org", "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "x-requested-with"})
    assert preflight.status == 204 and preflight.headers["Vary"] == "Origin"
    assert preflight.headers["Access-Control-Allow-Origin"] == "https://pip.docs.example.org"
    assert preflight.headers["Access-Control-Allow-Credentials"] == "true"
    assert "x-requested-with" in preflight.headers["Access-Control-Allow-Headers"].split(", ")
    other = demo.request("/api/v2/docsearch/", method="OPTIONS", headers={"Origin": "https://evil.example"})
    assert other.headers["Access-Control-Allow-Origin"] == "*" and other.headers["Access-Control-Allow-Headers"] == "*"
    assert "Access-Control-Allow-Credentials" not in other.headers
