"""Start cursors, spatial sanity and watch/replay identifiers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conformance.helpers import (
    POLYGON_AROUND_ZURICH,
    REPLAY,
    WATCH,
    assert_error,
    gauge,
    post,
    read_stream,
    unique_basin,
)

REPLAY_INVALID = "INVALID_REPLAY_REQUEST"
WATCH_INVALID = "INVALID_WATCH_REQUEST"


def _replay(basin: str, **cursor: Any) -> dict[str, Any]:
    return {"event_type": "river_gauge", "identifier": {"basin": basin}, **cursor}


def test_replay_requires_a_cursor(client: httpx.Client) -> None:
    assert_error(
        post(client, REPLAY, _replay("rhine")),
        400,
        REPLAY_INVALID,
        error="Invalid Replay Request",
        message=(
            "Replay endpoint requires either from_id or from_date parameter. "
            "Use from_id for sequence-based replay or from_date for time-based replay."
        ),
    )


def test_null_cursors_count_as_absent(client: httpx.Client) -> None:
    body = _replay("rhine", from_id=None, from_date=None)
    error = assert_error(post(client, REPLAY, body), 400, REPLAY_INVALID)
    assert error["message"].startswith("Replay endpoint requires either from_id or from_date")


@pytest.mark.parametrize("path", [WATCH, REPLAY])
def test_both_cursors_rejected(client: httpx.Client, path: str) -> None:
    body = _replay("rhine", from_id="1", from_date="2026-04-01T00:00:00Z")
    code = WATCH_INVALID if path == WATCH else REPLAY_INVALID
    error = assert_error(
        post(client, path, body),
        400,
        code,
        message_prefix="Cannot specify both from_id and from_date.",
    )
    assert error["message"] == (
        "Cannot specify both from_id and from_date. Please provide only one replay parameter. "
        "Use from_id for sequence-based replay or from_date for time-based replay."
    )


def test_invalid_from_id_reported_before_exclusivity(client: httpx.Client) -> None:
    body = _replay("rhine", from_id="abc", from_date="2026-04-01T00:00:00Z")
    assert_error(
        post(client, WATCH, body),
        400,
        WATCH_INVALID,
        message_prefix="from_id must be a valid positive integer.",
    )


@pytest.mark.parametrize(
    "from_id", ["abc", "-1", " 5", "1.5", "5_0", "٣", "18446744073709551616", "5 "]
)
def test_invalid_from_id(client: httpx.Client, from_id: str) -> None:
    error = assert_error(
        post(client, REPLAY, _replay("rhine", from_id=from_id)),
        400,
        REPLAY_INVALID,
        message_prefix="from_id must be a valid positive integer.",
    )
    assert error["message"] == (
        f"from_id must be a valid positive integer. Got: '{from_id}'. "
        "Valid examples: '1', '123', '9999'"
    )


@pytest.mark.parametrize("from_id", ["", "   "])
def test_empty_from_id(client: httpx.Client, from_id: str) -> None:
    assert_error(
        post(client, REPLAY, _replay("rhine", from_id=from_id)),
        400,
        REPLAY_INVALID,
        message_prefix="from_id cannot be empty",
    )


def test_plus_sign_from_id(client: httpx.Client) -> None:
    result = read_stream(client, REPLAY, _replay(unique_basin(), from_id="+5"))
    started = result.events[0]
    assert started.kind == "replay-control/replay_started"
    assert started.data["from_sequence"] == 5
    assert isinstance(started.data["from_sequence"], int)
    assert started.data["from_date"] is None


def test_from_id_zero_replays_all_retained_history(client: httpx.Client) -> None:
    basin = unique_basin()
    for level in (1, 2, 3):
        gauge(client, basin, level, payload={"level": level})
    result = read_stream(client, REPLAY, _replay(basin, from_id="0"))
    assert result.events[0].data["from_sequence"] == 0
    payloads = [event.data["data"]["payload"] for event in result.notifications()]
    assert payloads == [{"level": 1}, {"level": 2}, {"level": 3}]


def test_from_id_max_u64_is_valid(client: httpx.Client) -> None:
    result = read_stream(client, REPLAY, _replay(unique_basin(), from_id="18446744073709551615"))
    assert result.events[0].data["from_sequence"] == 18446744073709551615
    assert result.notifications() == []


@pytest.mark.parametrize(
    "from_date",
    [
        "2026-04-01",
        "2026-04-01T06:30",
        "-1",
        "yesterday",
        "2026-04-01T06:30:00+0200",
        "99999999999999999999999",
    ],
)
def test_invalid_from_date(client: httpx.Client, from_date: str) -> None:
    error = assert_error(
        post(client, REPLAY, _replay("rhine", from_date=from_date)),
        400,
        REPLAY_INVALID,
        message_prefix="from_date must be a valid datetime/timestamp.",
    )
    assert error["message"].startswith(
        f"from_date must be a valid datetime/timestamp. Got: '{from_date}'. Error: "
    )
    assert error["message"].endswith(
        "Valid examples: '2025-06-09T13:15:00Z', '2025-06-09 13:15:00+00:00', "
        "'2025-06-09 13:15:00', '1740509903', '1740509903710'"
    )


def test_negative_epoch_reason(client: httpx.Client) -> None:
    error = assert_error(
        post(client, REPLAY, _replay("rhine", from_date="-1")), 400, REPLAY_INVALID
    )
    assert "negative unix timestamps are not supported: '-1'" in error["message"]


def test_empty_from_date(client: httpx.Client) -> None:
    assert_error(
        post(client, REPLAY, _replay("rhine", from_date="  ")),
        400,
        REPLAY_INVALID,
        message_prefix="from_date cannot be empty",
    )


@pytest.mark.parametrize(
    ("from_date", "expected"),
    [
        ("1740509903", "2025-02-25T18:58:23Z"),
        ("1740509903710", "2025-02-25T18:58:23Z"),
        ("946684800000", "2000-01-01T00:00:00Z"),
        ("10000000000", "2286-11-20T17:46:40Z"),
        ("00000000001740509903", "2025-02-25T18:58:23Z"),
        ("2026-04-01T08:30:00+02:00", "2026-04-01T06:30:00Z"),
        ("2026-04-01 06:30:00", "2026-04-01T06:30:00Z"),
        ("2026-04-01 06:30:00.999", "2026-04-01T06:30:00Z"),
        ("+1740509903", "2025-02-25T18:58:23Z"),
        ("0", "1970-01-01T00:00:00Z"),
        ("1775032200500", "2026-04-01T08:30:00Z"),
        ("2026-04-01t06:30:00.25+02:00", "2026-04-01T04:30:00Z"),
        ("2026-04-01 06:30:00Z", "2026-04-01T06:30:00Z"),
        ("2026-04-01 06:30:00+00:00", "2026-04-01T06:30:00Z"),
        ("2026-04-01T06:30:00", "2026-04-01T06:30:00Z"),
        (" 2026-04-01T06:30:00z ", "2026-04-01T06:30:00Z"),
    ],
)
def test_from_date_forms(client: httpx.Client, from_date: str, expected: str) -> None:
    result = read_stream(
        client,
        REPLAY,
        _replay(unique_basin(), from_date=from_date),
        until="replay-control/replay_started",
    )
    started = result.events[0].data
    assert started["type"] == "replay_started"
    assert started["from_date"] == expected
    assert started["from_sequence"] is None


def test_polygon_and_point_together(client: httpx.Client) -> None:
    body = {
        "event_type": "storm_cell",
        "identifier": {"polygon": POLYGON_AROUND_ZURICH, "point": "47.3,8.5"},
    }
    assert_error(
        post(client, WATCH, body),
        400,
        WATCH_INVALID,
        error="Invalid Watch Request",
        message_prefix="Cannot specify both identifier.polygon and identifier.point",
    )


def test_spatial_sanity_precedes_cursor_rules(client: httpx.Client) -> None:
    body = {
        "event_type": "storm_cell",
        "identifier": {"polygon": POLYGON_AROUND_ZURICH, "point": "47.3,8.5"},
        "from_id": "abc",
    }
    assert_error(
        post(client, WATCH, body),
        400,
        WATCH_INVALID,
        message_prefix="Cannot specify both identifier.polygon and identifier.point",
    )


@pytest.mark.parametrize(
    ("point", "prefix"),
    [
        ("north", "identifier.point must be a valid 'lat,lon' coordinate pair: "),
        ({"lat": 1}, "identifier.point must be a [lat, lon] array or a string"),
        # Arrays are accepted since upstream 0.11 (this case expected "must be a scalar
        # value"); their members must be numbers.
        (["47.3", "8.5"], "identifier.point must be a valid 'lat,lon' coordinate pair: "),
    ],
    ids=["text", "object", "array-of-strings"],
)
def test_invalid_point(client: httpx.Client, point: Any, prefix: str) -> None:
    body = {"event_type": "storm_cell", "identifier": {"point": point}, "from_id": "1"}
    assert_error(
        post(client, REPLAY, body),
        400,
        REPLAY_INVALID,
        error="Invalid Replay Request",
        message_prefix=prefix,
    )


def test_required_field_missing_on_watch(client: httpx.Client) -> None:
    body = {"event_type": "river_gauge", "identifier": {"level": 3}}
    assert_error(
        post(client, WATCH, body),
        400,
        WATCH_INVALID,
        message="Required field 'basin' missing for watch operation",
    )


def test_required_field_missing_on_replay(client: httpx.Client) -> None:
    body = {"event_type": "river_gauge", "identifier": {}, "from_id": "1"}
    assert_error(
        post(client, REPLAY, body),
        400,
        REPLAY_INVALID,
        message="Required field 'basin' missing for replay operation",
    )


def test_undeclared_key_refused_on_watch(client: httpx.Client) -> None:
    # aviso-server 0.13 refuses what 0.7.1 silently ignored.
    body = {"event_type": "river_gauge", "identifier": {"basin": unique_basin(), "colour": "red"}}
    assert_error(
        post(client, WATCH, body),
        400,
        WATCH_INVALID,
        message="Unknown field 'colour' provided for watch operation",
    )


def test_undeclared_constraint_key_refused_on_replay(client: httpx.Client) -> None:
    body = {
        "event_type": "river_gauge",
        "identifier": {"basin": unique_basin(), "severtiy": {"gte": 3}},
        "from_id": "1",
    }
    assert_error(
        post(client, REPLAY, body),
        400,
        REPLAY_INVALID,
        message="Unknown field 'severtiy' provided for replay operation",
    )
