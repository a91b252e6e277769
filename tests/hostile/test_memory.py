"""Hostile input against memory and the event loop: the in-memory store's byte
budget and the aggregate stream's caps.

Found on a fresh install: 600 notifications of 250 KB added 145 MiB in 1.1 s (no byte
budget); an aggregate grouping 10,000 values with ``debounce_ms: 0`` cut other notifies
from 4,204/s to 40/s, and 20 of them delayed ``/health`` by 3.7 s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.conformance.helpers import NOTIFY, REPLAY, open_stream, unique_date
from tests.hostile.support import assert_client_error, assert_still_serving
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import RunningServer, running_server

BUDGET = 8 * 1024 * 1024
PAYLOAD_BYTES = 250_000
FLOOD = 100  # ~24 MiB offered against an 8 MiB budget
AGGREGATE = "/api/v1/aggregate"


@pytest.fixture(scope="module")
def budgeted() -> Iterator[RunningServer]:
    """In-memory with an 8 MiB budget (the default is 256 MiB) and room for every topic."""
    document = with_changes(
        API_EXAMPLE,
        notification_backend={
            "kind": "in_memory",
            "in_memory": {"max_history_per_topic": 1000, "max_bytes": BUDGET},
        },
    )
    with running_server(document) as server:
        yield server


def test_a_flood_of_large_notifications_stays_within_the_byte_budget(
    budgeted: RunningServer,
) -> None:
    body = {
        "event_type": "river_gauge",
        "identifier": {"basin": "flood", "date": "20260402", "level": 1},
        "payload": {"blob": "x" * PAYLOAD_BYTES},
    }
    content = json.dumps(body).encode()
    with httpx.Client(base_url=budgeted.url, timeout=30.0) as client:
        for _ in range(FLOOD):
            answer = client.post(NOTIFY, content=content)
            assert answer.status_code == 200, answer.text
        backend = budgeted.service.backend
        assert backend.retained_bytes <= BUDGET
        replay = {"event_type": "river_gauge", "identifier": {"basin": "flood"}, "from_id": "1"}
        with open_stream(client, REPLAY, replay) as stream:
            events = stream.to_end(timeout=30)
        # The oldest went first and the reader is told so.
        gap = events[1]
        assert gap.kind == "replay-control/history_gap", [event.kind for event in events[:3]]
        first_kept = gap.data["first_available_sequence"]
        kept = [event.data["sequence"] for event in events if event.name == "replay"]
        assert kept == list(range(first_kept, FLOOD + 1))
        assert len(kept) * PAYLOAD_BYTES <= BUDGET
        assert_still_serving(client)


def _aggregate(date: str, debounce_ms: int) -> dict[str, object]:
    return {
        "event_type": "river_gauge",
        "identifier": {"basin": "*", "date": date},
        "group_by": ["basin"],
        "debounce_ms": debounce_ms,
    }


def test_an_aggregate_without_debounce_is_refused(hostile: httpx.Client) -> None:
    answer = hostile.post(AGGREGATE, json=_aggregate(unique_date(), 0))
    assert_client_error(answer, 400, "INVALID_AGGREGATE_REQUEST")
    assert answer.json()["message"] == "debounce_ms must be between 100 and 60000. Got: 0"
    assert_still_serving(hostile)


def test_an_aggregate_over_the_group_limit_is_ended(hostile: httpx.Client) -> None:
    date = unique_date()
    for n in range(1001):  # limits.max_aggregate_groups defaults to 1000
        body = {
            "event_type": "river_gauge",
            "identifier": {"basin": f"b{n}", "date": date, "level": 1},
        }
        assert hostile.post(NOTIFY, json=body).status_code == 200
    with open_stream(hostile, AGGREGATE, _aggregate(date, 100)) as stream:
        events = stream.to_end(timeout=60)
    assert [event.name for event in events] == ["error", "connection-closing"]
    assert events[0].data["error"] == "aggregate_group_limit_reached"
    assert events[0].data["max_groups"] == 1000
    assert events[1].data["reason"] == "aggregate_group_limit_reached"
    assert_still_serving(hostile)
