"""The Host header: only allowed hosts are answered when links are built from it, and no Host
can put a foreign name into a cached body (DECISIONS.md section 1; as Django's ALLOWED_HOSTS)."""

import pytest

from docsrv.http.hosts import AllowedHosts, default_allowed_hosts, host_name


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
