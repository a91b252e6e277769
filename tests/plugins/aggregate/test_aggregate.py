"""Aggregate watch: counts of matching notifications grouped by fields.

Real uvicorn servers on 127.0.0.1, on both backends (the JetStream one keeps only the
newest message per subject, so a re-publish replaces the stored message there while the
in-memory backend keeps both). Tests isolate their data with a unique ``run``.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from aviso_builtins.aggregate.counts import GroupCounts, GroupLimitReached, plan_group_counts
from aviso_host.encoding import dumps
from aviso_plugins.topics import build_topic
from aviso_plugins.types import InvalidValue, StoredNotification
from tests.conformance.helpers import (
    ERROR_KEYS,
    REPLAY,
    UNKNOWN_EVENT_TYPE_KEYS,
    LiveStream,
    assert_error,
    open_stream,
    post,
    read_stream,
    request_id_header,
)
from tests.support.configs import BACKENDS, jetstream_variant, with_changes
from tests.support.refusing_subscriptions import RefusingSubscriptionsPlugin
from tests.support.server import RunningServer, running_server

AGGREGATE = "/api/v1/aggregate"
NOTIFY = "/api/v1/notification"

CONFIG: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {"kind": "in_memory", "in_memory": {"max_history_per_topic": 100}},
    "notification_schema": {
        "forecast": {
            "topic": {"base": "fcagg", "key_order": ["run", "step", "param"]},
            "identifier": {
                "run": {"type": "StringHandler", "required": True},
                "step": {"type": "IntHandler", "range": [0, 1000], "required": False},
                "param": {"type": "StringHandler", "required": False},
            },
        }
    },
    # Small batches: a snapshot is counted over several history pages.
    "watch_endpoint": {"replay_batch_size": 3, "replay_batch_delay_ms": 0},
    # debounce_ms 0 lets the live tests see one update per notification.
    "limits": {"min_aggregate_debounce_ms": 0},
}


def _config_for(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "in_memory":
        return copy.deepcopy(CONFIG)
    variant = jetstream_variant(CONFIG, request.getfixturevalue("nats_session").url)
    variant["notification_schema"]["forecast"]["storage_policy"] = {"allow_duplicates": False}
    return variant


@pytest.fixture(scope="module", params=BACKENDS)
def server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    with running_server(_config_for(request.param, request)) as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10.0) as http:
        yield http


def unique_run() -> str:
    return f"r{uuid.uuid4().hex[:12]}"


def publish(client: httpx.Client, run: str, step: int, param: str = "2t") -> None:
    identifier = {"run": run, "step": step, "param": param}
    response = post(client, NOTIFY, {"event_type": "forecast", "identifier": identifier})
    assert response.status_code == 200, response.text


def request(run: str, group_by: list[str], **extra: Any) -> dict[str, Any]:
    return {"event_type": "forecast", "identifier": {"run": run}, "group_by": group_by, **extra}


def counts(event_data: dict[str, Any]) -> dict[tuple[str | None, ...], int]:
    """``groups`` as {values tuple (in group_by order): count}."""
    fields = event_data["group_by"]
    return {
        tuple(group["values"][field] for field in fields): group["count"]
        for group in event_data["groups"]
    }


def snapshot(stream: LiveStream) -> dict[str, Any]:
    first = stream.next()
    assert first is not None and first.kind == "aggregate/snapshot", stream.events
    return first.data


def next_aggregate(stream: LiveStream) -> dict[str, Any]:
    """The next ``aggregate`` event (heartbeats are skipped)."""
    return stream.until(lambda event: event.name == "aggregate").data


# -- snapshot ------------------------------------------------------------------------------


def test_snapshot_counts_distinct_history_grouped_by_fields(client: httpx.Client) -> None:
    run = unique_run()
    for step in (12, 0, 6):
        for param in ("2t", "tp"):
            publish(client, run, step, param)
    publish(client, run, 0, "2t")  # a re-publish: same identifier, counted once
    publish(client, unique_run(), 0)  # another run: not matched

    with open_stream(client, AGGREGATE, request(run, ["step"])) as stream:
        data = snapshot(stream)
        assert data["request_id"] == request_id_header(stream.response)
        assert stream.response.headers["content-type"] == "text/event-stream"
    assert set(data) == {
        "group_by",
        "groups",
        "last_sequence",
        "request_id",
        "timestamp",
        "topic",
        "total",
        "type",
    }
    assert data["group_by"] == ["step"]
    # Whole numbers in numeric order: 6 before 12.
    assert data["groups"] == [
        {"count": 2, "values": {"step": "0"}},
        {"count": 2, "values": {"step": "6"}},
        {"count": 2, "values": {"step": "12"}},
    ]
    assert data["total"] == 6
    assert data["topic"] == f"fcagg.{run}.*.*"

    with open_stream(client, AGGREGATE, request(run, ["param", "step"])) as stream:
        both = snapshot(stream)
    assert counts(both) == {(param, str(step)): 1 for step in (0, 6, 12) for param in ("2t", "tp")}
    assert both["total"] == 6


def test_snapshot_respects_filters_and_from_id(client: httpx.Client) -> None:
    run = unique_run()
    for step in (0, 6, 12, 18):
        publish(client, run, step)

    body = {"event_type": "forecast", "identifier": {"run": run, "step": {"gte": 6}}}
    with open_stream(client, AGGREGATE, {**body, "group_by": ["step"]}) as stream:
        assert counts(snapshot(stream)) == {("6",): 1, ("12",): 1, ("18",): 1}

    replay = {"event_type": "forecast", "identifier": {"run": run}, "from_id": "0"}
    replayed = read_stream(client, REPLAY, replay)
    sequences = replayed.sequences()
    assert len(sequences) == 4
    with open_stream(
        client, AGGREGATE, request(run, ["step"], from_id=str(sequences[2]))
    ) as stream:
        data = snapshot(stream)
    assert counts(data) == {("12",): 1, ("18",): 1}
    assert data["last_sequence"] == sequences[3]


# -- live ----------------------------------------------------------------------------------


def test_live_notification_produces_an_update(client: httpx.Client) -> None:
    run = unique_run()
    with open_stream(client, AGGREGATE, request(run, ["step"], debounce_ms=0)) as stream:
        empty = snapshot(stream)
        assert empty["groups"] == [] and empty["total"] == 0
        assert empty["last_sequence"] is None
        assert stream.next().kind == "heartbeat"  # type: ignore[union-attr]
        publish(client, run, 6)
        update = next_aggregate(stream)
    assert update["type"] == "update"
    assert update["groups"] == [{"count": 1, "values": {"step": "6"}}]
    assert update["total"] == 1
    assert isinstance(update["last_sequence"], int)


def test_republish_of_a_counted_identifier_is_suppressed(client: httpx.Client) -> None:
    run = unique_run()
    with open_stream(client, AGGREGATE, request(run, ["step"], debounce_ms=0)) as stream:
        snapshot(stream)
        publish(client, run, 0)
        assert next_aggregate(stream)["total"] == 1
        publish(client, run, 0)  # unchanged counts: no event of its own
        publish(client, run, 6)
        after = next_aggregate(stream)
    # Had the re-publish produced an event, it would come first and still say 1.
    assert after["total"] == 2
    assert counts(after) == {("0",): 1, ("6",): 1}

    with open_stream(client, AGGREGATE, request(run, ["step"])) as stream:
        assert counts(snapshot(stream)) == {("0",): 1, ("6",): 1}


def test_a_burst_is_debounced_into_fewer_updates_with_final_counts(
    client: httpx.Client,
) -> None:
    run = unique_run()
    burst = 12
    with open_stream(client, AGGREGATE, request(run, ["step"], debounce_ms=1000)) as stream:
        snapshot(stream)
        for step in range(burst):
            publish(client, run, step)
        updates = [next_aggregate(stream)]
        while updates[-1]["total"] < burst:
            updates.append(next_aggregate(stream))
    assert len(updates) < burst
    totals = [update["total"] for update in updates]
    assert totals == sorted(set(totals)), totals
    assert counts(updates[-1]) == {(str(step),): 1 for step in range(burst)}


# -- stream lifecycle ----------------------------------------------------------------------


# Small limits: a one-second connection, one-second heartbeats, two historical candidates.
LIMITED = with_changes(
    CONFIG,
    watch_endpoint={
        "connection_max_duration_sec": 1,
        "sse_heartbeat_interval_sec": 1,
        "max_historical_notifications": 2,
    },
)


@pytest.fixture(scope="module")
def limited() -> Iterator[httpx.Client]:
    with running_server(LIMITED) as running, httpx.Client(base_url=running.url) as http:
        yield http


def test_heartbeats_and_max_duration_close_like_a_watch(limited: httpx.Client) -> None:
    with open_stream(limited, AGGREGATE, request(unique_run(), ["step"])) as stream:
        snapshot(stream)
        events = stream.to_end()
    kinds = [event.kind for event in events]
    assert kinds[1] == "heartbeat", kinds
    closing = events[-1]
    assert closing.kind == "connection-closing"
    assert closing.data["reason"] == "max_duration_reached"
    assert closing.data["request_id"] == events[0].data["request_id"]
    assert stream.ended


def test_a_history_over_the_cap_is_flagged_right_after_the_snapshot(
    limited: httpx.Client,
) -> None:
    run = unique_run()
    for step in (0, 6, 12):
        publish(limited, run, step)
    with open_stream(limited, AGGREGATE, request(run, ["step"])) as stream:
        data = snapshot(stream)
        flag = stream.next()
    assert counts(data) == {("0",): 1, ("6",): 1}
    assert flag is not None
    assert flag.kind == "replay-control/notification_replay_limit_reached"
    assert flag.data["max_allowed"] == 2


def test_shutdown_closes_an_aggregate_with_server_shutdown() -> None:
    with (
        running_server(CONFIG) as running,
        httpx.Client(base_url=running.url, timeout=10.0) as http,
        open_stream(http, AGGREGATE, request(unique_run(), ["step"])) as stream,
    ):
        snapshot(stream)
        running.begin_shutdown()
        events = stream.to_end()
    assert events[-1].kind == "connection-closing"
    assert events[-1].data["reason"] == "server_shutdown"


def test_without_a_live_feed_the_snapshot_is_followed_by_end_of_stream() -> None:
    document = with_changes(
        CONFIG,
        notification_backend={
            "kind": "refusing_subscriptions",
            "refusing_subscriptions": {"max_history_per_topic": 100},
        },
    )
    run = unique_run()
    with (
        running_server(document, extra_plugins=[RefusingSubscriptionsPlugin()]) as running,
        httpx.Client(base_url=running.url, timeout=10.0) as http,
    ):
        publish(http, run, 6)
        with open_stream(http, AGGREGATE, request(run, ["step"])) as stream:
            events = stream.to_end()
    assert [event.kind for event in events] == ["aggregate/snapshot", "connection-closing"]
    assert events[0].data["total"] == 1
    assert events[1].data["reason"] == "end_of_stream"


# -- errors --------------------------------------------------------------------------------

INVALID = "INVALID_AGGREGATE_REQUEST"
SHAPE = "INVALID_REQUEST_SHAPE"


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        ({"group_by": ["colour"]}, INVALID, "group_by field 'colour' is not an identifier field"),
        ({"group_by": []}, INVALID, "group_by must name at least one identifier field"),
        ({"group_by": ["step", "step"]}, INVALID, "group_by names field 'step' more than once"),
        ({"group_by": "step"}, SHAPE, "Request deserialization failed: invalid type: string"),
        ({"group_by": [6]}, SHAPE, "Request deserialization failed: invalid type: integer"),
        ({}, SHAPE, "Request deserialization failed: missing field `group_by`"),
        ({"group_by": None}, SHAPE, "Request deserialization failed: missing field `group_by`"),
        ({"group_by": ["step"], "debounce_ms": -1}, INVALID, "debounce_ms must be between 0"),
        ({"group_by": ["step"], "debounce_ms": 60001}, INVALID, "debounce_ms must be between"),
        ({"group_by": ["step"], "debounce_ms": "5"}, SHAPE, "Request deserialization failed"),
        ({"group_by": ["step"], "debounce_ms": 2.5}, SHAPE, "Request deserialization failed"),
        ({"group_by": ["step"], "colour": 1}, "UNKNOWN_FIELD", "Request contains unknown fields"),
    ],
)
def test_bad_group_by_and_debounce_are_refused(
    client: httpx.Client, extra: dict[str, Any], code: str, message: str
) -> None:
    body = {"event_type": "forecast", "identifier": {"run": "x"}, **extra}
    error = assert_error(
        post(client, AGGREGATE, body), 400, code, error="Invalid Aggregate Request"
    )
    assert error["message"].startswith(message), error


def test_watch_errors_apply_with_the_aggregate_label(client: httpx.Client) -> None:
    base = {"identifier": {"run": "x"}, "group_by": ["step"]}
    assert_error(
        post(client, AGGREGATE, {"event_type": "tide_gauge", **base}),
        400,
        "UNKNOWN_EVENT_TYPE",
        keys=UNKNOWN_EVENT_TYPE_KEYS,
    )
    assert_error(
        post(client, AGGREGATE, {"event_type": "forecast", "identifier": {}, "group_by": ["step"]}),
        400,
        INVALID,
        message="Required field 'run' missing for aggregate operation",
        keys=ERROR_KEYS,
    )
    both = {"event_type": "forecast", **base, "from_id": "1", "from_date": "1740509903"}
    assert_error(
        post(client, AGGREGATE, both),
        400,
        INVALID,
        message_prefix="Cannot specify both from_id and from_date.",
    )
    assert_error(
        client.post(AGGREGATE, content=b"not-json"),
        400,
        "INVALID_JSON",
        error="Invalid Aggregate Request",
    )


# -- grouping rules (pure) -----------------------------------------------------------------


def _record(
    sequence: int, tokens: list[str], identifier: dict[str, str] | None
) -> StoredNotification:
    metadata = {"identifier": json.dumps(identifier, sort_keys=True)} if identifier else {}
    return StoredNotification(sequence, build_topic(tokens), "null", 0, metadata)


def _body(grouping: GroupCounts) -> dict[str, Any]:
    return json.loads(grouping.json_text({}))


def test_records_without_a_stored_identifier_are_grouped_by_their_topic_tokens() -> None:
    grouping = GroupCounts(["step", "param"], {"run": 1, "step": 2}, max_groups=10)
    assert grouping.add(_record(1, ["fcagg", "r", "6"], None))
    assert not grouping.add(_record(2, ["fcagg", "r", "6"], None))  # same topic: same one
    assert grouping.add(_record(3, ["fcagg", "r", "12"], {"run": "r", "step": "12"}))
    assert _body(grouping) == {
        "group_by": ["step", "param"],
        "groups": [
            {"count": 1, "values": {"step": "6", "param": None}},
            {"count": 1, "values": {"step": "12", "param": None}},
        ],
        "total": 2,
        "last_sequence": 3,
    }


def test_schema_less_event_types_group_by_their_own_identifier_keys() -> None:
    grouping = plan_group_counts(None, {"b": "*", "a": "x"}, ["b"], max_groups=10)
    grouping.add(_record(1, ["adhoc", "x", "2"], None))
    assert _body(grouping)["groups"] == [{"count": 1, "values": {"b": "2"}}]
    with pytest.raises(InvalidValue, match="Allowed fields: a, b"):
        plan_group_counts(None, {"b": "*", "a": "x"}, ["c"], max_groups=10)


def test_the_event_text_is_what_dumps_writes_and_changes_only_where_counts_did() -> None:
    grouping = GroupCounts(["step", "param"], {"run": 1, "step": 2, "param": 3}, max_groups=10)
    steps = ["12", "6", "x", "6", "0"]
    for sequence, (step, param) in enumerate(zip(steps, "aabcb", strict=True), start=1):
        grouping.add(_record(sequence, ["fcagg", "r", step, param], None))
    extra = {"request_id": "r-1", "timestamp": "2026-04-02T08:00:00Z", "topic": "t", "type": "x"}
    first = grouping.json_text(extra)
    expected_groups = [
        {"count": 1, "values": {"param": "b", "step": "0"}},
        {"count": 1, "values": {"param": "a", "step": "6"}},
        {"count": 1, "values": {"param": "c", "step": "6"}},
        {"count": 1, "values": {"param": "a", "step": "12"}},
        {"count": 1, "values": {"param": "b", "step": "x"}},
    ]
    expected = {
        **extra,
        "group_by": ["step", "param"],
        "groups": expected_groups,
        "total": 5,
        "last_sequence": 5,
    }
    assert first == dumps(expected)
    grouping.add(_record(6, ["fcagg", "s", "6", "a"], None))
    expected_groups[1]["count"] = 2
    assert grouping.json_text(extra) == dumps({**expected, "total": 6, "last_sequence": 6})


def test_a_group_beyond_the_limit_is_refused_and_not_counted() -> None:
    grouping = GroupCounts(["step"], {"run": 1, "step": 2}, max_groups=2)
    grouping.add(_record(1, ["fcagg", "r", "0"], None))
    grouping.add(_record(2, ["fcagg", "r", "6"], None))
    assert grouping.add(_record(3, ["fcagg", "s", "6"], None))  # an existing group grows
    with pytest.raises(GroupLimitReached):
        grouping.add(_record(4, ["fcagg", "r", "12"], None))
    assert [group["count"] for group in _body(grouping)["groups"]] == [1, 2]
