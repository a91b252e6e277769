"""Resuming from pruned history is announced before anything is delivered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.nats import nats_server
from tests.support.server import running_server
from tests.support.sse import collect

CONFIG: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_schema": {
        "feed": {
            "topic": {"base": "feed", "key_order": ["name"]},
            "identifier": {"name": {"type": "StringHandler", "required": True}},
        }
    },
}


@pytest.fixture(params=["in_memory", "jetstream"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[httpx.Client]:
    """A server that keeps one notification per topic (the default of both backends)."""
    config = dict(CONFIG)
    if request.param == "in_memory":
        config["notification_backend"] = {"kind": "in_memory"}
        with running_server(config) as server, httpx.Client(base_url=server.url) as http:
            yield http
        return
    with nats_server(tmp_path / "nats") as nats:
        config["notification_backend"] = {"kind": "jetstream", "jetstream": {"nats_url": nats.url}}
        with running_server(config) as server, httpx.Client(base_url=server.url) as http:
            yield http


def _notify(client: httpx.Client, name: str) -> None:
    body = {"event_type": "feed", "identifier": {"name": name}}
    assert client.post("/api/v1/notification", content=json.dumps(body)).status_code == 200


def _replay(client: httpx.Client, name: str, from_id: str) -> list[str]:
    body = {"event_type": "feed", "identifier": {"name": name}, "from_id": from_id}
    return [event.kind for event in collect(client, "/api/v1/replay", body)]


def _gap(client: httpx.Client, name: str, from_id: str) -> dict[str, Any]:
    body = {"event_type": "feed", "identifier": {"name": name}, "from_id": from_id}
    events = collect(client, "/api/v1/replay", body)
    assert events[1].kind == "replay-control/history_gap", [e.kind for e in events]
    return events[1].data


def test_resuming_inside_retained_history_reports_no_gap(client: httpx.Client) -> None:
    _notify(client, "a")
    assert "replay-control/history_gap" not in _replay(client, "a", "1")


def test_resuming_from_pruned_history_reports_the_gap_first(client: httpx.Client) -> None:
    # One notification per topic is kept: the first two of three are pruned.
    for _ in range(3):
        _notify(client, "same")
    gap = _gap(client, "same", "1")
    assert gap["requested_from_sequence"] == 1
    assert gap["first_available_sequence"] == 3
    assert set(gap) == {
        "first_available_sequence",
        "requested_from_sequence",
        "timestamp",
        "topic",
        "type",
    }
    kinds = _replay(client, "same", "3")
    assert "replay-control/history_gap" not in kinds and kinds.count("replay") == 1


def test_a_wipe_is_a_gap_for_older_cursors(client: httpx.Client) -> None:
    _notify(client, "w")
    wiped = client.request(
        "DELETE",
        "/api/v1/admin/wipe/stream",
        headers={"content-type": "application/json"},
        content=json.dumps({"stream_name": "FEED"}),
    )
    assert wiped.status_code == 200
    assert _gap(client, "w", "1")["first_available_sequence"] == 2


def test_from_id_zero_asks_for_whatever_is_retained(client: httpx.Client) -> None:
    for _ in range(3):
        _notify(client, "zero")
    assert "replay-control/history_gap" not in _replay(client, "zero", "0")


def test_a_resume_point_beyond_the_streams_end_is_a_gap(client: httpx.Client) -> None:
    """A cursor from an earlier incarnation of the stream (an in-memory server restarted,
    numbering from 1 again) is past the end: the gap is reported, saying where the retained
    history begins, and the replay stays empty as for any start beyond the end."""
    _notify(client, "r")
    _notify(client, "other")
    gap = _gap(client, "r", "7")
    assert (gap["requested_from_sequence"], gap["first_available_sequence"]) == (7, 1)
    assert "replay" not in _replay(client, "r", "7")
    # Resuming just after the last notification is not a gap: nothing was missed.
    assert _replay(client, "r", "3") == [
        "replay-control/replay_started",
        "replay-control/replay_completed",
        "connection-closing",
    ]
