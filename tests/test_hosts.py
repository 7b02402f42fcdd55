"""The Host header: only allowed hosts are answered when links are built from it, and no Host
can put a foreign name into a cached body (DECISIONS.md section 1; as Django's ALLOWED_HOSTS)."""

import json

import pytest

from docsrv.http.hosts import AllowedHosts, default_allowed_hosts, host_name
from helpers import raw_request


@pytest.mark.parametrize(("header", "name"), [
    ("example.org", "example.org"), ("Example.ORG:8080", "example.org"), ("[::1]:8000", "[::1]"), ("[::1]", "[::1]"),
    ("127.0.0.1:80", "127.0.0.1"), ("host:notaport", "host:notaport"),
])
def test_host_name_drops_the_port_and_case(header, name):
    assert host_name(header) == name


def test_allowed_hosts_match_names_domains_and_wildcard():
    allowed = AllowedHosts(["api.example.org", ".docs.example.net", "::1"])
    assert "api.example.org:443" in allowed and "API.example.org" in allowed
    assert "docs.example.net" in allowed and "eu.docs.example.net:8000" in allowed
    assert "[::1]:8000" in allowed
    for refused in ("evil.example", "example.org", "xdocs.example.net", "api.example.org.evil.example", "", None):
        assert refused not in allowed
    assert "anything.example" in AllowedHosts(["*"])


def test_default_allowed_hosts_are_the_listening_address_and_loopback():
    assert default_allowed_hosts("10.1.2.3") == ("10.1.2.3", "localhost", "127.0.0.1", "[::1]")
    assert default_allowed_hosts("0.0.0.0") == ("localhost", "127.0.0.1", "[::1]")
    assert default_allowed_hosts("::1") == ("[::1]", "localhost", "127.0.0.1")


def test_a_host_not_allowed_is_refused_and_never_cached(demo):
    good = demo.get("/api/v2/project/?limit=5")
    assert good.status == 200 and good.json()["next"].startswith(demo.base)
    for _ in range(2):  # the second time too: nothing of the first went into the cache
        response = demo.get("/api/v2/project/?limit=5", headers={"Host": "evil.example"})
        assert response.status == 400
        assert response.json() == {"detail": "Invalid Host header."}
        assert response.headers["Cache-Control"] == "no-cache"
    assert demo.get("/api/v2/project/1/", headers={"Host": "evil.example:80"}).status == 400
    # Probes and metrics are called by address, whatever the Host.
    for path in ("/healthz", "/readyz", "/metrics"):
        assert demo.get(path, headers={"Host": "10.0.0.7:8000"}).status == 200
    assert demo.get("/api/v2/project/?limit=5").body == good.body


def test_links_follow_an_allowed_host_header(start_server):
    server = start_server("--allowed-host", ".example.com", "--allowed-host", "127.0.0.1")
    response = server.get("/api/v2/project/?limit=5", headers={"Host": "Replica.Example.com:8080"})
    assert response.json()["next"] == "http://replica.example.com:8080/api/v2/project/?limit=5&offset=5"
    assert server.json("/api/v2/project/?limit=5")["next"].startswith(server.base)
    assert server.get("/api/v2/project/?limit=5", headers={"Host": "localhost"}).status == 400


def test_with_a_public_url_host_is_never_used(start_server):
    server = start_server("--public-url", "https://api.example.net")
    response = server.get("/api/v2/project/?limit=5", headers={"Host": "evil.example"})
    assert response.status == 200
    assert response.json()["next"] == "https://api.example.net/api/v2/project/?limit=5&offset=5"


@pytest.mark.parametrize("lane", [True, False])
def test_an_absolute_form_target_is_answered_with_the_host_header_s_host(start_server, lane):
    """``GET http://allowed/...`` with a foreign Host once put that Host into cached links (issue
    28): the allowlist, the cache key and the links now all read the Host header."""
    server = start_server("--allowed-host", "api.example.org", *(() if lane else ("--no-fast-path",)))
    target = "http://api.example.org/api/v2/version/?limit=3"
    for _ in range(2):  # the second time through the reply cache, and the lane when it is on
        poisoned = raw_request(server.port, f"GET {target} HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".encode())
        assert poisoned is not None and poisoned[0] == 400 and json.loads(poisoned[2]) == {"detail": "Invalid Host header."}
    for _ in range(2):
        answered = server.get("/api/v2/version/?limit=3", headers={"Host": "api.example.org"})
        assert answered.status == 200 and answered.json()["next"].startswith("http://api.example.org/api/v2/version/?")
    # Absolute-form with an allowed Host header: the path's reply, links from the Host header.
    other = raw_request(server.port, b"GET http://elsewhere.example/api/v2/version/?limit=3 HTTP/1.1\r\n"
                                     b"Host: api.example.org\r\nConnection: close\r\n\r\n")
    assert other is not None and other[0] == 200
    assert json.loads(other[2]) == server.get("/api/v2/version/?limit=3", headers={"Host": "api.example.org"}).json()
