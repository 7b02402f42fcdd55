"""The field machinery of both APIs: an object is a table of fields, and one table renders the
object and writes its schema (the OpenAPI document; v1's schema documents too).

A field is its name, the JSON schema of its value, and how the value is read from a record by
the API's serializer (which holds the store and what is encoded once, such as an embedded
project). v1's schema documents say more of a field, as the original's v1 (tastypie) did: what
its type is called there, its help text and flags (``V1Description``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import orjson

from ..utils.timefmt import utc

#: How a field's value is read: from the API's serializer and a record.
Value = Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class V1Description:
    """What a v1 schema document says of a field."""

    type: str
    help_text: str
    unique: bool = False
    nullable: bool = False
    related_type: str | None = None

    def document(self) -> dict:
        described = {
            "blank": False,
            "default": "No default provided.",
            "help_text": self.help_text,
            "nullable": self.nullable,
            "readonly": True,
            "type": self.type,
            "unique": self.unique,
        }
        if self.related_type:
            described["related_type"] = self.related_type
        return described


@dataclass(frozen=True, slots=True)
class Field:
    """One field of an object of either API."""

    name: str
    schema: dict[str, Any]
    value: Value
    v1: V1Description | None = None


def attribute(name: str) -> Value:
    """The record's attribute ``name``, as it is."""
    getter = attrgetter(name)
    return lambda serializer, item: getter(item)


def moment(name: str) -> Value:
    """The record's datetime ``name``, in UTC (encoded with a ``Z``)."""
    getter = attrgetter(name)
    return lambda serializer, item: utc(getter(item))


def render(fields: tuple[Field, ...], serializer: Any, item: Any) -> dict[str, Any]:
    """The object ``item`` as ``fields`` show it."""
    return {field.name: field.value(serializer, item) for field in fields}


class EmbeddedProjects:
    """A project as each API embeds it in other objects: encoded once per project, then spliced in."""

    def __init__(self, fields: tuple[Field, ...], option: int) -> None:
        self.fields = fields
        self.option = option
        self._encoded: dict[int, orjson.Fragment] = {}

    def get(self, serializer: Any, project: Any) -> orjson.Fragment:
        found = self._encoded.get(project.id)
        if found is None:
            found = self._encoded[project.id] = orjson.Fragment(orjson.dumps(render(self.fields, serializer, project), option=self.option))
        return found
