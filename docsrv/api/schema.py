"""JSON Schema building blocks of the OpenAPI document, shared by the tables of fields that both
render the API's objects and describe them (``v2.py``, ``v1.py``)."""

from __future__ import annotations

from typing import Any

STRING: dict[str, Any] = {"type": "string"}
INTEGER: dict[str, Any] = {"type": "integer"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
DATETIME: dict[str, Any] = {"type": "string", "format": "date-time"}
URI: dict[str, Any] = {"type": "string", "format": "uri"}
NULLABLE_URI: dict[str, Any] = {"type": ["string", "null"], "format": "uri"}


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict[str, Any], *, extra: bool = False) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": extra}


def enum(values: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}
