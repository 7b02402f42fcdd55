"""``snapshot diff --purge URL --dialect ...``: the keys reach a purge API in its documented request
shape, in batches it takes, with retries; the report is one line. The APIs are played by a real
HTTP server on loopback that records every request and answers as told."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from http.server import BaseHTTPRequestHandler

import pytest
from snapshot_change import realistic_change

from conftest import DEMO
from helpers import docsrv
from hostile_http import LoopbackServer


class Recorder(LoopbackServer):
    """An HTTP server recording (method, path, headers, body) of each request; its answers are
    taken in turn from ``answers`` ((status, headers) pairs), then 200."""

    def __init__(self, answers: list[tuple[int, dict[str, str]]] | None = None) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.answers = list(answers or [])
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                recorder.requests.append((self.command, self.path, dict(self.headers), body))
                status, headers = recorder.answers.pop(0) if recorder.answers else (200, {})
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"status": "ok"}' if status < 300 else b'{"error": "no"}')

            do_POST = do_PURGE = answer

            def log_message(self, *args) -> None:
                pass

        super().__init__(Handler)


@pytest.fixture(scope="module")
def change(tmp_path_factory):
    root = tmp_path_factory.mktemp("delivery")
    old, new = root / "old", root / "new"
    shutil.copytree(DEMO, old, ignore=shutil.ignore_patterns("index"))
    realistic_change(old, new, "demo-changed")
    keys = docsrv("snapshot", "diff", str(old), str(new)).stdout.split()
    assert len(keys) > 256
    return old, new, keys


@pytest.fixture
def recorder():
    made: list[Recorder] = []

    def make(answers=None) -> Recorder:
        made.append(Recorder(answers))
        return made[-1]

    yield make
    for server in made:
        server.close()


def purge(change, url, dialect, env=None):
    old, new, _keys = change
    return docsrv("snapshot", "diff", str(old), str(new), "--purge", url, "--dialect", dialect, env={**os.environ, **(env or {})})


def test_fastly_gets_surrogate_key_batches_of_256_with_its_token(change, recorder):
    api = recorder()
    result = purge(change, api.url + "/service/SU1Z0isxPaozGVKXdv0eY/purge", "fastly", {"FASTLY_API_TOKEN": "tok3n"})
    assert result.returncode == 0, result.stderr
    keys = change[2]
    assert [r[0] for r in api.requests] == ["POST"] * 2
    assert all(r[1] == "/service/SU1Z0isxPaozGVKXdv0eY/purge" and r[2]["Fastly-Key"] == "tok3n" for r in api.requests)
    sent = [r[2]["Surrogate-Key"].split(" ") for r in api.requests]
    assert [len(batch) for batch in sent] == [256, len(keys) - 256]
    assert [key for batch in sent for key in batch] == keys
    report = f"purged {len(keys)} keys in 2 requests (0 retried) to {api.url}/service/SU1Z0isxPaozGVKXdv0eY/purge (fastly) in "
    assert result.stdout.startswith(report) and result.stdout.endswith(" s\n") and result.stdout.count("\n") == 1


def test_cloudflare_gets_json_tags_30_a_request_with_a_bearer_token(change, recorder):
    api = recorder()
    result = purge(change, api.url + "/client/v4/zones/023e105f4ecef8ad9ca31a8372d0c353/purge_cache", "cloudflare",
                   {"CLOUDFLARE_API_TOKEN": "cf-token"})
    assert result.returncode == 0, result.stderr
    keys = change[2]
    assert len(api.requests) == -(-len(keys) // 30)
    for method, _path, headers, body in api.requests:
        assert method == "POST" and headers["Authorization"] == "Bearer cf-token"
        assert headers["Content-Type"] == "application/json" and len(json.loads(body)["tags"]) <= 30
    assert [tag for r in api.requests for tag in json.loads(r[3])["tags"]] == keys


def test_varnish_gets_purge_requests_with_xkey_purge_headers_under_8_kb(change, recorder):
    cache = recorder()
    assert purge(change, cache.url + "/", "varnish-xkey").returncode == 0
    assert all(r[0] == "PURGE" and len(r[2]["xkey-purge"]) <= 7000 for r in cache.requests)
    assert [key for r in cache.requests for key in r[2]["xkey-purge"].split(" ")] == change[2]


def test_a_busy_or_failing_api_is_retried_and_the_batch_goes_through(change, recorder):
    api = recorder([(503, {}), (429, {"Retry-After": "1"})])
    result = purge(change, api.url + "/purge", "fastly", {"FASTLY_API_TOKEN": "tok3n"})
    assert result.returncode == 0, result.stderr
    assert len(api.requests) == 4 and "(2 retried)" in result.stdout


def test_a_refusal_is_final_and_one_line(change, recorder):
    api = recorder([(403, {})])
    result = purge(change, api.url + "/purge", "cloudflare", {"CLOUDFLARE_API_TOKEN": "cf-token"})
    assert result.returncode == 1 and len(api.requests) == 1
    assert result.stderr == 'docsrv: purge failed: batch 1 (30 keys): HTTP 403 {"error": "no"}\n'


def test_an_api_that_never_answers_well_fails_after_every_attempt(change, recorder):
    api = recorder([(502, {})] * 10)
    result = purge(change, api.url + "/purge", "fastly", {"FASTLY_API_TOKEN": "tok3n"})
    assert result.returncode == 1 and len(api.requests) == 4
    assert result.stderr == "docsrv: purge failed: batch 1 (256 keys): HTTP 502 after 4 attempts\n"


def test_an_unreachable_cache_fails_with_one_line(change):
    result = purge(change, "http://127.0.0.1:9/", "varnish-xkey")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("docsrv: purge failed: batch 1 (") and "after 4 attempts" in result.stderr


def peak_rss_mb(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    """Run the command line and measure its peak resident memory (its own process alone)."""
    probe = (
        "import resource, subprocess, sys; "
        "r = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=120); "
        "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)"
    )
    result = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "docsrv", *args],
                            capture_output=True, text=True, timeout=180, env=env)
    *stderr, peak = result.stderr.rstrip("\n").split("\n")
    result.stderr = "".join(line + "\n" for line in stderr)
    return result, int(peak) / 1024


@pytest.mark.parametrize(("dialect", "token_variable", "header"), [
    ("fastly", "FASTLY_API_TOKEN", "Fastly-Key"), ("cloudflare", "CLOUDFLARE_API_TOKEN", "Authorization"),
    ("varnish-xkey", None, None),
])
def test_a_redirect_is_not_followed_and_fails_the_purge_in_one_line(change, hostile, dialect, token_variable, header):
    thief = hostile("echo", 200)
    endpoint = hostile("redirect", thief.url)
    result = purge(change, endpoint.url + "/purge", dialect, {token_variable: "s3cret"} if token_variable else None)
    assert thief.requests == []  # neither the keys nor the token went to the other host
    assert len(endpoint.requests) == 1 and (header is None or "s3cret" in endpoint.requests[0][2][header])
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "s3cret" not in result.stderr
    assert result.stderr.startswith("docsrv: purge failed: batch 1 (") and f"HTTP 307 redirects to {thief.url}/steal" in result.stderr


def test_an_endless_reply_is_read_a_few_kib_deep(change, hostile):
    endpoint = hostile("endless")
    old, new, keys = change
    result, peak = peak_rss_mb("snapshot", "diff", str(old), str(new), "--purge", endpoint.url + "/purge",
                               "--dialect", "fastly", env={**os.environ, "FASTLY_API_TOKEN": "tok3n"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"purged {len(keys)} keys in 2 requests (0 retried)")
    assert peak < 300, f"peak RSS {peak:.0f} MB reading an endless reply"


def test_an_echoed_token_is_redacted_and_the_error_is_one_line(change, hostile):
    endpoint = hostile("echo", 403)
    result = purge(change, endpoint.url + "/purge", "cloudflare", {"CLOUDFLARE_API_TOKEN": "cf-s3cret"})
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "cf-s3cret" not in result.stderr and "Bearer <redacted>" in result.stderr
    assert result.stderr.startswith("docsrv: purge failed: batch 1 (30 keys): HTTP 403 POST /purge HTTP/1.1\\x0d\\x0a")


@pytest.mark.parametrize(("dialect", "variable"), [("fastly", "FASTLY_API_TOKEN"), ("cloudflare", "CLOUDFLARE_API_TOKEN")])
def test_a_missing_token_is_named_before_anything_is_sent(change, recorder, dialect, variable):
    api = recorder()
    env = {name: value for name, value in os.environ.items() if name != variable}
    old, new, _keys = change
    result = docsrv("snapshot", "diff", str(old), str(new), "--purge", api.url + "/purge", "--dialect", dialect, env=env)
    assert result.returncode == 1 and api.requests == []
    assert result.stderr == f"docsrv: purge failed: {dialect} needs its API token in {variable}, which is not set\n"
