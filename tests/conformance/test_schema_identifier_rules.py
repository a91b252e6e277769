"""Identifier rules per operation, and constraint objects.

Filtering semantics are observed through replays (watch shares the same pipeline); some
also have a live-watch variant.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conformance.schema_support import (
    GAUGE_CONFIG,
    NOTIFY,
    REPLAY,
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


@pytest.fixture(scope="module")
def gauge(for_backend: ForBackend) -> Iterator[Harness]:
    with serve(for_backend(GAUGE_CONFIG)) as harness:
        yield harness


def publish_levels(gauge: Harness, field: str, values: list[Any]) -> str:
    """Notify one ``river_gauge`` notification per value of ``field``; return the station."""
    station = unique_station()
    for value in values:
        gauge.notify_ok("river_gauge", gauge_identifier(station=station, **{field: value}))
    return station


def delivered(gauge: Harness, station: str, field: str, constraint: Any) -> list[str]:
    query = {"basin": "rhine", "station": station, field: constraint}
    return gauge.replay_values("river_gauge", query, field)


# -- notify rules ----------------------------------------------------------


def test_notify_needs_every_declared_field(gauge: Harness) -> None:
    identifier = gauge_identifier()
    del identifier["obs_time"]  # optional for watch/replay, still needed on notify
    error = gauge.rejected(NOTIFY, "river_gauge", identifier)
    assert "Required field 'obs_time' missing" in error["message"], error
    query = {"basin": "rhine", "station": identifier["station"]}
    assert gauge.replay("river_gauge", query) == []


def test_notify_undeclared_key_rejected(gauge: Harness) -> None:
    identifier = gauge_identifier(sensor="x")
    error = gauge.rejected(NOTIFY, "river_gauge", identifier)
    assert "sensor" in error["message"], error
    query = {"basin": "rhine", "station": identifier["station"]}
    assert gauge.replay("river_gauge", query) == []


def test_notify_point_rejected(gauge: Harness) -> None:
    identifier = gauge_identifier(point="5,5")
    error = gauge.rejected(NOTIFY, "river_gauge", identifier)
    assert error["message"] == (
        "identifier.point is only supported for watch/replay endpoints, not /notification"
    )
    query = {"basin": "rhine", "station": identifier["station"]}
    assert gauge.replay("river_gauge", query) == []


def test_notify_constraint_object_rejected(gauge: Harness) -> None:
    identifier = gauge_identifier(level_band={"gte": 2})
    error = gauge.rejected(NOTIFY, "river_gauge", identifier)
    assert "level_band" in error["message"], error


def test_payload_required_null_rejected(gauge: Harness) -> None:
    tag = unique_tag()
    error = gauge.rejected(NOTIFY, "strict_payload", {"tag": tag}, payload=None)
    assert "Payload is required" in error["message"], error
    gauge.rejected(NOTIFY, "strict_payload", {"tag": tag})
    assert gauge.replay("strict_payload", {"tag": tag}) == []
    gauge.notify_ok("strict_payload", {"tag": tag}, payload={"ok": 1})
    [event] = gauge.replay("strict_payload", {"tag": tag})
    assert event["data"]["payload"] == {"ok": 1}


def test_payload_optional_absent_stored_as_null(gauge: Harness) -> None:
    identifier = gauge_identifier()
    gauge.notify_ok("river_gauge", identifier)
    [event] = gauge.replay("river_gauge", {"basin": "rhine", "station": identifier["station"]})
    assert "payload" in event["data"]
    assert event["data"]["payload"] is None


# -- watch/replay presence rules -------------------------------------------


@pytest.mark.parametrize("path", STREAMS)
def test_required_field_missing_on_streams(gauge: Harness, path: str) -> None:
    error = gauge.rejected(path, "river_gauge", {"basin": "rhine"})
    operation = "watch" if path == WATCH else "replay"
    assert error["message"] == f"Required field 'station' missing for {operation} operation"


def test_optional_field_absent_is_wildcard(gauge: Harness) -> None:
    station = unique_station()
    dates = ["2025-07-06", "2024-02-29", "1999-12-31"]
    for day in dates:
        gauge.notify_ok("river_gauge", gauge_identifier(station=station, obs_date=day))
    gauge.notify_ok("river_gauge", gauge_identifier(station=station, basin="Elbe"))
    values = gauge.replay_values("river_gauge", {"basin": "rhine", "station": station}, "obs_date")
    assert values == ["20250706", "20240229", "19991231"]


def test_optional_field_absent_is_wildcard_live(gauge: Harness) -> None:
    station = unique_station()
    with gauge.live("river_gauge", {"basin": "rhine", "station": station}) as watch:
        gauge.notify_ok("river_gauge", gauge_identifier(station=station, obs_date="2001-01-01"))
        gauge.notify_ok("river_gauge", gauge_identifier(station=station, basin="Elbe"))
        gauge.notify_ok("river_gauge", gauge_identifier(station=unique_station()))
        gauge.notify_ok("river_gauge", gauge_identifier(station=station, obs_date="2002-02-02"))
        received = watch.notifications_until(
            lambda ce: ce["data"]["identifier"]["obs_date"] == "20020202"
        )
    assert [ce["data"]["identifier"]["obs_date"] for ce in received] == ["20010101", "20020202"]


def test_undeclared_key_refused_on_streams(gauge: Harness) -> None:
    # aviso-server 0.13 refuses undeclared keys that 0.7.1 ignored, and the answer
    # does not echo anything stored.
    identifier = gauge_identifier()
    gauge.notify_ok("river_gauge", identifier)
    query = {"basin": "rhine", "station": identifier["station"], "sensor": "x"}
    for path, operation in ((WATCH, "watch"), (REPLAY, "replay")):
        error = gauge.rejected(path, "river_gauge", query)
        assert error["message"] == f"Unknown field 'sensor' provided for {operation} operation"
        assert identifier["station"] not in json.dumps(error)


def test_station_star_matches_every_station(gauge: Harness) -> None:
    day = unique_date()
    stations = [unique_station(), unique_station(), unique_station()]
    for station in stations:
        gauge.notify_ok("river_gauge", gauge_identifier(station=station, obs_date=day))
    gauge.notify_ok("river_gauge", gauge_identifier(station=stations[0], basin="Danube"))
    query = {"basin": "rhine", "station": "*", "obs_date": day}
    assert gauge.replay_values("river_gauge", query, "station") == stations


def test_station_star_matches_every_station_live(gauge: Harness) -> None:
    day = unique_date()
    first, second = unique_station(), unique_station()
    query = {"basin": "rhine", "station": "*", "obs_date": day}
    with gauge.live("river_gauge", query) as watch:
        gauge.notify_ok("river_gauge", gauge_identifier(station=first, obs_date=day))
        gauge.notify_ok("river_gauge", gauge_identifier(station=first, obs_date=unique_date()))
        gauge.notify_ok("river_gauge", gauge_identifier(station=second, obs_date=day))
        received = watch.notifications_until(
            lambda ce: ce["data"]["identifier"]["station"] == second
        )
    assert [ce["data"]["identifier"]["station"] for ce in received] == [first, second]


def test_scalar_obs_time_outside_key_order_filters(gauge: Harness) -> None:
    station = publish_levels(gauge, "obs_time", ["09:30", "0930", "10", "0931"])
    assert delivered(gauge, station, "obs_time", "0930") == ["0930", "0930"]
    # The filter value is canonicalised like a notified one.
    assert delivered(gauge, station, "obs_time", "9:30") == ["0930", "0930"]
    assert delivered(gauge, station, "obs_time", "10") == ["1000"]
    assert delivered(gauge, station, "obs_time", "0800") == []


def test_scalar_quality_outside_key_order_filters(gauge: Harness) -> None:
    station = publish_levels(gauge, "quality", [0, 1, 2, 3, 2])
    assert delivered(gauge, station, "quality", 2) == ["2", "2"]
    assert delivered(gauge, station, "quality", "02") == ["2", "2"]
    assert delivered(gauge, station, "quality", 0) == ["0"]


@pytest.mark.parametrize("path", STREAMS)
def test_quality_range_still_enforced(gauge: Harness, path: str) -> None:
    error = gauge.rejected(path, "river_gauge", {"basin": "rhine", "station": "x", "quality": 7})
    assert "quality" in error["message"], error


# -- constraint objects ----------------------------------------------------


@pytest.mark.parametrize("path", STREAMS)
@pytest.mark.parametrize(
    ("field", "constraint"),
    [
        ("station", {"eq": "x"}),
        ("obs_date", {"eq": "20250706"}),
        ("obs_time", {"eq": "1200"}),
        ("run", {"eq": "0001"}),
        ("polygon", {"eq": "(0,0,0,10,10,10,10,0,0,0)"}),
    ],
    ids=["String", "Date", "Time", "Expver", "Polygon"],
)
def test_constraint_on_unsupported_handler(
    gauge: Harness, path: str, field: str, constraint: dict[str, Any]
) -> None:
    identifier = {"basin": "rhine", "station": "x", field: constraint}
    error = gauge.rejected(path, "river_gauge", identifier)
    assert "does not support constraint filters" in error["message"], error


@pytest.mark.parametrize("path", STREAMS)
@pytest.mark.parametrize("constraint", [{"gte": 2, "lt": 5}, {}, {"ge": 2}, {"GTE": 2}], ids=str)
def test_malformed_constraint_objects(
    gauge: Harness, path: str, constraint: dict[str, Any]
) -> None:
    identifier = {"basin": "rhine", "station": "x", "level_band": constraint}
    gauge.rejected(path, "river_gauge", identifier)


@pytest.mark.parametrize("path", STREAMS)
@pytest.mark.parametrize("operand", ["2", 2.0, True], ids=repr)
def test_int_operand_types_rejected(gauge: Harness, path: str, operand: Any) -> None:
    identifier = {"basin": "rhine", "station": "x", "level_band": {"gte": operand}}
    gauge.rejected(path, "river_gauge", identifier)


def test_int_operand_accepted(gauge: Harness) -> None:
    query = {"basin": "rhine", "station": "x", "level_band": {"gte": 2}}
    assert gauge.stream_status(WATCH, "river_gauge", query) == 200
    assert gauge.stream_status(REPLAY, "river_gauge", query) == 200
    station = publish_levels(gauge, "level_band", [1, 2, 3])
    assert delivered(gauge, station, "level_band", {"gte": 2}) == ["2", "3"]


@pytest.mark.parametrize("path", STREAMS)
@pytest.mark.parametrize("operand", [[5, 2], [2], [1, 2, 3]], ids=str)
def test_between_shapes_rejected(gauge: Harness, path: str, operand: Any) -> None:
    identifier = {"basin": "rhine", "station": "x", "level_band": {"between": operand}}
    gauge.rejected(path, "river_gauge", identifier)


def test_between_single_value(gauge: Harness) -> None:
    query = {"basin": "rhine", "station": "x", "level_band": {"between": [3, 3]}}
    assert gauge.stream_status(WATCH, "river_gauge", query) == 200
    station = publish_levels(gauge, "level_band", [2, 3, 4, 3])
    assert delivered(gauge, station, "level_band", {"between": [3, 3]}) == ["3", "3"]


@pytest.mark.parametrize("path", STREAMS)
@pytest.mark.parametrize("operand", [[], 4], ids=str)
def test_in_operand_rejected(gauge: Harness, path: str, operand: Any) -> None:
    identifier = {"basin": "rhine", "station": "x", "level_band": {"in": operand}}
    gauge.rejected(path, "river_gauge", identifier)


def test_in_matches_members_only(gauge: Harness) -> None:
    station = publish_levels(gauge, "level_band", list(range(10)))
    assert delivered(gauge, station, "level_band", {"in": [1, 4]}) == ["1", "4"]


@pytest.mark.parametrize("path", STREAMS)
def test_operand_outside_range_rejected(gauge: Harness, path: str) -> None:
    identifier = {"basin": "rhine", "station": "x", "level_band": {"lt": 12}}
    gauge.rejected(path, "river_gauge", identifier)


def test_operand_at_range_bound_accepted(gauge: Harness) -> None:
    query = {"basin": "rhine", "station": "x", "level_band": {"lte": 9}}
    assert gauge.stream_status(WATCH, "river_gauge", query) == 200
    station = publish_levels(gauge, "level_band", [0, 9, 5])
    assert delivered(gauge, station, "level_band", {"lte": 9}) == ["0", "9", "5"]
    assert delivered(gauge, station, "level_band", {"lte": 5}) == ["0", "5"]


def test_float_between_inclusive(gauge: Harness) -> None:
    station = publish_levels(gauge, "stage_m", [2.4, 2.5, 3, 3.5, 3.6])
    constraint = {"between": [2.5, 3.5]}
    assert delivered(gauge, station, "stage_m", constraint) == ["2.5", "3", "3.5"]


def test_float_eq_is_exact(gauge: Harness) -> None:
    station = publish_levels(gauge, "stage_m", ["0.3", "0.30000000000000004"])
    assert delivered(gauge, station, "stage_m", {"eq": 0.3}) == ["0.3"]


def test_float_integer_operand_accepted(gauge: Harness) -> None:
    query = {"basin": "rhine", "station": "x", "stage_m": {"gt": 5}}
    assert gauge.stream_status(WATCH, "river_gauge", query) == 200
    assert gauge.stream_status(REPLAY, "river_gauge", query) == 200
    station = publish_levels(gauge, "stage_m", [5, 5.5, 6])
    assert delivered(gauge, station, "stage_m", {"gt": 5}) == ["5.5", "6"]


def test_enum_in_case_insensitive(gauge: Harness) -> None:
    station = publish_levels(gauge, "basin", ["Danube", "RHINE", "elbe"])
    query = {"basin": {"in": ["RHINE", "elbe"]}, "station": station}
    assert gauge.replay_values("river_gauge", query, "basin") == ["rhine", "elbe"]


@pytest.mark.parametrize("path", STREAMS)
@pytest.mark.parametrize("constraint", [{"in": ["po"]}, {"eq": 1}, {"gt": "a"}], ids=str)
def test_enum_constraints_rejected(gauge: Harness, path: str, constraint: dict[str, Any]) -> None:
    error = gauge.rejected(path, "river_gauge", {"basin": constraint, "station": "x"})
    assert "basin" in error["message"], error


def test_constraint_outside_key_order(gauge: Harness) -> None:
    query = {"basin": "rhine", "station": "x", "quality": {"gte": 2}}
    assert gauge.stream_status(WATCH, "river_gauge", query) == 200
    station = publish_levels(gauge, "quality", [0, 3, 1, 2])
    assert delivered(gauge, station, "quality", {"gte": 2}) == ["3", "2"]


def test_constraint_outside_key_order_live(gauge: Harness) -> None:
    station = unique_station()
    query = {"basin": "rhine", "station": station, "quality": {"gte": 2}}
    with gauge.live("river_gauge", query) as watch:
        for quality, level in [(0, 1), (2, 2), (1, 3), (3, 4), (2, 5), (3, 9)]:
            identifier = gauge_identifier(station=station, quality=quality, level_band=level)
            gauge.notify_ok("river_gauge", identifier)
        # Same quality, other station: excluded by the topic.
        gauge.notify_ok("river_gauge", gauge_identifier(quality=3, level_band=6))
        sentinel = gauge_identifier(station=station, quality=2, level_band=0)
        gauge.notify_ok("river_gauge", sentinel)
        received = watch.notifications_until(
            lambda ce: ce["data"]["identifier"]["level_band"] == "0"
        )
    seen = [
        (ce["data"]["identifier"]["quality"], ce["data"]["identifier"]["level_band"])
        for ce in received
    ]
    assert seen == [("2", "2"), ("3", "4"), ("2", "5"), ("3", "9"), ("2", "0")]
