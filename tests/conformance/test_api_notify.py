"""POST /api/v1/notification and what replay gives back."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conformance.helpers import (
    NOTIFY,
    POLYGON_AROUND_ZURICH,
    assert_error,
    gauge,
    notify,
    post,
    replay_all,
    request_id_header,
    unique_basin,
    unique_date,
)
from tests.support.configs import API_EXAMPLE, ForBackend, with_changes
from tests.support.server import RunningServer, running_server

INVALID = "INVALID_NOTIFICATION_REQUEST"
LABEL = "Invalid Notification Request"


def test_success_body(client: httpx.Client) -> None:
    response = gauge(client, unique_basin(), payload={"reading_cm": 412, "station": "Kaub"})
    assert response.headers["content-type"].split(";")[0] == "application/json"
    # Declared order, compact: parse as pairs to see the order on the wire.
    pairs = json.loads(response.text, object_pairs_hook=list)
    assert [key for key, _ in pairs] == ["status", "request_id", "processed_at"]
    body = dict(pairs)
    assert body["status"] == "success"
    assert body["request_id"] == request_id_header(response)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", body["processed_at"])
    assert response.text == json.dumps(body, separators=(",", ":"))


def test_every_declared_key_is_required_on_notify(client: httpx.Client) -> None:
    body = {"event_type": "river_gauge", "identifier": {"basin": "rhine", "date": "2026-04-02"}}
    assert_error(
        post(client, NOTIFY, body),
        400,
        INVALID,
        error=LABEL,
        message="Required field 'level' missing for notify operation",
    )


def test_constraint_object_rejected_on_notify(client: httpx.Client) -> None:
    identifier = {"basin": "rhine", "date": "2026-04-02", "level": {"gte": 2}}
    error = assert_error(
        post(client, NOTIFY, {"event_type": "river_gauge", "identifier": identifier}),
        400,
        INVALID,
        error=LABEL,
    )
    assert error["message"] == (
        "Field 'level' constraint object is not supported for notify operation"
    )


def test_point_rejected_on_notify(client: httpx.Client) -> None:
    identifier = {
        "date": "2026-04-02",
        "time": "12",
        "polygon": POLYGON_AROUND_ZURICH,
        "point": "47.3,8.5",
    }
    body = {"event_type": "storm_cell", "identifier": identifier, "payload": {"cell": "A17"}}
    assert_error(
        post(client, NOTIFY, body),
        400,
        INVALID,
        error=LABEL,
        message="identifier.point is only supported for watch/replay endpoints, not /notification",
    )


def test_undeclared_identifier_key_is_400(client: httpx.Client) -> None:
    identifier = {"basin": "rhine", "date": "2026-04-02", "level": 3, "gauge_id": "K1"}
    error = assert_error(
        post(client, NOTIFY, {"event_type": "river_gauge", "identifier": identifier}),
        400,
        INVALID,
        error=LABEL,
    )
    assert "gauge_id" in error["message"]
    assert error["message"] == "Unknown field 'gauge_id' provided for notify operation"


@pytest.mark.parametrize("with_null", [False, True], ids=["omitted", "null"])
def test_required_payload(client: httpx.Client, with_null: bool) -> None:
    body: dict[str, Any] = {
        "event_type": "storm_cell",
        "identifier": {"date": "2026-04-02", "time": "12", "polygon": POLYGON_AROUND_ZURICH},
    }
    if with_null:
        body["payload"] = None
    assert_error(
        post(client, NOTIFY, body),
        400,
        INVALID,
        error=LABEL,
        message="Payload is required for notify operation based on schema configuration",
    )


def test_omitted_optional_payload_replays_as_null(client: httpx.Client) -> None:
    basin = unique_basin()
    gauge(client, basin)
    (event,) = replay_all(client, "river_gauge", {"basin": basin}).notifications()
    assert "payload" in event.data["data"]
    assert event.data["data"]["payload"] is None
    assert '"payload":null' in event.raw


@pytest.mark.parametrize(
    "payload",
    ["ready", 42, True, ["a", "b"], {"z": 1, "a": 2}, 2.5, "", {"nested": {"b": [1, {"a": None}]}}],
    ids=repr,
)
def test_payload_round_trips_unchanged(client: httpx.Client, payload: Any) -> None:
    basin = unique_basin()
    gauge(client, basin, payload=payload)
    (event,) = replay_all(client, "river_gauge", {"basin": basin}).notifications()
    returned = event.data["data"]["payload"]
    assert returned == payload
    assert type(returned) is type(payload)


def test_identifier_values_are_canonical_strings(client: httpx.Client) -> None:
    basin = unique_basin()
    notify(client, "river_gauge", {"basin": basin, "date": "2026-04-02", "level": 3})
    (event,) = replay_all(client, "river_gauge", {"basin": basin}).notifications()
    assert event.data["data"]["identifier"] == {"basin": basin, "date": "20260402", "level": "3"}


# -- permissive mode --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def permissive_server(for_backend: ForBackend) -> Iterator[RunningServer]:
    document = with_changes(API_EXAMPLE)
    document["notification_schema_strict"] = False
    with running_server(for_backend(document)) as server:
        yield server


@pytest.fixture
def permissive(permissive_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=permissive_server.url, timeout=10.0) as http:
        yield http


def test_generic_notify_and_replay(permissive: httpx.Client) -> None:
    value = unique_basin()
    notify(permissive, "adhoc_feed", {"x": value})
    assert_error(
        post(permissive, NOTIFY, {"event_type": "adhoc_feed", "identifier": {"x": ""}}),
        400,
        INVALID,
        error=LABEL,
    )
    result = replay_all(permissive, "adhoc_feed", {"x": value})
    assert result.kinds == [
        "replay-control/replay_started",
        "replay",
        "replay-control/replay_completed",
        "connection-closing",
    ]
    cloudevent = result.events[1].data
    sequence = cloudevent["sequence"]
    assert cloudevent["type"] == "int.ecmwf.aviso.adhoc_feed"
    assert cloudevent["id"] == f"adhoc_feed@{sequence}"
    assert cloudevent["data"]["identifier"] == {"x": value}
    assert cloudevent["data"]["payload"] is None
    assert result.events[-1].data["reason"] == "end_of_stream"


def test_known_event_types_still_follow_their_schema(permissive: httpx.Client) -> None:
    body = {"event_type": "river_gauge", "identifier": {"basin": "rhine", "date": "2026-04-02"}}
    assert_error(
        post(permissive, NOTIFY, body),
        400,
        INVALID,
        message="Required field 'level' missing for notify operation",
    )
    storm = {"date": unique_date(), "time": "12", "polygon": POLYGON_AROUND_ZURICH}
    assert_error(
        post(permissive, NOTIFY, {"event_type": "storm_cell", "identifier": storm}), 400, INVALID
    )
