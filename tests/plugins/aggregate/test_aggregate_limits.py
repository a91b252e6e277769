"""What one aggregate stream may cost: ``limits.max_aggregate_groups``,
``limits.min_aggregate_debounce_ms``, and a snapshot counted in slices that let others in.

Real uvicorn servers on 127.0.0.1, in-memory backend (the limits are the host's, the same
on every backend).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from aviso_host.encoding import dumps
from aviso_plugins.topics import build_topic
from tests.conformance.helpers import LiveStream, assert_error, open_stream, post
from tests.plugins.aggregate.test_aggregate import (
    AGGREGATE,
    CONFIG,
    counts,
    next_aggregate,
    publish,
    request,
    snapshot,
    unique_run,
)
from tests.support.configs import with_changes
from tests.support.server import RunningServer, running_server

MAX_GROUPS = 3


@pytest.fixture(scope="module")
def capped() -> Iterator[httpx.Client]:
    """Default limits except three groups per aggregate."""
    limits = {"max_aggregate_groups": MAX_GROUPS, "min_aggregate_debounce_ms": 100}
    document = with_changes(CONFIG, limits=limits)
    with running_server(document) as running, httpx.Client(base_url=running.url) as http:
        yield http


def assert_ends_at_the_group_limit(stream: LiveStream) -> None:
    error = stream.next()
    assert error is not None and error.name == "error", stream.events
    assert error.data["error"] == "aggregate_group_limit_reached"
    assert error.data["max_groups"] == MAX_GROUPS
    assert "limits.max_aggregate_groups" in error.data["message"]
    assert error.data["request_id"] == stream.response.headers["x-request-id"]
    closing = stream.next()
    assert closing is not None and closing.kind == "connection-closing"
    assert closing.data["reason"] == "aggregate_group_limit_reached"
    assert stream.next() is None, "the stream ends there"


def test_a_history_within_the_group_limit_is_counted(capped: httpx.Client) -> None:
    run = unique_run()
    for step in range(MAX_GROUPS):
        publish(capped, run, step)
    with open_stream(capped, AGGREGATE, request(run, ["step"])) as stream:
        assert counts(snapshot(stream)) == {(str(step),): 1 for step in range(MAX_GROUPS)}


def test_a_history_over_the_group_limit_ends_the_stream_without_a_snapshot(
    capped: httpx.Client,
) -> None:
    run = unique_run()
    for step in range(MAX_GROUPS + 1):
        publish(capped, run, step)
    with open_stream(capped, AGGREGATE, request(run, ["step"])) as stream:
        assert_ends_at_the_group_limit(stream)
    assert [event.name for event in stream.events] == ["error", "connection-closing"]


def test_a_live_group_over_the_limit_ends_the_stream(capped: httpx.Client) -> None:
    run = unique_run()
    for step in range(MAX_GROUPS):
        publish(capped, run, step)
    with open_stream(capped, AGGREGATE, request(run, ["step"], debounce_ms=100)) as stream:
        assert snapshot(stream)["total"] == MAX_GROUPS
        assert stream.next().kind == "heartbeat"  # type: ignore[union-attr]
        publish(capped, run, 0, param="tp")  # an existing group grows: still fine
        update = stream.until(lambda event: event.name == "aggregate").data
        assert counts(update)[("0",)] == 2
        publish(capped, run, 99)
        assert_ends_at_the_group_limit(stream)


@pytest.mark.parametrize("debounce_ms", [0, 99])
def test_a_debounce_below_the_minimum_is_refused(capped: httpx.Client, debounce_ms: int) -> None:
    body = request(unique_run(), ["step"], debounce_ms=debounce_ms)
    assert_error(
        post(capped, AGGREGATE, body),
        400,
        "INVALID_AGGREGATE_REQUEST",
        error="Invalid Aggregate Request",
        message=f"debounce_ms must be between 100 and 60000. Got: {debounce_ms}",
    )


def test_the_minimum_debounce_itself_is_accepted(capped: httpx.Client) -> None:
    with open_stream(capped, AGGREGATE, request(unique_run(), ["step"], debounce_ms=100)) as s:
        assert snapshot(s)["total"] == 0


def test_a_minimum_above_the_default_debounce_raises_the_default() -> None:
    document = with_changes(CONFIG, limits={"min_aggregate_debounce_ms": 5000})
    with (
        running_server(document) as running,
        httpx.Client(base_url=running.url) as http,
        open_stream(http, AGGREGATE, request(unique_run(), ["step"])) as stream,
    ):
        assert snapshot(stream)["total"] == 0


# -- a worst-case snapshot shares the event loop --------------------------------------------

STORED = 100_000


def _fill(server: RunningServer, run: str) -> None:
    """``STORED`` notifications of one run, each its own group (param), straight into the
    backend (through the API this would take minutes)."""
    backend = server.service.backend

    async def fill() -> None:
        for n in range(STORED):
            identifier = {"param": f"p{n}", "run": run, "step": "0"}
            topic = build_topic(["fcagg", run, "0", f"p{n}"])
            await backend.publish(topic, "null", {"identifier": dumps(identifier)})

    server.call(fill, timeout=300)


@pytest.mark.heavy  # fills a store big enough to take tens of seconds to count
def test_health_and_notify_answer_while_a_heavy_snapshot_is_counted() -> None:
    """Proven by events: ``/health`` and a notify are both answered before the snapshot of
    100,000 stored notifications arrives (a reader thread flags its arrival); the notify,
    stored after the stream's history bound, then comes as the first live update."""
    document = with_changes(
        CONFIG,
        notification_backend={"kind": "in_memory", "in_memory": {"max_topics": 2 * STORED}},
        watch_endpoint={
            "replay_batch_size": 100,
            "replay_batch_delay_ms": 0,
            "max_historical_notifications": 2 * STORED,
        },
        limits={"max_aggregate_groups": 2 * STORED},
    )
    run = f"heavy{uuid.uuid4().hex[:8]}"
    body: dict[str, Any] = request(run, ["param"])
    with running_server(document) as server, httpx.Client(base_url=server.url) as http:
        _fill(server, run)
        with open_stream(http, AGGREGATE, body, timeout=httpx.Timeout(60.0)) as stream:
            arrived = threading.Event()
            snapshots: list[dict[str, Any]] = []

            def read_snapshot() -> None:
                snapshots.append(snapshot(stream))
                arrived.set()

            reader = threading.Thread(target=read_snapshot, daemon=True)
            reader.start()
            # The response head is sent before counting starts.
            assert http.get("/health").status_code == 200
            publish(http, run, 0, param="during")
            answered_while_counting = not arrived.is_set()
            reader.join(120)
            assert snapshots, "the snapshot arrived"
            update = next_aggregate(stream)
    assert answered_while_counting
    assert snapshots[0]["total"] == STORED
    assert update["total"] == STORED + 1
    assert counts(update)[("during",)] == 1
