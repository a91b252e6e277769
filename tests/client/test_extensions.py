"""aviso-py's own stream extensions, seen through pyaviso: a client that
does not know them still does the right thing.

* slow consumer: the stream ends with ``end_of_stream`` (cause ``slow_consumer``), pyaviso
  reconnects from its cursor and nothing is lost or repeated;
* ``drop`` policy: the ``notifications-skipped`` report is ignored, the filtered listener
  keeps going;
* history gap: the ``history_gap`` control is ignored by a filtered listener.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pyaviso
import pytest

from tests.client.support import CONFIG, publish, server_event
from tests.support.configs import ForBackend
from tests.support.server import RunningServer, running_server
from tests.support.sse import collect

PAD = "x" * 4096
SENTINELS = 30
MAX_ROUNDS = 200
"""Bound on publishing rounds (100 notifications each) waiting for the server to give up."""


def _backpressure_server(for_backend: ForBackend, policy: str) -> Any:
    document = json.loads(json.dumps(CONFIG))
    document["watch_endpoint"].update(max_queue_bytes=65536, on_backpressure=policy)
    return running_server(for_backend(document))


@pytest.fixture(scope="module")
def disconnecting(for_backend: ForBackend) -> Iterator[RunningServer]:
    with _backpressure_server(for_backend, "disconnect") as server:
        yield server


@pytest.fixture(scope="module")
def dropping(for_backend: ForBackend) -> Iterator[RunningServer]:
    with _backpressure_server(for_backend, "drop") as server:
        yield server


def _flood(url: str, name: str, event: Any) -> int:
    """Publish large notifications until the server logged ``event``; how many were sent."""
    sent = 0
    with httpx.Client(base_url=url, timeout=10.0) as http:
        for _ in range(MAX_ROUNDS):
            for _ in range(100):
                body = {
                    "event_type": "feed",
                    "identifier": {"name": name, "step": 1},
                    "payload": {"n": sent, "pad": PAD},
                }
                assert http.post("/api/v1/notification", json=body).status_code == 200
                sent += 1
            if event.is_set():
                return sent
    raise AssertionError(f"the server never logged the backpressure decision ({sent} sent)")


def _client(server: RunningServer) -> pyaviso.AvisoClient:
    return pyaviso.AvisoClient(base_url=server.url, auth=pyaviso.Anonymous())


def test_a_slow_consumer_reconnects_from_its_cursor_and_loses_nothing(
    disconnecting: RunningServer, name: str
) -> None:
    with (
        _client(disconnecting) as client,
        client.listen("feed", filter={"name": name}, start_from=0) as live,
        server_event("stream.backpressure.disconnect") as cut,
    ):
        publish(disconnecting.url, name, 1)
        first = next(live)  # the stream is open; now the client stops reading
        total = 1 + _flood(disconnecting.url, name, cut)
        received = [first] + [next(live) for _ in range(total - 1)]
    sequences = [notification.sequence for notification in received]
    assert sequences == list(range(sequences[0], sequences[0] + total))
    assert [n.payload["n"] for n in received[1:]] == list(range(total - 1))


def test_the_drop_report_does_not_stop_a_filtered_listener(
    dropping: RunningServer, name: str
) -> None:
    received: list[Any] = []

    def read_to_a_sentinel(live: Any, total: int) -> None:
        while not received or received[-1].payload["n"] < total:
            received.append(next(live))

    with (
        _client(dropping) as client,
        client.listen("feed", filter={"name": name}, start_from=0) as live,
        server_event("stream.backpressure.dropping") as dropping_started,
    ):
        publish(dropping.url, name, 1)
        next(live)
        total = _flood(dropping.url, name, dropping_started)
        reader = threading.Thread(target=read_to_a_sentinel, args=(live, total), daemon=True)
        reader.start()
        # A sentinel published while the queue is still full is skipped too: publish one
        # more each time the reader has not seen one within a second.
        for attempt in range(SENTINELS):
            publish(dropping.url, name, 1, start=total + attempt)
            reader.join(1.0)
            if not reader.is_alive():
                break
        assert not reader.is_alive(), "no sentinel reached the listener"
    sequences = [notification.sequence for notification in received]
    assert sequences == sorted(set(sequences))
    assert len(received) < total  # some were skipped, and the listener kept going


def test_a_history_gap_does_not_stop_a_filtered_listener(
    disconnecting: RunningServer, name: str
) -> None:
    publish(disconnecting.url, name, 2)
    with httpx.Client(base_url=disconnecting.url, timeout=10.0) as http:
        wiped = http.request("DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": "feed"})
        assert wiped.status_code == 200, wiped.text
        publish(disconnecting.url, name, 2, start=2)
        # The server does report the gap to a cursor older than what it still holds.
        events = collect(
            http,
            "/api/v1/replay",
            {"event_type": "feed", "identifier": {"name": name}, "from_id": "1"},
        )
    assert "replay-control/history_gap" in [event.kind for event in events]
    with _client(disconnecting) as client:
        replayed = list(
            client.listen("feed", filter={"name": name}, start_from=0, mode="replay_only")
        )
        assert [n.payload["n"] for n in replayed] == [2, 3]
        with client.listen("feed", filter={"name": name}, start_from=0) as live:
            assert [next(live).payload["n"] for _ in range(2)] == [2, 3]
            publish(disconnecting.url, name, 1, start=4)
            assert next(live).payload["n"] == 4
