"""Replay end points (``to_id`` / ``to_date``),
``replay_started.end_sequence``, the opening rule, replay failures and the per-request replay
cap, on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from aviso_host.streaming.frames import BATCH_FAILED_MESSAGE
from aviso_host.streaming.stream import RESOLVE_TIMEOUT_SECONDS
from tests.conformance.helpers import (
    NOTIFY,
    REPLAY,
    REPLAY_STARTED_KEYS,
    WATCH,
    assert_error,
    gauge,
    open_stream,
    parse_ce_time,
    post,
    read_stream,
    replay_all,
    request_id_header,
    unique_basin,
)
from tests.support.configs import API_EXAMPLE, ForBackend, with_changes
from tests.support.failing_history import FailingHistoryPlugin, with_failing_history
from tests.support.server import RunningServer, running_server

AGGREGATE = "/api/v1/aggregate"
U64_MAX = 2**64 - 1
BOUNDED = [
    "replay-control/replay_started",
    "replay-control/replay_completed",
    "connection-closing",
]


def _body(basin: str, **fields: Any) -> dict[str, Any]:
    return {"event_type": "river_gauge", "identifier": {"basin": basin}, **fields}


def _stored(client: httpx.Client, count: int, **identifier: Any) -> tuple[str, list[int]]:
    """A fresh basin with ``count`` notifications; their sequences, oldest first."""
    basin = unique_basin()
    for level in range(count):
        gauge(client, basin, identifier.get("level", level))
    sequences = replay_all(client, "river_gauge", {"basin": basin}).sequences()
    assert len(sequences) == count
    return basin, sequences


def _replayed(result: Any) -> list[int]:
    return [event.data["sequence"] for event in result.notifications()]


def _ends_normally(result: Any) -> None:
    kinds = [kind for kind in result.kinds if kind != "replay"]
    assert kinds == BOUNDED, result.kinds
    assert result.events[-1].data["reason"] == "end_of_stream"
    assert result.ended


# -- to_id / to_date ---------------------------------------------------------------


def test_to_id_ends_the_replay_inclusively(client: httpx.Client) -> None:
    basin, sequences = _stored(client, 5)
    body = _body(basin, from_id=str(sequences[1]), to_id=str(sequences[3]))
    result = read_stream(client, REPLAY, body)
    _ends_normally(result)
    assert _replayed(result) == sequences[1:4]
    started = result.events[0].data
    assert set(started) == REPLAY_STARTED_KEYS
    assert started["end_sequence"] == sequences[3]
    assert started["from_sequence"] == sequences[1]
    assert started["request_id"] == request_id_header(result.response)


def test_from_id_equal_to_to_id_replays_one_message(client: httpx.Client) -> None:
    basin, sequences = _stored(client, 3)
    body = _body(basin, from_id=str(sequences[1]), to_id=str(sequences[1]))
    result = read_stream(client, REPLAY, body)
    _ends_normally(result)
    assert _replayed(result) == [sequences[1]]
    assert result.events[0].data["end_sequence"] == sequences[1]


def test_to_id_beyond_history_is_capped_at_the_last_stored_sequence(
    client: httpx.Client,
) -> None:
    basin, sequences = _stored(client, 3)
    result = read_stream(client, REPLAY, _body(basin, from_id="0", to_id=str(U64_MAX)))
    _ends_normally(result)
    assert _replayed(result) == sequences
    end = result.events[0].data["end_sequence"]
    assert isinstance(end, int) and sequences[-1] <= end < U64_MAX


def test_to_id_zero_is_valid(client: httpx.Client) -> None:
    basin, _ = _stored(client, 1)
    result = read_stream(client, REPLAY, _body(basin, from_id="0", to_id="0"))
    _ends_normally(result)
    assert _replayed(result) == []
    assert result.events[0].data["end_sequence"] == 0


def _storage_times(client: httpx.Client, basin: str) -> list[datetime]:
    result = replay_all(client, "river_gauge", {"basin": basin})
    return [parse_ce_time(event.data["time"]) for event in result.notifications()]


def test_to_date_ends_at_the_last_message_stored_at_or_before_it(client: httpx.Client) -> None:
    basin, sequences = _stored(client, 4)
    times = _storage_times(client, basin)
    # Rounded up to whole microseconds (the request's precision), the second storage time
    # itself: inclusive, so the second message is the last one replayed.
    second = times[1] + timedelta(microseconds=1) if times[1].microsecond else times[1]
    assert second < times[2]
    to_date = second.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    result = read_stream(client, REPLAY, _body(basin, from_id="0", to_date=to_date))
    _ends_normally(result)
    assert _replayed(result) == sequences[:2]
    end = result.events[0].data["end_sequence"]
    assert sequences[1] <= end < sequences[2]


@pytest.mark.parametrize(
    "to_date",
    ["2026-04-02 09:00:00+02:00", "1775113200", "1775113200000"],
    ids=["space-offset", "unix-seconds", "unix-ms"],
)
def test_to_date_accepts_every_date_format(client: httpx.Client, to_date: str) -> None:
    basin, sequences = _stored(client, 2)
    # 2026-04-02T07:00:00Z: before anything this suite stores, so the replay is empty.
    result = read_stream(client, REPLAY, _body(basin, from_id="0", to_date=to_date))
    _ends_normally(result)
    assert _replayed(result) == []
    end = result.events[0].data["end_sequence"]
    assert isinstance(end, int) and 0 <= end < sequences[0]


def test_to_date_before_every_message_is_an_empty_replay(client: httpx.Client) -> None:
    basin, sequences = _stored(client, 2)
    body = _body(basin, from_date="1500-01-01T00:00:00Z", to_date="1500-01-01T00:00:01Z")
    result = read_stream(client, REPLAY, body)
    _ends_normally(result)
    assert _replayed(result) == []
    end = result.events[0].data["end_sequence"]
    assert isinstance(end, int) and 0 <= end < sequences[0]


def test_to_date_beyond_every_backend_range_replays_everything(client: httpx.Client) -> None:
    basin, sequences = _stored(client, 3)
    for to_date in ("10000000000", "9999-12-31T23:59:59Z"):
        result = read_stream(client, REPLAY, _body(basin, from_id="0", to_date=to_date))
        _ends_normally(result)
        assert _replayed(result) == sequences
        assert result.events[0].data["end_sequence"] >= sequences[-1]


def test_from_date_far_in_the_past_replays_everything(client: httpx.Client) -> None:
    basin, sequences = _stored(client, 2)
    result = read_stream(client, REPLAY, _body(basin, from_date="1500-01-01T00:00:00Z"))
    _ends_normally(result)
    assert _replayed(result) == sequences


def test_mixed_kinds_are_not_compared(client: httpx.Client) -> None:
    basin, sequences = _stored(client, 2)
    start = datetime.now(UTC) + timedelta(days=1)
    body = _body(basin, from_date=start.strftime("%Y-%m-%dT%H:%M:%SZ"), to_id="1")
    result = read_stream(client, REPLAY, body)
    _ends_normally(result)
    assert _replayed(result) == []
    body = _body(basin, from_id=str(sequences[1]), to_date="2000-01-01T00:00:00Z")
    result = read_stream(client, REPLAY, body)
    _ends_normally(result)
    assert _replayed(result) == []


def test_end_sequence_is_null_without_an_end_point(client: httpx.Client) -> None:
    basin, sequences = _stored(client, 1)
    result = read_stream(client, REPLAY, _body(basin, from_id="0"))
    assert result.events[0].data["end_sequence"] is None
    assert _replayed(result) == sequences
    with open_stream(client, WATCH, _body(basin, from_id="0")) as stream:
        started = stream.next()
    assert started is not None and started.kind == "replay-control/replay_started"
    assert set(started.data) == REPLAY_STARTED_KEYS
    assert started.data["end_sequence"] is None


REPLAY_ERRORS = [
    ({"to_id": "3"}, "Replay endpoint requires either from_id or from_date parameter."),
    (
        {"from_id": "1", "to_id": "3", "to_date": "2026-01-01T00:00:00Z"},
        "Cannot specify both to_id and to_date. Please provide only one replay end parameter.",
    ),
    ({"from_id": "1", "to_id": ""}, "to_id cannot be empty"),
    ({"from_id": "1", "to_id": " "}, "to_id cannot be empty"),
    ({"from_id": "1", "to_id": "-3"}, "to_id must be a valid positive integer. Got: '-3'"),
    ({"from_id": "1", "to_id": "soon"}, "to_id must be a valid positive integer. Got: 'soon'"),
    ({"from_id": "1", "to_id": str(U64_MAX + 1)}, "to_id must be a valid positive integer"),
    ({"from_id": "1", "to_date": ""}, "to_date cannot be empty"),
    ({"from_id": "1", "to_date": "tomorrow"}, "to_date must be a valid datetime/timestamp"),
    ({"from_id": "5", "to_id": "4"}, "to_id (4) must not be lower than from_id (5)"),
    (
        {"from_date": "2025-06-09T13:15:00Z", "to_date": "2025-06-09T13:14:59.5Z"},
        "to_date (2025-06-09T13:14:59.500+00:00) must not be earlier than "
        "from_date (2025-06-09T13:15:00+00:00)",
    ),
    ({"from_id": "x", "to_id": "y"}, "from_id must be a valid positive integer"),
]


@pytest.mark.parametrize(("fields", "prefix"), REPLAY_ERRORS)
def test_replay_end_validation(client: httpx.Client, fields: dict[str, str], prefix: str) -> None:
    error = assert_error(
        post(client, REPLAY, _body(unique_basin(), **fields)), 400, "INVALID_REPLAY_REQUEST"
    )
    assert error["message"].startswith(prefix), error["message"]


@pytest.mark.parametrize("field", ["to_id", "to_date"])
@pytest.mark.parametrize(
    ("path", "code", "name"),
    [
        (WATCH, "INVALID_WATCH_REQUEST", "watch"),
        (NOTIFY, "INVALID_NOTIFICATION_REQUEST", "notification"),
        (AGGREGATE, "INVALID_AGGREGATE_REQUEST", "aggregate"),
    ],
)
def test_end_points_belong_to_the_replay_endpoint(
    client: httpx.Client, field: str, path: str, code: str, name: str
) -> None:
    body = _body(unique_basin(), from_id="1", **{field: "5"})
    if path == NOTIFY:
        body["identifier"].update(date="2026-04-02", level=1)
    if path == AGGREGATE:
        body["group_by"] = ["level"]
    error = assert_error(post(client, path, body), 400, code)
    assert error["message"] == (
        f"to_id and to_date are only supported for the replay endpoint, not /{name}"
    )


def test_end_points_must_be_strings(client: httpx.Client) -> None:
    error = assert_error(
        post(client, REPLAY, _body(unique_basin(), from_id="1", to_id=3)),
        400,
        "INVALID_REQUEST_SHAPE",
    )
    assert "expected a string" in error["message"]


# -- opening rule and failures --------------------------------------------------------


def test_an_empty_replay_still_opens_with_replay_started(client: httpx.Client) -> None:
    result = read_stream(client, REPLAY, _body(unique_basin(), from_id=str(U64_MAX)))
    # Beyond the stream's end: the gap is reported after the opening, nothing is replayed.
    assert result.kinds[1] == "replay-control/history_gap"
    assert [kind for kind in result.kinds if kind != "replay-control/history_gap"] == BOUNDED
    assert result.events[-1].data["reason"] == "end_of_stream" and result.ended
    assert result.events[0].data["end_sequence"] is None


@pytest.fixture(scope="module")
def failing_server(for_backend: ForBackend) -> Iterator[RunningServer]:
    document = with_changes(API_EXAMPLE, watch_endpoint={"replay_batch_size": 1})
    document = with_failing_history(for_backend(document))
    with running_server(document, extra_plugins=[FailingHistoryPlugin()]) as server:
        yield server


@pytest.fixture
def failing(failing_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=failing_server.url, timeout=10.0) as http:
        yield http


@pytest.mark.parametrize("path", [REPLAY, WATCH])
@pytest.mark.parametrize("when", ["failing-now", "failing-later"])
def test_a_failed_history_read_ends_the_stream(failing: httpx.Client, path: str, when: str) -> None:
    basin = f"{when}-{unique_basin()}"
    for level in range(3):
        gauge(failing, basin, level)
    result = read_stream(failing, path, _body(basin, from_id="0"))
    events = [event for event in result.events if event.name != "heartbeat"]
    kinds = [event.kind for event in events]
    replayed = 0 if when == "failing-now" else 1
    assert kinds == [
        "replay-control/replay_started",
        *["replay"] * replayed,
        "error",
        "connection-closing",
    ]
    error = events[kinds.index("error")].data
    assert error == {
        "error": "stream_processing_failed",
        "message": BATCH_FAILED_MESSAGE,
        "topic": f"gauge.{basin}.*.*",
        "request_id": result.events[0].data["request_id"],
    }
    assert result.events[-1].data["reason"] == "end_of_stream"
    assert result.ended, "a watch whose replay failed never goes live"


@pytest.mark.parametrize(
    ("path", "fields"),
    [(REPLAY, {"to_id": "5"}), (REPLAY, {"to_date": "2030-01-01T00:00:00Z"}), (WATCH, {})],
    ids=["replay-to-id", "replay-to-date", "watch"],
)
def test_a_failed_bound_resolution_still_opens_then_ends(
    failing: httpx.Client, path: str, fields: dict[str, str]
) -> None:
    basin = f"failing-bound-{unique_basin()}"
    gauge(failing, basin, 1)
    result = read_stream(failing, path, _body(basin, from_id="0", **fields))
    events = [event for event in result.events if event.name != "heartbeat"]
    assert [event.kind for event in events] == [
        "replay-control/replay_started",
        "error",
        "connection-closing",
    ]
    assert events[0].data["end_sequence"] is None
    assert events[1].data["error"] == "stream_processing_failed"
    assert events[1].data["request_id"] == events[0].data["request_id"]
    assert events[-1].data["reason"] == "end_of_stream"
    assert result.ended


def test_a_stalled_bound_resolution_opens_within_the_clients_deadline(
    failing: httpx.Client,
) -> None:
    """pyaviso gives up 10 s after the request: the resolution is bounded below that."""
    basin = f"stalled-bound-{unique_basin()}"
    gauge(failing, basin, 1)
    result = read_stream(failing, REPLAY, _body(basin, from_id="0", to_id="9"), timeout=30)
    assert result.kinds == ["replay-control/replay_started", "error", "connection-closing"]
    assert result.events[0].data["end_sequence"] is None
    assert result.events[1].data["message"] == (
        f"resolving the replay bounds took over {RESOLVE_TIMEOUT_SECONDS:g} s"
    )
    assert result.events[-1].data["reason"] == "end_of_stream"


# -- the replay cap ------------------------------------------------------------------


@pytest.fixture
def watch_settings() -> dict[str, Any]:
    """The per-request replay cap of ``custom`` (the conformance conftest's server); a
    test's parametrisation replaces it."""
    return {"max_historical_notifications": 2}


def _limited(result: Any, replayed: int) -> None:
    events = [event for event in result.events if event.name != "heartbeat"]
    kinds = [event.kind for event in events]
    assert kinds == [
        "replay-control/replay_started",
        *["replay"] * replayed,
        "replay-control/notification_replay_limit_reached",
        "connection-closing",
    ]
    limit = events[-2].data
    assert set(limit) == {"max_allowed", "message", "timestamp", "topic", "type"}
    assert limit["max_allowed"] == 2
    assert result.events[-1].data["reason"] == "end_of_stream"
    assert result.ended


@pytest.mark.parametrize("path", [REPLAY, WATCH])
def test_cap_with_one_more_match_flags_and_ends(custom: httpx.Client, path: str) -> None:
    basin = unique_basin()
    for level in range(3):
        gauge(custom, basin, level)
    result = read_stream(custom, path, _body(basin, from_id="0"))
    _limited(result, 2)


@pytest.mark.parametrize(
    "watch_settings",
    [{"max_historical_notifications": 2, "replay_batch_size": 1}],
    ids=["batch-of-one"],
)
def test_cap_counts_delivered_matches_after_filtering(custom: httpx.Client) -> None:
    basin = unique_basin()
    for level in (1, 2, 1, 2, 2, 2):
        gauge(custom, basin, level)
    body = {"event_type": "river_gauge", "identifier": {"basin": basin, "level": 1}}
    result = read_stream(custom, REPLAY, {**body, "from_id": "0"})
    # Two matches among six records: the cap is filled, and the look-ahead through the
    # (non-matching) rest finds no third one, so the replay completes.
    _ends_normally(result)
    assert len(result.notifications()) == 2
    gauge(custom, basin, 1)
    _limited(read_stream(custom, REPLAY, {**body, "from_id": "0"}), 2)


def test_cap_exactly_filled_inside_the_window_completes(custom: httpx.Client) -> None:
    basin, sequences = _stored(custom, 2)
    for level in range(3):
        gauge(custom, basin, level)
    body = _body(basin, from_id=str(sequences[0]), to_id=str(sequences[1]))
    result = read_stream(custom, REPLAY, body)
    _ends_normally(result)
    assert _replayed(result) == sequences
    assert result.events[0].data["end_sequence"] == sequences[1]


def test_cap_is_per_request(custom: httpx.Client) -> None:
    basin, sequences = _stored(custom, 2)
    for _ in range(2):
        result = read_stream(custom, REPLAY, _body(basin, from_id="0"))
        _ends_normally(result)
        assert _replayed(result) == sequences


def test_a_live_only_watch_is_not_capped(custom: httpx.Client) -> None:
    basin = unique_basin()
    with open_stream(custom, WATCH, _body(basin)) as stream:
        stream.until_kind("live-notification/connection_established")
        for level in range(4):
            gauge(custom, basin, level)
        for _ in range(4):
            stream.until_kind("live-notification")


def test_a_watch_starting_beyond_history_goes_live(custom: httpx.Client) -> None:
    basin, sequences = _stored(custom, 1)
    with open_stream(custom, WATCH, _body(basin, from_id=str(U64_MAX))) as stream:
        stream.until_kind("replay-control/replay_completed")
        gauge(custom, basin, 7)
        live = stream.until_kind("live-notification")
    assert live.data["data"]["identifier"]["level"] == "7"
    assert live.data["sequence"] > sequences[-1]


@pytest.mark.parametrize(
    "watch_settings",
    [{"max_queue_bytes": 2048, "replay_batch_size": 1, "replay_batch_delay_ms": 200}],
    ids=["tiny-live-buffer"],
)
def test_a_live_buffer_overflow_during_the_replay_loses_nothing(custom: httpx.Client) -> None:
    """Records stored above ``H`` while a watch replays wait in its live buffer; when that
    overflows, the replay reads what the buffer dropped before the watch goes live."""
    basin = unique_basin()
    for n in range(2):
        gauge(custom, basin, 1, payload={"n": n})
    numbers: list[int] = []

    def notifications(count: int) -> Any:
        def seen(event: Any) -> bool:
            if event.name in ("replay", "live-notification") and "specversion" in event.data:
                numbers.append(event.data["data"]["payload"]["n"])
            return len(numbers) >= count

        return seen

    body = {**_body(basin, from_id="0"), "identifier": {"basin": basin, "level": 1}}
    with open_stream(custom, WATCH, body) as stream:
        stream.until_kind("replay-control/replay_started")
        # Each record costs over 512 bytes of the 2048-byte buffer: most of these overflow.
        for n in range(2, 12):
            gauge(custom, basin, 1, payload={"n": n})
        stream.until(notifications(12))
        gauge(custom, basin, 1, payload={"n": 12})
        stream.until(notifications(13))
    assert numbers == list(range(13)), "every notification once, in order"
    kinds = [event.kind for event in stream.events if event.name != "heartbeat"]
    switch = kinds.index("replay-control/replay_completed")
    assert set(kinds[1:switch]) == {"replay"}
    assert set(kinds[switch + 1 :]) == {"live-notification"}
    assert switch > 3, "the dropped records were replayed"
