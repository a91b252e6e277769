"""Limits on identifier values, payloads and topics, below the HTTP layer.

The HTTP behaviour on both backends is in ``tests/hostile/test_values.py``; this covers the
rules themselves and the Spark writer's planner, which applies the same limits.
"""

from __future__ import annotations

import pytest

from aviso_host.config import settings_from_document
from aviso_host.identifiers import (
    MAX_TOPIC_BYTES,
    CatalogPlanner,
    check_identifier_values,
    check_topic_base,
    check_topic_size,
    plan_stream_filter,
)
from aviso_host.plugins import discover
from aviso_host.schemas import SchemaCatalog
from aviso_plugins.topics import decode_token, encode_token
from aviso_plugins.types import InvalidValue, SinkRejected
from tests.support.configs import API_EXAMPLE, with_changes


@pytest.fixture(scope="module")
def catalog() -> SchemaCatalog:
    registry = discover()
    document = with_changes(API_EXAMPLE, notification_schema_strict=False)
    return SchemaCatalog(settings_from_document(document, registry), registry.field_handlers)


def test_whitespace_is_escaped_and_everything_else_kept() -> None:
    assert encode_token("a b\tc\rd\ne") == "a%20b%09c%0Dd%0Ae"
    # Unchanged from aviso-server's four: every subject an aviso server could store is the same.
    assert encode_token("1.5*x>y%\x01\x7fé😀") == "1%2E5%2Ax%3Ey%25\x01\x7fé😀"
    assert decode_token(encode_token(" \t\r\n")) == " \t\r\n"


@pytest.mark.parametrize(
    ("value", "accepted"),
    [("a" * 16, True), ("a" * 17, False), ("é" * 8, True), ("é" * 8 + "a", False)],
)
def test_the_value_limit_counts_utf8_bytes(
    catalog: SchemaCatalog, value: str, accepted: bool
) -> None:
    schema = catalog.get("river_gauge")
    for identifier in ({"basin": value}, {"level": {"in": [1, value]}}):
        if accepted:
            check_identifier_values(schema, identifier, 16)
        else:
            with pytest.raises(InvalidValue, match=r"limits\.max_identifier_value_bytes"):
                check_identifier_values(schema, identifier, 16)


def test_the_schema_polygon_is_left_to_its_own_limits(catalog: SchemaCatalog) -> None:
    polygon = "(" + ",".join(["47.0,8.0", "47.6,8.0", "47.6,8.9"] * 20) + ",47.0,8.0)"
    check_identifier_values(catalog.get("storm_cell"), {"polygon": polygon}, 16)
    with pytest.raises(InvalidValue):
        check_identifier_values(None, {"polygon": polygon}, 16)


@pytest.mark.parametrize("event_type", ["a", "A-1_b", "9" * 255])
def test_topic_bases(event_type: str) -> None:
    check_topic_base(event_type)


@pytest.mark.parametrize("event_type", ["", "_a", "-a", "a.b", "a b", "a*", "é", "9" * 256])
def test_not_topic_bases(event_type: str) -> None:
    with pytest.raises(InvalidValue, match="not a valid topic base"):
        check_topic_base(event_type)


def test_a_pattern_over_the_topic_limit_is_refused(catalog: SchemaCatalog) -> None:
    fits = {f"k{index}": "." * 300 for index in range(3)}  # 900 characters, 2700 encoded
    check_topic_size(plan_stream_filter(None, "free", fits, "watch", None).pattern.encoded, 3072)
    too_long = {**fits, "k3": "." * 300}
    pattern = plan_stream_filter(None, "free", too_long, "watch", None).pattern.encoded
    with pytest.raises(InvalidValue, match=r"limited to 3072 bytes \(limits.max_topic_bytes\)"):
        check_topic_size(pattern, MAX_TOPIC_BYTES)


def test_the_spark_planner_applies_the_same_limits(catalog: SchemaCatalog) -> None:
    planner = CatalogPlanner(catalog, max_value_bytes=8, max_payload_bytes=16)
    identifier = {"basin": "rhine", "date": "20260402", "level": 1}
    assert planner.plan("river_gauge", identifier, "x" * 14).topic.startswith("gauge.rhine.")
    for over in ({**identifier, "basin": "b" * 9}, identifier):
        with pytest.raises(SinkRejected) as refused:
            planner.plan("river_gauge", over, "x" * 15)
        assert refused.value.code == "INVALID_NOTIFICATION_REQUEST"
