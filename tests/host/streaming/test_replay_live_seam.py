"""Replay-to-live without gap or duplicate, while a producer publishes across the switch."""

from __future__ import annotations

import json
import threading

import httpx

from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import running_server
from tests.support.sse import DEFAULT_TIMEOUT, Stream

STORED_BEFORE = 100
PUBLISHED_DURING = 200


def _notify(client: httpx.Client, level: int) -> None:
    body = {
        "event_type": "river_gauge",
        "identifier": {"basin": "rhine", "date": "2026-04-02", "level": level % 11},
        "payload": {"n": level},
    }
    response = client.post("/api/v1/notification", content=json.dumps(body))
    assert response.status_code == 200, response.text


def test_watch_from_id_receives_every_notification_once_in_order() -> None:
    # Small batches with a pause make the replay span the whole publishing window.
    config = with_changes(
        API_EXAMPLE, watch_endpoint={"replay_batch_size": 10, "replay_batch_delay_ms": 20}
    )
    with running_server(config) as server, httpx.Client(base_url=server.url) as client:
        for n in range(STORED_BEFORE):
            _notify(client, n)
        total = STORED_BEFORE + PUBLISHED_DURING
        publisher_done = threading.Event()
        replay_completed = threading.Event()

        def publish() -> None:
            # The first half lands while history is being paged (so it is both in history
            # and in the live buffer); the second half starts as the stream goes live.
            with httpx.Client(base_url=server.url) as producer:
                for n in range(STORED_BEFORE, total):
                    if n == STORED_BEFORE + PUBLISHED_DURING // 2:
                        replay_completed.wait(10)
                    _notify(producer, n)
            publisher_done.set()

        sequences: list[int] = []
        kinds: list[str] = []
        body = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}, "from_id": "0"}
        with client.stream(
            "POST", "/api/v1/watch", content=json.dumps(body), timeout=DEFAULT_TIMEOUT
        ) as response:
            assert response.status_code == 200
            publisher = threading.Thread(target=publish)
            for event in Stream(response).events():
                if event.kind == "replay-control/replay_started":
                    publisher.start()
                kinds.append(event.kind)
                if event.kind == "replay-control/replay_completed":
                    replay_completed.set()
                if event.name in ("replay", "live-notification"):
                    sequences.append(event.data["sequence"])
                if len(sequences) == total and replay_completed.is_set():
                    break
        publisher.join(30)
        assert publisher_done.is_set()

    assert sequences == sorted(set(sequences)), "strictly ascending, no duplicate"
    assert sequences == list(range(1, total + 1)), "nothing missing"
    switch = kinds.index("replay-control/replay_completed")
    assert "live-notification" in kinds[switch:], "the live feed took over after the replay"
