"""Compression by Accept-Encoding: gzip and brotli for bodies over 1 KB, each variant with its own tag."""

import gzip

import brotli
import pytest


@pytest.mark.parametrize(("accept", "coding"), [
    ("gzip", "gzip"), ("br", "br"), ("gzip, br", "br"), ("br;q=0.5, gzip;q=0.9", "gzip"), ("br;q=0, gzip", "gzip"),
    ("*", "br"), ("identity", None), ("gzip;q=0", None), ("", None), ("x-gzip", "gzip"), ("GZIP;Q=1", "gzip"),
])
def test_compression_follows_accept_encoding_and_decodes_to_the_same_json(demo, accept, coding):
    plain = demo.get("/api/v2/build/?limit=5")
    assert len(plain.body) > 1024
    response = demo.get("/api/v2/build/?limit=5", headers={"Accept-Encoding": accept} if accept else {})
    assert response.status == 200
    assert response.headers.get("Content-Encoding") == coding
    assert response.headers["Vary"] == "Accept-Encoding, Origin"
    body = {"gzip": gzip.decompress, "br": brotli.decompress, None: lambda b: b}[coding](response.body)
    assert body == plain.body
    if coding:
        assert response.headers["ETag"] == plain.headers["ETag"][:-1] + f'-{coding}"'
        assert len(response.body) < len(plain.body)


def test_small_bodies_are_not_compressed(demo):
    response = demo.get("/api/v1/user/1/", headers={"Accept-Encoding": "gzip, br"})
    assert "Content-Encoding" not in response.headers and len(response.body) < 1024


def test_a_compressed_variant_revalidates_with_its_own_tag(demo):
    first = demo.get("/api/v2/build/?limit=5", headers={"Accept-Encoding": "br"})
    again = demo.get("/api/v2/build/?limit=5", headers={"Accept-Encoding": "br", "If-None-Match": first.headers["ETag"]})
    assert again.status == 304 and again.headers["ETag"] == first.headers["ETag"]
