"""Startup rules of the spatial handlers: point clouds are new in
0.11 and refused when misused; what 0.13 refuses but 0.7.1 accepted only warns."""

import copy
from typing import Any

import pytest

from aviso_builtins.schema_handlers.point_cloud import PointCloudHandler
from aviso_builtins.schema_handlers.spatial import PolygonHandler
from aviso_host.config import ConfigError, settings_from_document
from aviso_host.config.settings import Settings
from aviso_host.plugins import PluginRegistry
from tests.host.config.config_stubs import (
    AUTH_ENABLED,
    document,
    make_registry,
)

CLOUD = {"type": "PointCloudHandler", "required": True}
SWATH: dict[str, Any] = {
    "topic": {"base": "swath", "key_order": ["satellite"]},
    "identifier": {
        "satellite": {"type": "StringHandler", "required": True},
        "point_cloud": CLOUD,
    },
}


def registry() -> PluginRegistry:
    plugins = make_registry()
    plugins.field_handlers.update(
        {handler.type_name: handler for handler in (PolygonHandler, PointCloudHandler)}
    )
    return plugins


def load(**schemas: dict[str, Any]) -> Settings:
    return settings_from_document(document(notification_schema=schemas), registry())


def swath(**changes: Any) -> dict[str, Any]:
    schema = copy.deepcopy(SWATH)
    for key, value in changes.items():
        if value is None:
            del schema[key]
        else:
            schema[key] = value
    return schema


def with_fields(**fields: dict[str, Any]) -> dict[str, Any]:
    return swath(identifier={**SWATH["identifier"], **fields})


def test_a_point_cloud_schema_loads_without_warnings() -> None:
    settings = load(swath=swath())
    assert settings.warnings == ()
    assert settings.schemas["swath"].identifier["point_cloud"] == CLOUD


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            swath(identifier={"satellite": SWATH["identifier"]["satellite"], "cloud": CLOUD}),
            r"^notification_schema\.swath\.identifier\.cloud: a PointCloudHandler field must "
            r"be named 'point_cloud'$",
        ),
        (
            swath(topic=None),
            r"^notification_schema\.swath\.identifier\.point_cloud: a PointCloudHandler field "
            r"requires a topic block$",
        ),
        (
            swath(topic={"base": "swath", "key_order": ["satellite", "point_cloud"]}),
            r"^notification_schema\.swath\.topic\.key_order: must not list 'point_cloud'",
        ),
        (
            with_fields(polygon={"type": "PolygonHandler", "required": False}),
            r"^notification_schema\.swath\.identifier\.polygon: a schema with a "
            r"PointCloudHandler field cannot also declare 'polygon'$",
        ),
        (
            with_fields(point_cloud={**CLOUD, "max_points": 10_001}),
            r"point_cloud\.max_points",
        ),
        (
            with_fields(point_cloud={**CLOUD, "max_points": 0}),
            r"point_cloud\.max_points",
        ),
    ],
    ids=["misnamed", "no-topic", "in-key-order", "with-polygon", "max-points-high", "zero"],
)
def test_point_cloud_misuse_fails_startup(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(swath=schema)


def test_a_polygon_handler_under_another_name_is_a_warning() -> None:
    schema = {
        "topic": {"base": "zone", "key_order": ["tag"]},
        "identifier": {
            "tag": {"type": "StringHandler", "required": True},
            "area": {"type": "PolygonHandler", "required": False},
        },
    }
    [warning] = load(zone=schema).warnings
    assert warning.startswith(
        "notification_schema.zone.identifier.area: a PolygonHandler field must be named "
        "'polygon' for aviso-server 0.13"
    )


def test_polygon_may_be_left_out_of_key_order() -> None:
    schema = {
        "topic": {"base": "zone", "key_order": ["tag"]},
        "identifier": {
            "tag": {"type": "StringHandler", "required": True},
            "polygon": {"type": "PolygonHandler", "required": False},
        },
    }
    assert load(zone=schema).warnings == ()


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ({"base": "swath", "key_order": []}, "topic.key_order: is empty"),
        ({"base": "swath", "key_order": ["satellite", "satellite"]}, "repeats satellite"),
        ({"base": "swath v2", "key_order": ["satellite"]}, "is an invalid topic base"),
    ],
    ids=["empty-key-order", "repeated-key", "base-spelling"],
)
def test_what_0_13_refuses_in_a_topic_is_a_warning(topic: dict[str, Any], expected: str) -> None:
    warnings = load(swath=swath(topic=topic)).warnings
    assert any(expected in warning and "0.13" in warning for warning in warnings), warnings


def test_an_event_type_used_as_an_invalid_base_is_a_warning() -> None:
    schema = {"identifier": {"tag": {"type": "StringHandler", "required": True}}}
    [warning] = load(**{"storm cells": schema}).warnings
    assert "event type 'storm cells' is used as the topic base" in warning


ECPDS = {
    "username": "svc-aviso",
    "password": "svc-secret",
    "servers": ["https://ecpds.example.net/api/"],
}


def ecpds_load(match_key: str, schema: dict[str, Any]) -> Settings:
    schema = {**schema, "auth": {"required": True, "plugins": ["ecpds"]}}
    doc = document(notification_schema={"feed": schema})
    doc["auth"] = AUTH_ENABLED
    doc["ecpds"] = {**ECPDS, "match_key": match_key}
    return settings_from_document(doc, registry())


GAUGE = {
    "topic": {"base": "gauge", "key_order": ["basin"]},
    "identifier": {
        "basin": {"type": "StringHandler", "required": True},
        "station": {"type": "StringHandler", "required": True},
        "polygon": {"type": "PolygonHandler", "required": True},
    },
}


def test_ecpds_match_key_outside_key_order_is_a_warning() -> None:
    warnings = ecpds_load("station", GAUGE).warnings
    assert (
        "ecpds.match_key: 'station' is not in the key_order of 'feed'; aviso-server 0.13 "
        "requires the match_key in key_order"
    ) in warnings


def test_ecpds_match_key_on_a_polygon_is_a_warning() -> None:
    warnings = ecpds_load("polygon", GAUGE).warnings
    assert any("the ecpds match_key is a spatial field" in warning for warning in warnings)


def test_ecpds_match_key_on_a_point_cloud_fails() -> None:
    with pytest.raises(ConfigError, match="the ecpds match_key cannot be a point cloud"):
        ecpds_load("point_cloud", SWATH)
