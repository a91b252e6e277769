"""The in-memory backend and the admin endpoints on it, over HTTP.

Each test gets a server of its own (sequence numbers and retention are process state).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import yaml

from tests.conformance.helpers import (
    ADMIN_KEYS,
    REPLAY,
    WATCH,
    WIPE_KEYS,
    admin_body,
    notify,
    open_stream,
    parse_ce_time,
    read_stream,
    replay_all,
    request_id_header,
    wipe_stream,
)
from tests.support.server import running_server

BACKEND_EXAMPLE = yaml.safe_load(
    """
application: { host: 127.0.0.1, port: 0, base_url: "https://aviso.example.org" }
notification_backend:
  kind: in_memory
  in_memory: { max_history_per_topic: 100, max_topics: 10000 }
notification_schema:
  mars:
    topic: { base: mars, key_order: [class, date, step] }
    identifier:
      class: { type: StringHandler, required: true }
      date: { type: DateHandler, canonical_format: "%Y%m%d", required: true }
      step: { type: IntHandler, required: false }
  dissemination:
    topic: { base: diss, key_order: [destination, date] }
    identifier:
      destination: { type: StringHandler, required: true }
      date: { type: DateHandler, canonical_format: "%Y%m%d", required: false }
  test_polygon:
    topic: { base: test_polygon, key_order: [date] }
    identifier:
      date: { type: DateHandler, canonical_format: "%Y%m%d", required: false }
      polygon: { type: PolygonHandler, required: true }
"""
)


def _document(in_memory: dict[str, Any]) -> dict[str, Any]:
    """The example with ``notification_backend.in_memory`` replaced (``{}``: all defaults)."""
    document = json.loads(json.dumps(BACKEND_EXAMPLE))
    document["notification_backend"]["in_memory"] = in_memory
    return document


@pytest.fixture
def in_memory() -> dict[str, Any]:
    """``notification_backend.in_memory`` for this test (overridden by parametrisation)."""
    return {"max_history_per_topic": 100, "max_topics": 10000}


@pytest.fixture
def http(in_memory: dict[str, Any]) -> Iterator[httpx.Client]:
    with (
        running_server(_document(in_memory)) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        yield client


def _in_memory(**values: Any) -> Any:
    return pytest.mark.parametrize("in_memory", [values], ids=[""])


def mars(client: httpx.Client, cls: str = "od", step: int = 1, payload: Any = None) -> None:
    notify(client, "mars", {"class": cls, "date": "2025-07-06", "step": step}, payload)


def diss(client: httpx.Client, destination: str = "FOO", payload: Any = None) -> None:
    notify(client, "dissemination", {"destination": destination, "date": "2025-07-06"}, payload)


def replay_mars(
    client: httpx.Client, from_id: str = "0", **identifier: Any
) -> list[dict[str, Any]]:
    result = replay_all(
        client, "mars", {"class": "od", "date": "2025-07-06", **identifier}, from_id
    )
    return [event.data for event in result.notifications()]


def replay_diss(client: httpx.Client, from_id: str = "0") -> list[dict[str, Any]]:
    result = replay_all(client, "dissemination", {"destination": "FOO"}, from_id)
    return [event.data for event in result.notifications()]


# -- 5–12: in-memory semantics ----------------------------------------------------------------


def test_sequences_are_consecutive_per_stream(http: httpx.Client) -> None:
    # Not a process-wide counter (as aviso-server's in-memory backend has): an unfiltered pyaviso
    # listener needs N, N+1, ... per event type, as JetStream numbers them.
    mars(http)
    diss(http)
    mars(http, step=2)
    diss(http, destination="BAR")
    (first, third) = replay_mars(http)
    (second,) = replay_diss(http)
    assert [first["sequence"], third["sequence"]] == [1, 2]
    assert second["sequence"] == 1
    assert [first["id"], third["id"], second["id"]] == ["mars@1", "mars@2", "dissemination@1"]


@_in_memory()
def test_default_history_is_one_per_subject(http: httpx.Client) -> None:
    for n in range(3):
        mars(http, payload={"n": n})
    events = replay_mars(http, from_id="1")
    assert [event["data"]["payload"] for event in events] == [{"n": 2}]
    assert events[0]["sequence"] == 3


def test_history_of_one_subject(http: httpx.Client) -> None:
    for n in range(3):
        mars(http, payload={"n": n})
    events = replay_mars(http)
    assert [event["data"]["payload"] for event in events] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert [event["sequence"] for event in events] == [1, 2, 3]


@_in_memory(max_history_per_topic=100, max_topics=2)
def test_topic_eviction(http: httpx.Client) -> None:
    for step in (1, 2, 3):  # subjects X, Y, Z
        mars(http, step=step)
    assert replay_mars(http, step=1) == []
    assert [event["data"]["identifier"]["step"] for event in replay_mars(http, step=2)] == ["2"]
    assert [event["data"]["identifier"]["step"] for event in replay_mars(http, step=3)] == ["3"]


def test_from_id_inclusive_and_beyond(http: httpx.Client) -> None:
    for step in (1, 2, 3):
        mars(http, step=step)
    assert [event["sequence"] for event in replay_mars(http, from_id="2")] == [2, 3]
    assert replay_mars(http, from_id="4") == []
    assert replay_mars(http, from_id="999999") == []


def test_from_date_between_two(http: httpx.Client) -> None:
    mars(http, step=1)
    time.sleep(0.15)  # creates two distinct storage times (not synchronisation)
    mars(http, step=2)
    older, newer = replay_mars(http)
    t_older, t_newer = parse_ce_time(older["time"]), parse_ce_time(newer["time"])
    assert t_newer - t_older >= timedelta(milliseconds=100)
    middle = (t_older + (t_newer - t_older) / 2).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = {
        "event_type": "mars",
        "identifier": {"class": "od", "date": "2025-07-06"},
        "from_date": middle,
    }
    result = read_stream(http, REPLAY, body)
    assert result.sequences() == [newer["sequence"]]


def test_live_watch_sees_only_later_notifications(http: httpx.Client) -> None:
    mars(http, payload={"when": "before"})
    body = {"event_type": "mars", "identifier": {"class": "od", "date": "2025-07-06"}}
    with open_stream(http, WATCH, body) as stream:
        stream.until_kind("live-notification/connection_established")
        mars(http, payload={"when": "after"})
        event = stream.until_kind("live-notification")
    assert event.data["data"]["payload"] == {"when": "after"}


def test_second_server_sees_nothing_of_the_first(
    http: httpx.Client, in_memory: dict[str, Any]
) -> None:
    with (
        running_server(_document(in_memory)) as other_server,
        httpx.Client(base_url=other_server.url, timeout=10.0) as other,
    ):
        body = {"event_type": "mars", "identifier": {"class": "od", "date": "2025-07-06"}}
        with open_stream(other, WATCH, body) as stream:
            stream.until_kind("live-notification/connection_established")
            mars(http, payload={"server": "first"})
            mars(other, payload={"server": "second"})
            event = stream.until_kind("live-notification")
        assert event.data["data"]["payload"] == {"server": "second"}, "first's was not fanned out"
        events = replay_mars(other)
        assert [event["data"]["payload"] for event in events] == [{"server": "second"}]
    assert [event["data"]["payload"] for event in replay_mars(http)] == [{"server": "first"}]


# -- 27–32: delete --------------------------------------------------------------------------


def test_delete_malformed(http: httpx.Client) -> None:
    response = http.delete("/api/v1/admin/notification/not-a-valid-id")
    assert response.status_code == 400
    body = admin_body(response, ADMIN_KEYS)
    assert body["success"] is False
    assert body["message"] == "notification_id must be in '<stream>@<sequence>' format"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("mars@0", "notification_id sequence must be greater than zero"),
        ("mars@abc", "notification_id sequence must be a positive integer"),
    ],
)
def test_delete_bad_sequence(http: httpx.Client, raw: str, message: str) -> None:
    response = http.delete(f"/api/v1/admin/notification/{raw}")
    assert response.status_code == 400
    assert admin_body(response, ADMIN_KEYS)["message"] == message


def test_delete_unused_sequence(http: httpx.Client) -> None:
    response = http.delete("/api/v1/admin/notification/test_polygon@999999999")
    assert response.status_code == 404
    body = admin_body(response, ADMIN_KEYS)
    assert body["success"] is False
    assert body["message"] == "Notification not found"


def test_delete_by_cloudevent_id(http: httpx.Client) -> None:
    mars(http, step=1)
    mars(http, step=2)
    first, second = replay_mars(http)
    assert first["id"] == f"mars@{first['sequence']}"
    response = http.delete(f"/api/v1/admin/notification/{first['id']}")
    assert response.status_code == 200
    assert admin_body(response, ADMIN_KEYS)["message"] == "Notification deleted"
    assert [event["id"] for event in replay_mars(http)] == [second["id"]]
    again = http.delete(f"/api/v1/admin/notification/{first['id']}")
    assert again.status_code == 404
    assert admin_body(again, ADMIN_KEYS)["message"] == "Notification not found"


@pytest.mark.parametrize(
    "form", ["dissemination@{n}", "DISSEMINATION@{n}", "diss@{n}", "DISS@{n}", " diss@{n} "]
)
def test_alias_and_base_address_the_same_message(http: httpx.Client, form: str) -> None:
    diss(http)
    (event,) = replay_diss(http)
    assert event["id"] == f"dissemination@{event['sequence']}"
    raw = form.format(n=event["sequence"])
    response = http.delete(f"/api/v1/admin/notification/{raw}")
    assert response.status_code == 200, response.text
    assert admin_body(response, ADMIN_KEYS)["notification_id"] == raw
    assert replay_diss(http) == []


def test_other_stream_does_not_delete(http: httpx.Client) -> None:
    diss(http)
    (event,) = replay_diss(http)
    response = http.delete(f"/api/v1/admin/notification/mars@{event['sequence']}")
    assert response.status_code == 404
    assert len(replay_diss(http)) == 1


def test_delete_body_members(http: httpx.Client) -> None:
    mars(http)
    (event,) = replay_mars(http)
    response = http.delete(f"/api/v1/admin/notification/{event['id']}")
    body = admin_body(response, ADMIN_KEYS)
    assert body == {
        "success": True,
        "message": "Notification deleted",
        "notification_id": event["id"],
        "request_id": response.headers["x-request-id"],
    }


# -- 33–37: wipes ---------------------------------------------------------------------------


def test_wipe_one_stream(http: httpx.Client) -> None:
    mars(http)
    diss(http)
    response = wipe_stream(http, b'{"stream_name":"MARS"}')
    assert response.status_code == 200
    body = admin_body(response, WIPE_KEYS)
    assert body["success"] is True
    assert body["message"] == "Successfully wiped stream: MARS"
    assert replay_mars(http) == []
    assert len(replay_diss(http)) == 1


def test_sequences_continue_after_a_wipe(http: httpx.Client) -> None:
    for step in (1, 2, 3):
        mars(http, step=step)
    highest = max(event["sequence"] for event in replay_mars(http))
    assert wipe_stream(http, b'{"stream_name":"mars"}').status_code == 200
    assert replay_mars(http) == []
    mars(http, step=1)
    (event,) = replay_mars(http)
    assert event["sequence"] > highest


def test_wipe_unknown_stream_on_in_memory_is_404(http: httpx.Client) -> None:
    # An unknown stream is 404 on both backends (it was 200 here, 500 on JetStream).
    mars(http)
    response = wipe_stream(http, b'{"stream_name":"NO_SUCH_STREAM"}')
    assert response.status_code == 404
    body = admin_body(response, WIPE_KEYS)
    assert body == {**body, "success": False, "message": "Stream not found"}
    assert len(replay_mars(http)) == 1


@pytest.mark.parametrize(
    ("content", "json_header"),
    [
        (None, True),
        (b"", True),
        (b"not json", True),
        (b"{}", True),
        (b'{"stream_name":5}', True),
        (b'{"stream_name":"MARS"}', False),
    ],
    ids=["no-body", "empty", "not-json", "missing-name", "non-string-name", "no-content-type"],
)
def test_wipe_stream_needs_a_json_body(
    http: httpx.Client, content: bytes | None, json_header: bool
) -> None:
    mars(http)
    response = wipe_stream(http, content, json_header)
    assert response.status_code == 400
    request_id_header(response)
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    assert not (isinstance(body, dict) and "code" in body), "framework text, not aviso JSON"
    assert len(replay_mars(http)) == 1, "nothing was wiped"


def test_wipe_all(http: httpx.Client) -> None:
    mars(http)
    diss(http)
    notify(
        http, "test_polygon", {"date": "2025-07-06", "polygon": "(1.0,1.0,2.0,1.0,2.0,2.0,1.0,1.0)"}
    )
    response = http.delete("/api/v1/admin/wipe/all")
    assert response.status_code == 200
    body = admin_body(response, WIPE_KEYS)
    assert body["success"] is True
    assert body["message"] == "Successfully wiped all data"
    assert replay_mars(http) == []
    assert replay_diss(http) == []
    polygon = replay_all(http, "test_polygon", {"point": "1.2,1.5"})
    assert polygon.notifications() == []
    mars(http, payload={"after": True})
    (event,) = replay_mars(http)
    assert event["data"]["payload"] == {"after": True}
    assert event["sequence"] == 2, "numbering continues after a wipe (a JetStream purge)"
