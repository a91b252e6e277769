"""SSE headers, framing, event catalogue and stream lifecycles."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tests.conformance.helpers import (
    CLOUDEVENT_KEYS,
    CLOUDEVENT_TIME_RE,
    POLYGON_AROUND_ZURICH,
    POLYGON_ELSEWHERE,
    REPLAY,
    REPLAY_STARTED_KEYS,
    SECOND_TS_RE,
    WATCH,
    gauge,
    is_ce,
    notify,
    open_stream,
    parse_ce_time,
    read_stream,
    replay_all,
    request_id_header,
    unique_basin,
    unique_date,
)
from tests.support.configs import API_EXAMPLE

BASE_URL = API_EXAMPLE["application"]["base_url"]
LIMIT_MESSAGE = (
    "Historical replay limited to 2 messages. Additional historical messages may be "
    "available but were not retrieved."
)


def _live(basin: str, **identifier: Any) -> dict[str, Any]:
    return {"event_type": "river_gauge", "identifier": {"basin": basin, **identifier}}


def _from(basin: str, **cursor: Any) -> dict[str, Any]:
    return {"event_type": "river_gauge", "identifier": {"basin": basin}, **cursor}


def _settings(**values: Any) -> Any:
    return pytest.mark.parametrize("watch_settings", [values], ids=[""])


# -- 32–37: live-only watch ------------------------------------------------------------------


def test_sse_response_headers(client: httpx.Client) -> None:
    with open_stream(client, WATCH, _live(unique_basin())) as stream:
        headers = stream.response.headers
        assert headers["content-type"] == "text/event-stream"
        assert headers["cache-control"] == "no-cache"
        assert headers["x-accel-buffering"] == "no"
        assert headers["access-control-allow-origin"] == "*"
        assert headers["connection"] == "keep-alive"
        request_id_header(stream.response)


def test_connection_established_first(client: httpx.Client) -> None:
    basin = unique_basin()
    with open_stream(client, WATCH, _live(basin)) as stream:
        first = stream.next()
        assert first is not None
        assert first.name == "live-notification"
        assert set(first.data) == {
            "connection_will_close_in_seconds",
            "request_id",
            "timestamp",
            "topic",
            "type",
        }
        assert first.data["type"] == "connection_established"
        assert first.data["request_id"] == request_id_header(stream.response)
        assert first.data["connection_will_close_in_seconds"] == 900
        assert first.data["topic"] == f"gauge.{basin}.*.*"


def test_first_heartbeat_is_immediate(client: httpx.Client) -> None:
    basin = unique_basin()
    with open_stream(client, WATCH, _live(basin)) as stream:
        stream.next()
        opened = time.monotonic()
        second = stream.next()
        elapsed = time.monotonic() - opened
    assert second is not None
    assert second.name == "heartbeat"
    assert set(second.data) == {"timestamp", "topic"}
    assert second.data["topic"] == f"gauge.{basin}.*.*"
    # Half the interval: room for a loaded machine, and still not the interval's end.
    assert elapsed < 15.0, "the configured interval is 30 s: the first heartbeat is at t≈0"


@_settings(sse_heartbeat_interval_sec=2)
def test_heartbeats_follow_the_interval(custom: httpx.Client) -> None:
    # Timed from before the request: the server cannot have sent a heartbeat earlier, however
    # late a loaded machine lets the client read it.
    opened = time.monotonic()
    with open_stream(custom, WATCH, _live(unique_basin())) as stream:
        assert stream.next().kind == "live-notification/connection_established"  # type: ignore[union-attr]
        assert stream.next().name == "heartbeat"  # type: ignore[union-attr]
        arrivals = []
        while len(arrivals) < 2:
            event = stream.until(lambda event: event.name == "heartbeat", timeout=15)
            assert set(event.data) == {"timestamp", "topic"}
            arrivals.append(time.monotonic() - opened)
    # Half the default 30 s interval: the configured 2 s, with room for a loaded machine.
    assert arrivals[1] < 15.0, arrivals
    assert arrivals[0] > 1.0, f"heartbeats come every 2 s, not back to back: {arrivals}"


def test_no_id_or_retry_lines(client: httpx.Client) -> None:
    basin = unique_basin()
    gauge(client, basin, 4)
    replay = read_stream(client, REPLAY, _from(basin, from_id="0"))
    with open_stream(client, WATCH, _from(basin, from_id="0")) as watch:
        watch.until_kind("replay-control/replay_completed")
        gauge(client, basin, 5)
        watch.until_kind("live-notification")
        watch_raw = watch.raw
    for raw in (replay.raw, watch_raw):
        assert not raw.startswith("\ufeff")
        assert "\r" not in raw
        lines = raw.split("\n")
        assert not any(line.startswith(("id:", "retry:", ":")) for line in lines), raw
        data_lines = [line for line in lines if line.startswith("data:")]
        assert data_lines
        for line in data_lines:
            assert line.startswith("data: {") and line.endswith("}")


def test_live_only_watch_and_cloudevent_envelope(client: httpx.Client) -> None:
    basin = unique_basin()
    gauge(client, basin, 1, payload={"when": "before"})
    with open_stream(client, WATCH, _live(basin)) as stream:
        stream.until_kind("live-notification/connection_established")
        gauge(client, basin, 6, payload={"when": "after"})
        event = stream.until(lambda event: event.name != "heartbeat")
    assert event.name == "live-notification"
    cloudevent = event.data
    assert cloudevent["data"]["payload"] == {"when": "after"}, "the earlier one is not delivered"
    sequence = cloudevent["sequence"]
    assert isinstance(sequence, int) and not isinstance(sequence, bool)
    assert set(cloudevent) == set(CLOUDEVENT_KEYS)
    assert cloudevent["specversion"] == "1.0"
    assert cloudevent["type"] == "int.ecmwf.aviso.river_gauge"
    assert cloudevent["source"] == BASE_URL
    assert cloudevent["dataschema"] == BASE_URL + "/schema/river_gauge"
    assert cloudevent["datacontenttype"] == "application/json"
    assert cloudevent["id"] == f"river_gauge@{sequence}"
    assert CLOUDEVENT_TIME_RE.match(cloudevent["time"])
    assert "request_id" not in cloudevent
    assert cloudevent["data"]["identifier"] == {"basin": basin, "date": "20260402", "level": "6"}


def test_constraint_filters_live_notifications(client: httpx.Client) -> None:
    basin = unique_basin()
    with open_stream(client, WATCH, _live(basin, level={"gte": 4})) as stream:
        stream.until_kind("live-notification/connection_established")
        gauge(client, basin, 2)
        gauge(client, basin, 5)
        event = stream.until(lambda event: event.name != "heartbeat")
    assert event.name == "live-notification"
    assert event.data["data"]["identifier"]["level"] == "5"


# -- 38–46: replay ----------------------------------------------------------------------------


def test_replay_transcript(client: httpx.Client) -> None:
    basin = unique_basin()
    for level in (1, 2, 3):
        gauge(client, basin, level)
    first = replay_all(client, "river_gauge", {"basin": basin}).sequences()[0]
    result = read_stream(client, REPLAY, _from(basin, from_id=str(first)))
    assert result.ended, "the response body ends after connection-closing"
    assert result.kinds == [
        "replay-control/replay_started",
        "replay",
        "replay",
        "replay",
        "replay-control/replay_completed",
        "connection-closing",
    ]
    request_id = request_id_header(result.response)
    started = result.events[0].data
    assert set(started) == REPLAY_STARTED_KEYS
    assert started["request_id"] == request_id
    assert started["batch_size"] == 100
    assert started["from_sequence"] == first
    assert started["from_date"] is None
    assert started["end_sequence"] is None, "no end point requested"
    assert started["topic"] == f"gauge.{basin}.*.*"
    sequences = result.sequences()
    assert sequences[0] == first
    assert sequences == sorted(set(sequences))
    completed = result.events[-2].data
    assert set(completed) == {"timestamp", "topic", "type"}
    closing = result.events[-1].data
    assert set(closing) == {"message", "reason", "request_id", "timestamp", "topic"}
    assert closing["reason"] == "end_of_stream"
    assert closing["message"] == "Stream completed"
    assert closing["request_id"] == request_id
    assert closing["topic"] == f"gauge.{basin}.*.*"


@_settings(sse_heartbeat_interval_sec=1, replay_batch_size=1, replay_batch_delay_ms=500)
def test_replay_endpoint_has_no_heartbeats(custom: httpx.Client) -> None:
    basin = unique_basin()
    for level in range(5):
        gauge(custom, basin, level)
    started = time.monotonic()
    result = read_stream(custom, REPLAY, _from(basin, from_id="0"), timeout=20)
    assert time.monotonic() - started > 1.5, "the replay spanned more than one interval"
    assert len(result.notifications()) == 5
    assert "heartbeat" not in result.kinds
    assert result.events[0].data["batch_size"] == 1


def test_from_id_is_inclusive(client: httpx.Client) -> None:
    basin = unique_basin()
    for level in (1, 2, 3):
        gauge(client, basin, level)
    sequences = replay_all(client, "river_gauge", {"basin": basin}).sequences()
    middle = sequences[1]
    again = replay_all(client, "river_gauge", {"basin": basin}, from_id=str(middle))
    assert again.sequences() == sequences[1:]
    assert again.notifications()[0].data["id"] == f"river_gauge@{middle}"


def test_from_id_beyond_newest_is_empty(client: httpx.Client) -> None:
    basin = unique_basin()
    gauge(client, basin)
    (newest,) = replay_all(client, "river_gauge", {"basin": basin}).sequences()
    assert replay_all(client, "river_gauge", {"basin": basin}, str(newest + 1)).sequences() == []


def test_reconnect_with_next_sequence(client: httpx.Client) -> None:
    basin = unique_basin()
    other = unique_basin()
    for level in (1, 2):
        gauge(client, basin, level)
    seen = replay_all(client, "river_gauge", {"basin": basin}).sequences()
    last = seen[-1]
    gauge(client, other, 3)  # non-matching, between the two sessions
    for level in (4, 5):
        gauge(client, basin, level)
    later = replay_all(client, "river_gauge", {"basin": basin}, from_id=str(last + 1))
    assert len(later.sequences()) == 2
    assert all(sequence > last for sequence in later.sequences())
    levels = [event.data["data"]["identifier"]["level"] for event in later.notifications()]
    assert levels == ["4", "5"]


def test_from_date_between_two_notifications(client: httpx.Client) -> None:
    basin = unique_basin()
    gauge(client, basin, 1)
    time.sleep(0.15)  # creates the ≥ 100 ms gap the item requires (not synchronisation)
    gauge(client, basin, 2)
    older, newer = replay_all(client, "river_gauge", {"basin": basin}).notifications()
    t_older = parse_ce_time(older.data["time"])
    t_newer = parse_ce_time(newer.data["time"])
    assert t_newer - t_older >= timedelta(milliseconds=100)
    between = t_older + (t_newer - t_older) / 2
    from_date = between.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    result = read_stream(client, REPLAY, _from(basin, from_date=from_date))
    assert result.sequences() == [newer.data["sequence"]]
    # Inclusive at full precision: the exact storage time of the newer one still matches.
    exact = read_stream(client, REPLAY, _from(basin, from_date=newer.data["time"]))
    assert exact.sequences() == [newer.data["sequence"]]


@pytest.mark.parametrize("from_date", ["2100-01-01T00:00:00Z", "2999-01-01T00:00:00Z"])
def test_from_date_after_the_newest_is_empty(client: httpx.Client, from_date: str) -> None:
    # 2999 lies beyond nats-server's int64-nanosecond clock, which once wrapped around and
    # replayed the whole stream.
    basin = unique_basin()
    gauge(client, basin)
    assert read_stream(client, REPLAY, _from(basin, from_date=from_date)).sequences() == []


def test_each_notification_replays_from_its_own_time(client: httpx.Client) -> None:
    """Inclusive at full precision, for 20 notifications: one is not enough to show a stored
    time rendered a fraction of a microsecond too late (JetStream did so in about half the
    cases while it took nats-py's microsecond-rounded ``metadata.timestamp``)."""
    basin = unique_basin()
    for level in range(20):
        gauge(client, basin, level % 11)
    stored = replay_all(client, "river_gauge", {"basin": basin}).notifications()
    assert len(stored) == 20
    missing = [
        (event.data["sequence"], event.data["time"])
        for event in stored
        if event.data["sequence"]
        not in read_stream(client, REPLAY, _from(basin, from_date=event.data["time"])).sequences()
    ]
    assert missing == [], "replaying from a notification's own time must include it"


def test_watch_with_from_date_replays_then_goes_live(client: httpx.Client) -> None:
    basin = unique_basin()
    gauge(client, basin, 1)
    gauge(client, basin, 2)
    with open_stream(client, WATCH, _from(basin, from_date="2000-01-01T00:00:00Z")) as stream:
        first = stream.next()
        assert first is not None and first.kind == "replay-control/replay_started"
        assert first.data["request_id"] == request_id_header(stream.response)
        assert first.data["from_date"] == "2000-01-01T00:00:00Z"
        stream.until_kind("replay-control/replay_completed")
        gauge(client, basin, 3)
        live = stream.until_kind("live-notification")
    kinds = [event.kind for event in stream.events if event.name != "heartbeat"]
    assert kinds == [
        "replay-control/replay_started",
        "replay",
        "replay",
        "replay-control/replay_completed",
        "live-notification",
    ]
    assert "live-notification/connection_established" not in kinds
    assert live.data["data"]["identifier"]["level"] == "3"


@_settings(replay_batch_size=10, replay_batch_delay_ms=20)
def test_replay_to_live_no_gap_no_duplicate(custom: httpx.Client) -> None:
    basin = unique_basin()
    stored_before, published_during = 35, 60
    for n in range(stored_before):
        gauge(custom, basin, n % 11, payload={"n": n})
    url = str(custom.base_url)
    producer_done = threading.Event()
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            with httpx.Client(base_url=url, timeout=10.0) as producer:
                for n in range(stored_before, stored_before + published_during):
                    gauge(producer, basin, n % 11, payload={"n": n})
                    time.sleep(0.003)  # "every few milliseconds": the load, not a sync point
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
        finally:
            producer_done.set()

    total = stored_before + published_during
    producer = threading.Thread(target=produce, daemon=True)
    with open_stream(custom, WATCH, _from(basin, from_id="0")) as stream:
        stream.until_kind("replay-control/replay_started")
        producer.start()
        numbers: list[int] = []
        sequences: list[int] = []

        def record(event: Any) -> bool:
            if event.name in ("replay", "live-notification") and is_ce(event):
                numbers.append(event.data["data"]["payload"]["n"])
                sequences.append(event.data["sequence"])
            return len(numbers) >= total

        stream.until(record, timeout=30)
    producer.join(30)
    assert producer_done.is_set() and not failures, failures
    assert sequences == sorted(set(sequences)), "strictly ascending, no duplicate"
    assert sorted(numbers) == list(range(total)), "every notification exactly once"
    kinds = [event.kind for event in stream.events]
    assert kinds.count("replay-control/replay_completed") == 1
    switch = kinds.index("replay-control/replay_completed")
    assert all(kind != "replay" for kind in kinds[switch:])
    assert "live-notification" in kinds[switch:], "some arrived through the live feed"


@_settings(replay_batch_size=10, replay_batch_delay_ms=500)
def test_the_replay_ends_at_its_bound_then_live(custom: httpx.Client) -> None:
    """The replay reads what was stored when the watch opened;
    notifications stored during its pause arrive live after ``replay_completed``, in order
    and once each.

    The deterministic form of the switch to live under load (a replay that chased a
    producer never ended).
    """
    basin = unique_basin()
    for n in range(12):
        gauge(custom, basin, 1, payload={"n": n})
    numbers: list[int] = []

    def notifications(count: int) -> Any:
        def seen(event: Any) -> bool:
            if is_ce(event):
                numbers.append(event.data["data"]["payload"]["n"])
            return len(numbers) >= count

        return seen

    with open_stream(custom, WATCH, _from(basin, from_id="0")) as stream:
        stream.until(notifications(10))  # the first page; the 500 ms pause starts
        for n in range(12, 15):
            gauge(custom, basin, 1, payload={"n": n})
        stream.until(notifications(12))  # the second page ends the replay at H
        gauge(custom, basin, 1, payload={"n": 15})
        stream.until(notifications(16))
    kinds = [event.kind for event in stream.events if event.name != "heartbeat"]
    assert numbers == list(range(16))
    assert kinds == [
        "replay-control/replay_started",
        *["replay"] * 12,
        "replay-control/replay_completed",
        *["live-notification"] * 4,
    ]


@_settings(max_historical_notifications=2)
def test_history_cap_reached(custom: httpx.Client) -> None:
    basin = unique_basin()
    for level in range(5):
        gauge(custom, basin, level)
    result = read_stream(custom, REPLAY, _from(basin, from_id="0"))
    assert result.kinds == [
        "replay-control/replay_started",
        "replay",
        "replay",
        "replay-control/notification_replay_limit_reached",
        "connection-closing",
    ]
    limit = result.events[3].data
    assert set(limit) == {"max_allowed", "message", "timestamp", "topic", "type"}
    assert limit["max_allowed"] == 2
    assert limit["message"] == LIMIT_MESSAGE
    assert result.events[-1].data["reason"] == "end_of_stream"
    levels = [event.data["data"]["identifier"]["level"] for event in result.notifications()]
    assert levels == ["0", "1"], "the oldest two are the ones replayed"


@_settings(max_historical_notifications=2)
def test_history_cap_on_a_watch_ends_it(custom: httpx.Client) -> None:
    """A capped watch never goes live; the client must resume."""
    basin = unique_basin()
    for level in range(5):
        gauge(custom, basin, level)
    with open_stream(custom, WATCH, _from(basin, from_id="0")) as stream:
        events = stream.to_end()
    kinds = [event.kind for event in events if event.name != "heartbeat"]
    assert kinds == [
        "replay-control/replay_started",
        "replay",
        "replay",
        "replay-control/notification_replay_limit_reached",
        "connection-closing",
    ]
    assert events[-1].data["reason"] == "end_of_stream"
    assert stream.ended


@_settings(max_historical_notifications=2)
def test_history_cap_exactly_reached(custom: httpx.Client) -> None:
    basin = unique_basin()
    for level in range(2):
        gauge(custom, basin, level)
    result = read_stream(custom, REPLAY, _from(basin, from_id="0"))
    assert result.kinds == [
        "replay-control/replay_started",
        "replay",
        "replay",
        "replay-control/replay_completed",
        "connection-closing",
    ]


# -- 47–50 ------------------------------------------------------------------------------------


@_settings(connection_max_duration_sec=2)
def test_maximum_duration(custom: httpx.Client) -> None:
    basin = unique_basin()
    opened = time.monotonic()
    with open_stream(custom, WATCH, _live(basin)) as stream:
        first = stream.next()
        assert first is not None
        assert first.data["connection_will_close_in_seconds"] == 2
        events = stream.to_end(timeout=60)
        elapsed = time.monotonic() - opened
        request_id = request_id_header(stream.response)
    assert stream.ended, "the body closes after connection-closing"
    last = events[-1]
    assert last.name == "connection-closing"
    assert last.data["reason"] == "max_duration_reached"
    assert last.data["message"] == "Connection reached maximum duration"
    assert last.data["request_id"] == request_id
    assert last.data["topic"] == f"gauge.{basin}.*.*"
    # Not the default 900 s: the 2 s configured, with room for a loaded machine.
    assert 1.5 <= elapsed < 60, elapsed
    assert {event.name for event in events[1:-1]} <= {"heartbeat"}


@_settings(connection_max_duration_sec=2, replay_batch_size=1, replay_batch_delay_ms=1000)
def test_maximum_duration_cuts_a_watch_in_its_replay(custom: httpx.Client) -> None:
    basin = unique_basin()
    for level in range(6):
        gauge(custom, basin, level)
    with open_stream(custom, WATCH, _from(basin, from_id="0")) as stream:
        events = stream.to_end(timeout=15)
    assert events[0].kind == "replay-control/replay_started"
    assert events[-1].data["reason"] == "max_duration_reached"
    assert "replay-control/replay_completed" not in [event.kind for event in events]


@_settings(connection_max_duration_sec=2, max_historical_notifications=1)
def test_control_timestamps_are_whole_seconds(custom: httpx.Client) -> None:
    basin = unique_basin()
    gauge(custom, basin, 1)
    gauge(custom, basin, 2)
    replay = read_stream(custom, REPLAY, _from(basin, from_id="0"))
    watch = read_stream(custom, WATCH, _live(basin), timeout=15)
    events = replay.events + watch.events
    kinds = {event.kind for event in events}
    assert {
        "replay-control/replay_started",
        "replay-control/notification_replay_limit_reached",
        "connection-closing",
        "live-notification/connection_established",
        "heartbeat",
    } <= kinds
    stamped = [event for event in events if not is_ce(event)]
    for event in stamped:
        assert SECOND_TS_RE.match(event.data["timestamp"]), event.raw
    started = replay.events[0].data
    assert started["from_date"] is None


def test_point_filter_replay(client: httpx.Client) -> None:
    day = unique_date()
    # Unusual but valid spacing: accepted, and delivered as the array (upstream 0.11+; this
    # test pinned the text echoed byte for byte before).
    inside = "(47.0,8.0, 47.6,8.0, 47.6,8.9, 47.0,8.9, 47.0,8.0)"
    zurich = [[47.0, 8.0], [47.6, 8.0], [47.6, 8.9], [47.0, 8.9], [47.0, 8.0]]
    for polygon, cell in (
        (inside, "in"),
        (POLYGON_ELSEWHERE, "out"),
        (POLYGON_AROUND_ZURICH, "in2"),
    ):
        notify(
            client, "storm_cell", {"date": day, "time": "12", "polygon": polygon}, {"cell": cell}
        )
    body = {
        "event_type": "storm_cell",
        "identifier": {"date": day, "point": "47.3,8.5"},
        "from_id": "0",
    }
    result = read_stream(client, REPLAY, body)
    cells = [event.data["data"]["payload"]["cell"] for event in result.notifications()]
    assert cells == ["in", "in2"]
    polygons = [event.data["data"]["identifier"]["polygon"] for event in result.notifications()]
    assert polygons == [zurich, zurich]
    identifier = result.notifications()[1].data["data"]["identifier"]
    assert identifier == {
        "date": day.replace("-", ""),
        "polygon": zurich,
        "time": "1200",
    }
    assert result.events[0].data["topic"] == f"storm.{day.replace('-', '')}.*"
