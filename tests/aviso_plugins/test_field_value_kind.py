"""``FieldHandler.value_kind``: what the schema API tells clients (the console) to ask for.

Handlers written before it existed declare nothing and still get a sensible kind.
"""

from __future__ import annotations

from typing import Any

from aviso_host.plugins import discover
from aviso_plugins.types import VALUE_KINDS, FieldHandler


class _Plain(FieldHandler):
    type_name = "PlainHandler"

    def canonicalise(self, text: str) -> str:
        return text


class _Area(_Plain):
    type_name = "AreaHandler"
    spatial = True


class _Cloud(_Plain):
    type_name = "CloudHandler"
    spatial = True
    point_cloud = True


class _Level(_Plain):
    type_name = "LevelHandler"
    value_kind = "integer"
    operators = frozenset({"lt", "gte"})


def _describe(cls: type[FieldHandler], **definition: Any) -> dict[str, Any]:
    return cls("field", {"required": False, **definition}).describe()


def test_an_undeclared_kind_is_derived() -> None:
    assert _Plain.kind() == "text"
    assert _Area.kind() == "polygon"
    assert _Cloud.kind() == "point"


def test_a_declared_kind_and_the_operators_are_described() -> None:
    assert _describe(_Level) == {
        "type": "LevelHandler",
        "required": False,
        "value_kind": "integer",
        "operators": ["gte", "lt"],
    }
    assert _describe(_Plain)["operators"] == []


def test_the_built_in_handlers_declare_known_kinds() -> None:
    kinds = {name: cls.kind() for name, cls in discover().field_handlers.items()}
    assert set(kinds.values()) <= VALUE_KINDS
    assert kinds["IntHandler"] == "integer"
    assert kinds["FloatHandler"] == "float"
    assert kinds["EnumHandler"] == "enum"
    assert kinds["DateHandler"] == "date"
    assert kinds["TimeHandler"] == "time"
    assert kinds["StringHandler"] == "text"
    assert kinds["ExpverHandler"] == "text"
    assert kinds["PolygonHandler"] == "polygon"
    assert kinds["PointCloudHandler"] == "point"
