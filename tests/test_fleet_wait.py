"""``docsrv fleet wait`` against replicas that lie or misbehave (loopback HTTP servers): each is
named as not ready in one line, the others are still waited for, and nothing is read whole."""

from __future__ import annotations

import pytest

from helpers import docsrv
from hostile_http import Hostile


@pytest.mark.parametrize(("readyz", "why"), [
    ("[1,2]", "/readyz answered [1,2], not a status object"),
    ('"x"', '/readyz answered "x", not a status object'),
    ("null", "/readyz answered null, not a status object"),
    ('{"snapshot": "snap-b", "draining_workers": null}', "/readyz has no count of draining workers (draining_workers: null)"),
    ('{"snapshot": "snap-b"}', "/readyz has no count of draining workers (draining_workers: null)"),
    ('{"snapshot": "snap-b", "draining_workers": "0"}', '/readyz has no count of draining workers (draining_workers: "0")'),
    ('{"snapshot": "snap-a\\nsnap-b", "draining_workers": 0}', "serves snapshot snap-a\\x0asnap-b"),
])
def test_a_replica_that_lies_is_named_not_ready_and_the_others_are_waited_for(hostile, readyz, why):
    liar = hostile("json", readyz)
    honest = hostile("json", '{"snapshot": "snap-b", "draining_workers": 0}')
    result = docsrv("fleet", "wait", "--snapshot", "snap-b", "--timeout", "0.5", liar.url, honest.url)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (f"docsrv: after 0.5 s, 1 of 2 replica(s) do not serve snapshot snap-b alone: {liar.url}: {why}\n")


def test_an_honest_fleet_is_done():
    honest = Hostile("json", '{"snapshot": "snap-b", "draining_workers": 0}')
    try:
        result = docsrv("fleet", "wait", "--snapshot", "snap-b", "--timeout", "5", honest.url)
    finally:
        honest.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout == "all 1 replica(s) serve snapshot snap-b, none draining an earlier one\n"


def test_an_endless_readyz_is_not_read_whole(hostile):
    endless = hostile("endless")
    result = docsrv("fleet", "wait", "--snapshot", "snap-b", "--timeout", "1", endless.url)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"docsrv: after 1 s, 1 of 1 replica(s) do not serve snapshot snap-b alone: {endless.url}: JSONDecodeError")
