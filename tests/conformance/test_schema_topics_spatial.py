"""Topics, the reserved ``point``, spatial filtering.

The encoded wire topic and the spatial metadata are not exposed over HTTP, so those tests
read the backend's stored records (``Harness.stored``) after a real HTTP notify; the
legacy/foreign records are written straight into the backend and then
observed through real HTTP replays.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conformance.schema_support import (
    GAUGE_CONFIG,
    NOTIFY,
    PERMISSIVE_CONFIG,
    REPLAY,
    SQUARE,
    SQUARE_ARRAY,
    WATCH,
    Harness,
    gauge_identifier,
    serve,
    unique_date,
    unique_station,
    unique_tag,
)
from tests.support.configs import ForBackend

STREAMS = [WATCH, REPLAY]
BOTH_SPATIAL = (
    "Cannot specify both identifier.polygon and identifier.point. Provide only one spatial filter."
)


@pytest.fixture(scope="module")
def gauge(for_backend: ForBackend) -> Iterator[Harness]:
    with serve(for_backend(GAUGE_CONFIG)) as harness:
        yield harness


@pytest.fixture(scope="module")
def permissive(for_backend: ForBackend) -> Iterator[Harness]:
    with serve(for_backend(PERMISSIVE_CONFIG)) as harness:
        yield harness


def gauge_topic_tokens(gauge: Harness, station: str) -> list[str]:
    """The raw (still encoded) tokens of the one stored topic of ``station``."""
    [record] = gauge.stored(["gauge", None, station, None, None, None])
    return record.topic.split(".")


# -- topics ----------------------------------------------------------------


def test_topic_from_canonical_values(gauge: Harness) -> None:
    identifier = gauge_identifier(
        basin="RHINE", station="KÖLN.1", obs_date="2025-7-6", level_band="04", stage_m="3.50"
    )
    gauge.notify_ok("river_gauge", identifier)
    [record] = gauge.stored(["gauge", "rhine", "KÖLN.1", None, None, None])
    assert record.topic == "gauge.rhine.KÖLN%2E1.20250706.4.3%2E5"
    # The encoded token round-trips: a scalar filter on the raw value finds it.
    [seen] = gauge.replay_identifiers("river_gauge", {"basin": "Rhine", "station": "KÖLN.1"})
    assert (seen["station"], seen["level_band"], seen["stage_m"]) == ("KÖLN.1", "4", "3.5")


@pytest.mark.parametrize(
    ("station", "token"),
    [("50%", "50%25"), ("a>b", "a%3Eb"), ("a*b", "a%2Ab"), ("1%25", "1%2525")],
)
def test_token_encoding(gauge: Harness, station: str, token: str) -> None:
    gauge.notify_ok("river_gauge", gauge_identifier(station=station))
    assert gauge_topic_tokens(gauge, station)[2] == token
    [seen] = gauge.replay_identifiers("river_gauge", {"basin": "rhine", "station": station})
    assert seen["station"] == station


def _inject_gauge(gauge: Harness, station_token: str, day: str, station: str) -> int:
    """A record whose station token is written by hand (not by the notify path)."""
    identifier = {"basin": "rhine", "station": station, "obs_date": day}
    topic = f"gauge.rhine.{station_token}.{day}.4.3%2E5"
    return gauge.inject(topic, {"identifier": json.dumps(identifier)})


def test_decoding_lower_case_escape(gauge: Harness) -> None:
    day = unique_date().replace("-", "")
    _inject_gauge(gauge, "X%2eY", day, "X.Y")
    query = {"basin": "rhine", "station": "X.Y", "obs_date": day}
    assert gauge.replay_values("river_gauge", query, "station") == ["X.Y"]


@pytest.mark.jetstream_bug(
    "documented limitation: the JetStream replay filter keeps canonical literal tokens exact "
    "(for selective replays on large streams), so a foreign subject escaping a plain "
    "character (%41BC for ABC) is not found by an exact-token replay"
)
def test_decoding_escape_of_a_plain_character(gauge: Harness) -> None:
    day = unique_date().replace("-", "")
    _inject_gauge(gauge, "%41BC", day, "ABC")
    query = {"basin": "rhine", "station": "ABC", "obs_date": day}
    assert gauge.replay_values("river_gauge", query, "station") == ["ABC"]


def test_undecodable_topic_never_matches(gauge: Harness) -> None:
    day = unique_date().replace("-", "")
    _inject_gauge(gauge, "ok", day, "ok")
    _inject_gauge(gauge, "Z%G1", day, "Z%G1")
    query = {"basin": "rhine", "station": "*", "obs_date": day}
    assert gauge.replay_values("river_gauge", query, "station") == ["ok"]


def test_undecodable_topic_no_exact_match(gauge: Harness) -> None:
    day = unique_date().replace("-", "")
    _inject_gauge(gauge, "Q%G1", day, "Q%G1")
    query = {"basin": "rhine", "station": "Q%G1", "obs_date": day}
    assert gauge.replay("river_gauge", query) == []


def test_generic_topic_orders_keys(permissive: Harness) -> None:
    permissive.notify_ok("ev", {"b": "2", "a": "1"})
    [record] = permissive.stored(["ev", None, None])
    assert record.topic == "ev.1.2"
    [seen] = permissive.replay_identifiers("ev", {"a": "1", "b": "2"})
    assert seen == {"a": "1", "b": "2"}
    # Positional: a watch naming the keys the other way round looks for ev.2.1.
    assert permissive.replay("ev", {"a": "2", "b": "1"}) == []


@pytest.mark.jetstream_bug(
    "a base-only topic (ev_empty) is outside the stream's only subject binding ev_empty.>, "
    "so notify answers 500 NOTIFICATION_STORAGE_FAILED 'nats: no response from stream'; "
    "base-only topics SHOULD work on every backend"
)
def test_generic_topic_empty_identifier(permissive: Harness) -> None:
    permissive.notify_ok("ev_empty", {})
    [record] = permissive.stored(["ev_empty"])
    assert record.topic == "ev_empty"
    [event] = permissive.replay("ev_empty", {})
    assert event["data"]["identifier"] == {}


# -- schema-less values ----------------------------------------------------


def test_schemaless_notify_empty_value_rejected(permissive: Harness) -> None:
    error = permissive.rejected(NOTIFY, "adhoc", {"x": ""})
    assert "x" in error["message"], error
    assert permissive.stored(["adhoc", None]) == []


@pytest.mark.parametrize("path", STREAMS)
def test_schemaless_stream_empty_value_accepted(permissive: Harness, path: str) -> None:
    assert permissive.stream_status(path, "adhoc", {"x": ""}) == 200


@pytest.mark.parametrize("path", STREAMS)
def test_schemaless_constraint_rejected(permissive: Harness, path: str) -> None:
    error = permissive.rejected(path, "adhoc", {"x": {"gte": 1}})
    assert "not supported without schema" in error["message"], error


# -- point / polygon request rules -----------------------------------------


@pytest.mark.parametrize("path", STREAMS)
@pytest.mark.parametrize(
    ("event_type", "identifier"),
    [
        ("river_gauge", {"basin": "rhine", "station": "x"}),
        ("plain_reading", {"tag": "x"}),
        # Checked before the identifier rules: the required fields may even be missing.
        ("river_gauge", {}),
    ],
    ids=["with-polygon-field", "without-polygon-field", "before-identifier-rules"],
)
def test_polygon_and_point_together(
    gauge: Harness, path: str, event_type: str, identifier: dict[str, Any]
) -> None:
    query = {**identifier, "polygon": SQUARE, "point": "5,5"}
    error = gauge.rejected(path, event_type, query)
    assert error["message"] == BOTH_SPATIAL


@pytest.mark.parametrize("path", STREAMS)
@pytest.mark.parametrize("point", ["52.55", "1,2,3", "91,0", {"lat": 1}], ids=str)
def test_invalid_points(gauge: Harness, path: str, point: Any) -> None:
    query = {"basin": "rhine", "station": "x", "point": point}
    error = gauge.rejected(path, "river_gauge", query)
    assert error["message"].startswith("identifier.point must be"), error


@pytest.mark.parametrize("path", STREAMS)
def test_parenthesised_point_accepted(gauge: Harness, path: str) -> None:
    query = {"basin": "rhine", "station": "x", "point": "(52.55, 13.5)"}
    assert gauge.stream_status(path, "river_gauge", query) == 200


@pytest.mark.parametrize("path", STREAMS)
def test_point_replaces_required_polygon(gauge: Harness, path: str) -> None:
    tag = unique_tag()
    assert gauge.stream_status(path, "zone", {"tag": tag, "point": "5,5"}) == 200
    error = gauge.rejected(path, "zone", {"tag": tag})
    assert "polygon" in error["message"], error


def test_point_on_required_polygon_schema_filters(gauge: Harness) -> None:
    tag = unique_tag()
    gauge.notify_ok("zone", {"tag": tag, "polygon": SQUARE})
    gauge.notify_ok("zone", {"tag": tag, "polygon": "(20,20,20,30,30,30,30,20,20,20)"})
    assert gauge.replay_values("zone", {"tag": tag, "point": "5,5"}, "polygon") == [
        SQUARE_ARRAY  # delivered as an array since upstream 0.11 (was the producer's string)
    ]


# -- spatial filtering -----------------------------------------------------


@pytest.fixture(scope="module")
def square_station(gauge: Harness) -> str:
    """One notification with the square polygon and one far away, under a fresh station."""
    station = unique_station()
    gauge.notify_ok("river_gauge", gauge_identifier(station=station, polygon=SQUARE))
    far = "(50,50,50,60,60,60,60,50,50,50)"
    gauge.notify_ok("river_gauge", gauge_identifier(station=station, polygon=far))
    return station


def spatial_matches(gauge: Harness, station: str, spatial: dict[str, str]) -> list[str]:
    query = {"basin": "rhine", "station": station, **spatial}
    return gauge.replay_values("river_gauge", query, "polygon")


@pytest.mark.parametrize(
    ("point", "matches"),
    [("5,5", True), ("0,5", False), ("0,0", False), ("20,20", False)],
    ids=["inside", "on-edge", "on-vertex", "outside"],
)
def test_point_in_interior_only(
    gauge: Harness, square_station: str, point: str, matches: bool
) -> None:
    expected = [SQUARE_ARRAY] if matches else []
    assert spatial_matches(gauge, square_station, {"point": point}) == expected


@pytest.mark.parametrize(
    ("polygon", "matches"),
    [
        ("(10,10,10,20,20,20,20,10,10,10)", True),
        ("(5,10,5,20,8,20,8,10,5,10)", True),
        ("(11,11,11,20,20,20,20,11,11,11)", False),
    ],
    ids=["touches-corner", "touches-edge", "disjoint"],
)
def test_polygon_intersection_touching_counts(
    gauge: Harness, square_station: str, polygon: str, matches: bool
) -> None:
    expected = [SQUARE_ARRAY] if matches else []
    assert spatial_matches(gauge, square_station, {"polygon": polygon}) == expected


@pytest.mark.parametrize(
    "polygon",
    ["(2,2,2,8,8,8,8,2,2,2)", "(-5,-5,-5,15,15,15,15,-5,-5,-5)"],
    ids=["request-inside", "request-contains"],
)
def test_containment_matches(gauge: Harness, square_station: str, polygon: str) -> None:
    assert spatial_matches(gauge, square_station, {"polygon": polygon}) == [SQUARE_ARRAY]


def test_point_filter_live(gauge: Harness) -> None:
    station = unique_station()
    query = {"basin": "rhine", "station": station, "point": "5,5"}
    with gauge.live("river_gauge", query) as watch:
        for level, polygon in [
            (1, SQUARE),  # contains 5,5
            (2, "(20,20,20,30,30,30,30,20,20,20)"),  # elsewhere
            (3, "(5,5,5,10,10,10,10,5,5,5)"),  # 5,5 is its corner
            (4, "(0,0,0,5,10,5,10,0,0,0)"),  # 5,5 lies on its edge
        ]:
            identifier = gauge_identifier(station=station, level_band=level, polygon=polygon)
            gauge.notify_ok("river_gauge", identifier)
        gauge.notify_ok("river_gauge", gauge_identifier(level_band=5, polygon=SQUARE))
        sentinel = gauge_identifier(station=station, level_band=9, polygon="(4,4,4,6,6,6,6,4,4,4)")
        gauge.notify_ok("river_gauge", sentinel)
        received = watch.notifications_until(
            lambda ce: ce["data"]["identifier"]["level_band"] == "9"
        )
    assert [ce["data"]["identifier"]["level_band"] for ce in received] == ["1", "9"]


def test_polygon_filter_live(gauge: Harness) -> None:
    station = unique_station()
    query = {"basin": "rhine", "station": station, "polygon": SQUARE}
    with gauge.live("river_gauge", query) as watch:
        for level, polygon in [
            (1, "(10,10,10,20,20,20,20,10,10,10)"),  # touches a corner
            (2, "(11,11,11,20,20,20,20,11,11,11)"),  # disjoint
            (3, "(2,2,2,8,8,8,8,2,2,2)"),  # inside
        ]:
            identifier = gauge_identifier(station=station, level_band=level, polygon=polygon)
            gauge.notify_ok("river_gauge", identifier)
        sentinel = gauge_identifier(station=station, level_band=9, polygon=SQUARE)
        gauge.notify_ok("river_gauge", sentinel)
        received = watch.notifications_until(
            lambda ce: ce["data"]["identifier"]["level_band"] == "9"
        )
    assert [ce["data"]["identifier"]["level_band"] for ce in received] == ["1", "3", "9"]


def test_no_polygon_schema_point_filter(gauge: Harness) -> None:
    """``plain_reading`` has no polygon field, so its notifications never carry one."""
    tag = unique_tag()
    gauge.notify_ok("plain_reading", {"tag": tag, "level": 1})
    assert gauge.replay_values("plain_reading", {"tag": tag}, "level") == ["1"]
    assert gauge.replay("plain_reading", {"tag": tag, "point": "5,5"}) == []


def test_stored_without_polygon_excluded_live(gauge: Harness) -> None:
    station = unique_station()
    identifier = {"basin": "rhine", "station": station, "obs_date": "20250706"}
    for spatial in ({"point": "5,5"}, {"polygon": SQUARE}):
        query = {"basin": "rhine", "station": station, **spatial}
        with gauge.live("river_gauge", query) as watch:
            gauge.inject(
                f"gauge.rhine.{station}.20250706.4.3%2E5", {"identifier": json.dumps(identifier)}
            )
            sentinel = gauge_identifier(station=station, level_band=9, polygon=SQUARE)
            gauge.notify_ok("river_gauge", sentinel)
            received = watch.notifications_until(
                lambda ce: ce["data"]["identifier"].get("level_band") == "9"
            )
        assert [ce["data"]["identifier"].get("level_band") for ce in received] == ["9"]


def test_stored_without_polygon_excluded_by_spatial_filters(gauge: Harness) -> None:
    """A ``river_gauge`` record without spatial metadata (e.g. written before the field)."""
    station = unique_station()
    identifier = {"basin": "rhine", "station": station, "obs_date": "20250706"}
    gauge.inject(f"gauge.rhine.{station}.20250706.4.3%2E5", {"identifier": json.dumps(identifier)})
    query = {"basin": "rhine", "station": station}
    assert gauge.replay_values("river_gauge", query, "station") == [station]
    assert gauge.replay("river_gauge", {**query, "point": "5,5"}) == []
    assert gauge.replay("river_gauge", {**query, "polygon": SQUARE}) == []


def test_spatial_metadata_and_delivered_polygon(gauge: Harness) -> None:
    polygon = "(47.1,8.2,47.4,8.6,47.2,9.0,46.9,8.5,47.1,8.2)"
    station = unique_station()
    gauge.notify_ok("river_gauge", gauge_identifier(station=station, polygon=polygon))
    [record] = gauge.stored(["gauge", None, station, None, None, None])
    assert record.metadata["spatial_bbox"] == "46.9,8.2,47.4,9"
    assert record.metadata["spatial_geometry"] == polygon
    assert record.payload == "null"  # the payload is never modified
    # Delivered as a JSON array of numbers whatever the input form (upstream 0.11+; this
    # test pinned the producer's string, 0.7.1's output, before).
    delivered = [[47.1, 8.2], [47.4, 8.6], [47.2, 9.0], [46.9, 8.5], [47.1, 8.2]]
    [seen] = gauge.replay_identifiers("river_gauge", {"basin": "rhine", "station": station})
    assert seen["polygon"] == delivered
    # The stored polygon is usable by the point filter.
    [seen] = gauge.replay_identifiers(
        "river_gauge", {"basin": "rhine", "station": station, "point": "47.2,8.5"}
    )
    assert seen["polygon"] == delivered
