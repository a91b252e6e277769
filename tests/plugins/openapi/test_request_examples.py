"""The values the API description's request examples are built from: each built-in field
handler's ``example_value``, and the fallback for handlers that offer none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from aviso_builtins.openapi.examples import field_example, request_examples
from aviso_builtins.schema_handlers.numeric import FloatHandler, IntHandler
from aviso_builtins.schema_handlers.point_cloud import PointCloudHandler
from aviso_builtins.schema_handlers.spatial import PolygonHandler
from aviso_builtins.schema_handlers.temporal import DateHandler, TimeHandler
from aviso_builtins.schema_handlers.text import EnumHandler, ExpverHandler, StringHandler
from aviso_plugins._shared.numbers import json_scalar_text
from aviso_plugins.types import FieldHandler, InvalidValue
from tests.support.configs import API_EXAMPLE
from tests.support.openapi import openapi_sources

DEFINITIONS: list[tuple[type[FieldHandler], dict[str, Any]]] = [
    (StringHandler, {}),
    (StringHandler, {"max_length": 2}),
    (EnumHandler, {"values": ["Rhine", "elbe"]}),
    (ExpverHandler, {}),
    (ExpverHandler, {"default": "12"}),
    (IntHandler, {}),
    (IntHandler, {"range": [5, 9]}),
    (IntHandler, {"range": [-9, -5]}),
    (FloatHandler, {"range": [-5.0, 0.5]}),
    (DateHandler, {}),
    (DateHandler, {"canonical_format": "%Y-%m-%d"}),
    (TimeHandler, {}),
    (PolygonHandler, {}),
    (PointCloudHandler, {"max_points": 2}),
]


def _accepts(handler: FieldHandler, value: Any) -> str:
    if handler.spatial:
        return handler.canonicalise_value(value, None)
    return handler.canonicalise(json_scalar_text(value))


@pytest.mark.parametrize(
    ("cls", "definition"), DEFINITIONS, ids=[f"{c.type_name}{d}" for c, d in DEFINITIONS]
)
def test_each_built_in_example_is_accepted_by_its_handler(
    cls: type[FieldHandler], definition: Mapping[str, Any]
) -> None:
    handler = cls("field", {"required": True, **definition})
    value = handler.example_value()
    assert value is not None
    _accepts(handler, value)
    assert field_example(handler) == value


def test_a_string_field_with_no_room_has_no_example() -> None:
    assert StringHandler("f", {"required": True, "max_length": 0}).example_value() is None


class _Digits(FieldHandler):
    """A third-party handler with no example of its own: digits only."""

    type_name = "DigitsHandler"

    def canonicalise(self, text: str) -> str:
        if not text.isdigit():
            raise InvalidValue(f"Field '{self.field}' must be digits")
        return text


class _Broken(_Digits):
    type_name = "BrokenHandler"

    def example_value(self) -> Any:
        raise RuntimeError("a bug in the plugin")


class _Nothing(FieldHandler):
    type_name = "NothingHandler"

    def canonicalise(self, text: str) -> str:
        raise InvalidValue(f"Field '{self.field}' accepts nothing")


def test_a_handler_without_an_example_gets_the_first_common_value_it_accepts() -> None:
    assert field_example(_Digits("f", {"required": True})) == "1"


def test_a_failing_example_value_falls_back_instead_of_stopping_the_server() -> None:
    assert field_example(_Broken("f", {"required": True})) == "1"


def test_a_field_that_accepts_nothing_has_no_example() -> None:
    assert field_example(_Nothing("f", {"required": True})) is None


def test_the_examples_cover_every_configured_event_type() -> None:
    examples = request_examples(openapi_sources(API_EXAMPLE).event_schemas)
    assert set(examples.notify) == {"river_gauge", "storm_cell"}
    assert examples.notify["river_gauge"]["identifier"].keys() == {"basin", "date", "level"}
    # A required polygon is filtered by a point on watch and replay.
    assert set(examples.watch["storm_cell"]["identifier"]) == {"point"}
    assert examples.replay["river_gauge"]["from_id"] == "1"
    assert examples.aggregate["river_gauge"]["group_by"] == ["basin"]
    assert examples.event_type == "river_gauge"


def test_without_schemas_the_examples_use_a_free_form_event_type() -> None:
    examples = request_examples({})
    assert list(examples.notify) == ["example"]
    assert examples.notify["example"]["identifier"] == {"region": "alps"}
