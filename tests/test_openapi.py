"""/openapi.json: every route is in it, and every example in it is what the server answers."""

import pytest

from conftest import DEMO, InProcessServer
from docsrv.api.openapi import EXAMPLES_PUBLIC_URL, LIVE
from docsrv.api.routes import ROUTES
from docsrv.config import Settings
from helpers import example_request


@pytest.fixture(scope="module")
def document(demo):
    response = demo.get("/openapi.json")
    assert response.status == 200
    return response.json()


def test_document_is_openapi_3_1_and_names_every_route(document):
    assert document["openapi"] == "3.1.0"
    assert set(document["paths"]) == {route.template for route in ROUTES}


def test_every_operation_has_an_example_unless_it_is_live(document):
    for template, item in document["paths"].items():
        content = item["get"]["responses"]["200"]["content"]
        assert ("example" in content.get("application/json", {})) is (template not in LIVE), template


@pytest.fixture(scope="module")
def examples_server():
    """The demo snapshot served (in this process) with the public URL the examples were recorded with."""
    server = InProcessServer(DEMO, Settings(public_url=EXAMPLES_PUBLIC_URL))
    yield server
    server.stop()


def test_every_example_is_the_real_response(document, examples_server):
    server = examples_server
    checked = 0
    for template, item in document["paths"].items():
        content = item["get"]["responses"]["200"]["content"].get("application/json", {})
        if "example" not in content:
            continue
        assert server.json(example_request(template, item["get"])) == content["example"], (
            f"{template}: example is stale; rewrite with `python tests/record_openapi_examples.py`"
        )
        checked += 1
    assert checked == len(ROUTES) - len(LIVE)


def test_examples_follow_their_schemas(document):
    schemas = document["components"]["schemas"]

    def check(value, schema, where):
        if "$ref" in schema:
            return check(value, schemas[schema["$ref"].rsplit("/", 1)[1]], where)
        kind = schema.get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        python = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool, "number": (int, float), "null": type(None)}
        if kind is not None:
            assert any(isinstance(value, python[k]) and not (k == "integer" and isinstance(value, bool)) for k in kinds), where
        if "enum" in schema:
            assert value in schema["enum"], where
        if isinstance(value, dict):
            for name in schema.get("required", []):
                assert name in value, f"{where}.{name} missing"
            properties = schema.get("properties", {})
            if schema.get("additionalProperties") is False:
                assert set(value) <= set(properties), where
            for name, item in value.items():
                if name in properties:
                    check(item, properties[name], f"{where}.{name}")
        if isinstance(value, list) and "items" in schema:
            for index, item in enumerate(value):
                check(item, schema["items"], f"{where}[{index}]")

    for template, item in document["paths"].items():
        content = item["get"]["responses"]["200"]["content"].get("application/json", {})
        if "example" in content:
            check(content["example"], content["schema"], template)
