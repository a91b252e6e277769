"""``Idempotency-Key`` on ``POST /api/v1/notification``, the same on both backends.

A re-sent key inside the duplicate window is answered 200 like the first send and stores
nothing (JetStream: ``Nats-Msg-Id`` in the stream's duplicate window; in-memory: its own
window, ``notification_backend.in_memory.duplicate_window``); re-used for a different
notification it is refused with 422 (JetStream: by the instance that stored the first one,
as here). Keys are per stream.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.conformance.helpers import (
    NOTIFY,
    POLYGON_AROUND_ZURICH,
    REPLAY,
    read_stream,
    unique_basin,
    unique_date,
)


def send(client: httpx.Client, body: dict[str, Any], key: str | None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    response = client.post(NOTIFY, json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "success"
    return response


def gauge_body(basin: str, level: int) -> dict[str, Any]:
    identifier = {"basin": basin, "date": "2026-04-02", "level": level}
    return {"event_type": "river_gauge", "identifier": identifier, "payload": {"level": level}}


def stored_levels(client: httpx.Client, basin: str) -> list[str]:
    body = {"event_type": "river_gauge", "identifier": {"basin": basin}, "from_id": "1"}
    result = read_stream(client, REPLAY, body)
    return [event.data["data"]["identifier"]["level"] for event in result.notifications()]


def test_a_resent_key_is_answered_200_and_stored_once(client: httpx.Client) -> None:
    basin = unique_basin()
    key = f"key-{uuid.uuid4().hex}"
    send(client, gauge_body(basin, 1), key)
    send(client, gauge_body(basin, 1), key)
    send(client, gauge_body(basin, 3), f"other-{uuid.uuid4().hex}")
    assert stored_levels(client, basin) == ["1", "3"]


def test_a_key_reused_for_another_notification_is_refused_naming_it(
    client: httpx.Client,
) -> None:
    basin = unique_basin()
    key = f"key-{uuid.uuid4().hex}"
    send(client, gauge_body(basin, 1), key)
    # Another identifier of the same stream, then another payload: neither is a re-send.
    other_payload = {**gauge_body(basin, 1), "payload": {"level": 99}}
    for body in (gauge_body(basin, 2), other_payload):
        refused = client.post(NOTIFY, json=body, headers={"Idempotency-Key": key})
        assert refused.status_code == 422, refused.text
        answer = refused.json()
        assert answer["code"] == "IDEMPOTENCY_KEY_REUSED"
        assert key in answer["message"]
        assert answer["request_id"] == refused.headers["x-request-id"]
    send(client, gauge_body(basin, 1), key)
    assert stored_levels(client, basin) == ["1"]


def test_without_a_key_every_request_is_stored(client: httpx.Client) -> None:
    basin = unique_basin()
    for _ in range(3):
        send(client, gauge_body(basin, 1), None)
    assert stored_levels(client, basin) == ["1", "1", "1"]


def test_keys_are_remembered_per_stream(client: httpx.Client) -> None:
    basin = unique_basin()
    key = f"key-{uuid.uuid4().hex}"
    storm = {
        "event_type": "storm_cell",
        "identifier": {"date": unique_date(), "time": "12", "polygon": POLYGON_AROUND_ZURICH},
        "payload": {"basin": basin},
    }
    send(client, storm, key)
    send(client, gauge_body(basin, 4), key)
    assert stored_levels(client, basin) == ["4"]
