"""Routing fallbacks, request ids and the error model."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conformance.helpers import (
    ERROR_KEYS,
    NOTIFY,
    POLYGON_AROUND_ZURICH,
    REPLAY,
    UNKNOWN_EVENT_TYPE_KEYS,
    WATCH,
    assert_compact_sorted,
    assert_error,
    gauge,
    open_stream,
    post,
    read_stream,
    request_id_header,
    unique_basin,
)
from tests.support.configs import API_EXAMPLE, ForBackend
from tests.support.server import RunningServer, running_server

LABELS = {
    NOTIFY: "Invalid Notification Request",
    WATCH: "Invalid Watch Request",
    REPLAY: "Invalid Replay Request",
}


def _not_aviso_json(response: httpx.Response) -> None:
    # Framework fallbacks have an empty body (certainly no aviso or Starlette JSON).
    assert response.content == b"", response.content
    try:
        body = json.loads(response.content)
    except ValueError:
        return
    assert not (isinstance(body, dict) and ("code" in body or "detail" in body)), body


def test_health(client: httpx.Client) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.content == b'{"status":"ok"}'
    assert response.headers["content-type"].split(";")[0] == "application/json"
    request_id_header(response)


def test_request_id_is_fresh_and_client_value_ignored(client: httpx.Client) -> None:
    first = request_id_header(client.get("/health"))
    second = request_id_header(client.get("/health"))
    assert first != second
    supplied = client.get("/health", headers={"X-Request-ID": "abc"})
    returned = request_id_header(supplied)
    assert returned != "abc"
    assert returned not in (first, second)


def test_unknown_path_is_bare_404(client: httpx.Client) -> None:
    response = client.get("/no/such/path")
    assert response.status_code == 404
    _not_aviso_json(response)
    request_id_header(response)


def test_wrong_method_is_405(client: httpx.Client) -> None:
    response = client.get(NOTIFY)
    assert response.status_code == 405
    _not_aviso_json(response)
    request_id_header(response)


@pytest.mark.parametrize("path", ["/api/v1/watch/", "/api/v1/replay/", "/api/v1/notification/"])
def test_trailing_slash_is_404_not_redirect(client: httpx.Client, path: str) -> None:
    body = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}}
    response = client.post(path, content=json.dumps(body), follow_redirects=False)
    assert response.status_code == 404
    assert "location" not in response.headers
    request_id_header(response)


@pytest.mark.parametrize("path", [NOTIFY, WATCH, REPLAY])
def test_invalid_json(client: httpx.Client, path: str) -> None:
    response = client.post(path, content=b"not-json")
    assert_error(
        response,
        400,
        "INVALID_JSON",
        error=LABELS[path],
        message_prefix="JSON parsing failed: ",
    )


@pytest.mark.parametrize("path", [NOTIFY, WATCH, REPLAY])
def test_empty_body_is_invalid_json(client: httpx.Client, path: str) -> None:
    response = client.post(path, content=b"")
    assert_error(
        response, 400, "INVALID_JSON", error=LABELS[path], message_prefix="JSON parsing failed: "
    )


def test_unknown_top_level_field(client: httpx.Client) -> None:
    body = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}, "colour": "red"}
    error = assert_error(
        post(client, WATCH, body), 400, "UNKNOWN_FIELD", error="Invalid Watch Request"
    )
    assert "Unknown field 'colour'" in error["message"]
    # The sentence is fully reproducible.
    assert error["message"] == (
        "Request contains unknown fields: Unknown field 'colour' in request. "
        'Allowed fields: ["event_type", "identifier", "from_id", "from_date", "to_id", '
        '"to_date", "payload"]'
    )


def test_unknown_field_checked_before_shape(client: httpx.Client) -> None:
    error = assert_error(post(client, NOTIFY, {"foo": 1}), 400, "UNKNOWN_FIELD")
    assert "Unknown field 'foo'" in error["message"]


def test_missing_identifier_is_shape_error(client: httpx.Client) -> None:
    assert_error(
        post(client, REPLAY, {"event_type": "river_gauge"}),
        400,
        "INVALID_REQUEST_SHAPE",
        error="Invalid Replay Request",
        message_prefix="Request deserialization failed: ",
    )


@pytest.mark.parametrize(
    "body",
    [
        {"event_type": "river_gauge", "identifier": {"basin": "rhine"}, "from_id": 57},
        {"event_type": "river_gauge", "identifier": {"basin": "rhine"}, "from_date": 1740509903},
        {"event_type": 5, "identifier": {"basin": "rhine"}, "from_id": "1"},
        {"event_type": "river_gauge", "identifier": ["rhine"], "from_id": "1"},
        ["event_type", "river_gauge"],
        "river_gauge",
        None,
    ],
    ids=[
        "from_id-number",
        "from_date-number",
        "event_type-number",
        "identifier-array",
        "array-body",
        "string-body",
        "null-body",
    ],
)
def test_wrong_types_are_shape_errors(client: httpx.Client, body: Any) -> None:
    assert_error(
        post(client, REPLAY, body),
        400,
        "INVALID_REQUEST_SHAPE",
        error="Invalid Replay Request",
        message_prefix="Request deserialization failed: ",
    )


def test_unknown_event_type_on_notify(client: httpx.Client) -> None:
    body = {"event_type": "tide_gauge", "identifier": {"basin": "rhine"}}
    error = assert_error(
        post(client, NOTIFY, body),
        400,
        "UNKNOWN_EVENT_TYPE",
        error="unknown_event_type",
        # Deviation: upstream's message, then the likely misspelled configured type.
        message="unknown event type 'tide_gauge' (did you mean 'river_gauge'?)",
        keys=UNKNOWN_EVENT_TYPE_KEYS,
    )
    assert error["configured_event_types"] == ["river_gauge", "storm_cell"]


@pytest.mark.parametrize("path", [WATCH, REPLAY])
def test_unknown_event_type_on_streams(client: httpx.Client, path: str) -> None:
    body = {
        "event_type": "tide_gauge",
        "identifier": {"basin": "rhine"},
        "from_date": "2026-04-01T00:00:00Z",
    }
    error = assert_error(
        post(client, path, body),
        400,
        "UNKNOWN_EVENT_TYPE",
        message="unknown event type 'tide_gauge' (did you mean 'river_gauge'?)",
        keys=UNKNOWN_EVENT_TYPE_KEYS,
    )
    assert error["configured_event_types"] == ["river_gauge", "storm_cell"]


def test_an_unknown_event_type_like_no_configured_one_gets_no_hint(client: httpx.Client) -> None:
    body = {"event_type": "lightning", "identifier": {}}
    error = post(client, NOTIFY, body).json()
    assert error["message"] == "unknown event type 'lightning'"


def test_an_unknown_identifier_field_names_the_declared_one_it_resembles(
    client: httpx.Client,
) -> None:
    body = {"event_type": "river_gauge", "identifier": {"basn": "rhine"}, "from_id": "1"}
    error = post(client, REPLAY, body).json()
    assert error["message"] == (
        "Unknown field 'basn' provided for replay operation (did you mean 'basin'?)"
    )


def test_unknown_event_type_precedes_cursor_validation(client: httpx.Client) -> None:
    # Checked right after parsing: an invalid cursor is not reported first.
    body = {"event_type": "tide_gauge", "identifier": {}, "from_id": "abc"}
    assert_error(
        post(client, REPLAY, body), 400, "UNKNOWN_EVENT_TYPE", keys=UNKNOWN_EVENT_TYPE_KEYS
    )


def test_drain_mode_rejects_every_event_type(for_backend: ForBackend) -> None:
    document = {key: value for key, value in API_EXAMPLE.items() if key != "notification_schema"}
    document["notification_schema_strict"] = True
    with running_server(for_backend(document)) as server, httpx.Client(base_url=server.url) as http:
        for event_type in ("river_gauge", "adhoc_feed"):
            body = {"event_type": event_type, "identifier": {"x": "1"}}
            error = assert_error(
                post(http, NOTIFY, body),
                400,
                "UNKNOWN_EVENT_TYPE",
                message=f"unknown event type '{event_type}'",
                keys=UNKNOWN_EVENT_TYPE_KEYS,
            )
            assert error["configured_event_types"] == []


# -- error bodies ---------------------------------------------------------------------------------

_ERROR_CASES: list[tuple[str, Any, str]] = [
    (NOTIFY, b"{", "INVALID_JSON"),
    (NOTIFY, b'{"event_type":"river_gauge","identifier":{}} trailing', "INVALID_JSON"),
    (WATCH, {"event_type": "river_gauge", "identifier": {}, "zz": 1, "aa": 2}, "UNKNOWN_FIELD"),
    (REPLAY, {"identifier": {}}, "INVALID_REQUEST_SHAPE"),
    (
        NOTIFY,
        {"event_type": "river_gauge", "identifier": {"basin": "x"}},
        "INVALID_NOTIFICATION_REQUEST",
    ),
    (WATCH, {"event_type": "river_gauge", "identifier": {}}, "INVALID_WATCH_REQUEST"),
    (REPLAY, {"event_type": "river_gauge", "identifier": {"basin": "x"}}, "INVALID_REPLAY_REQUEST"),
    (
        WATCH,
        {
            "event_type": "storm_cell",
            "identifier": {"polygon": POLYGON_AROUND_ZURICH, "point": "1,2"},
        },
        "INVALID_WATCH_REQUEST",
    ),
    (
        NOTIFY,
        {
            "event_type": "river_gauge",
            "identifier": {"basin": "x", "date": "2026-04-02", "level": "abc"},
        },
        "INVALID_NOTIFICATION_REQUEST",
    ),
]


@pytest.mark.parametrize("case", _ERROR_CASES, ids=lambda case: case[2])
def test_error_bodies_have_exactly_the_five_keys(
    client: httpx.Client, case: tuple[str, Any, str]
) -> None:
    path, body, code = case
    content = body if isinstance(body, bytes) else json.dumps(body)
    error = assert_error(client.post(path, content=content), 400, code, keys=ERROR_KEYS)
    assert error["error"] == LABELS[path]


def test_several_unknown_fields_report_the_first_sorted(client: httpx.Client) -> None:
    body = {"event_type": "river_gauge", "identifier": {}, "zz": 1, "aa": 2}
    error = assert_error(post(client, WATCH, body), 400, "UNKNOWN_FIELD")
    assert "Unknown field 'aa'" in error["message"]


def test_integer_parse_failure_details_is_the_deeper_cause(client: httpx.Client) -> None:
    body = {
        "event_type": "river_gauge",
        "identifier": {"basin": "x", "date": "2026-04-02", "level": "abc"},
    }
    error = assert_error(post(client, NOTIFY, body), 400, "INVALID_NOTIFICATION_REQUEST")
    assert error["message"] == "Field 'level' must be a valid integer, got: 'abc'"


def _data_lines(raw: str) -> list[str]:
    return [line[len("data: ") :] for line in raw.split("\n") if line.startswith("data: ")]


def test_sse_data_lines_are_compact_and_sorted(
    api_server: RunningServer, client: httpx.Client
) -> None:
    basin = unique_basin()
    # Spaces, colons, commas and non-ASCII inside strings must survive untouched.
    payload = {"z note": "a b: c, d", "ä": ["é", {"y": 1, "b": " x "}], "a": None}
    gauge(client, basin, 4, payload)
    replay = read_stream(
        client,
        REPLAY,
        {"event_type": "river_gauge", "identifier": {"basin": basin}, "from_id": "0"},
    )
    with open_stream(
        client,
        WATCH,
        {"event_type": "river_gauge", "identifier": {"basin": basin, "level": 4}, "from_date": "0"},
    ) as watch:
        watch.until_kind("replay-control/replay_completed")
        gauge(client, basin, 4, payload)
        watch.until_kind("live-notification")
        watch_raw = watch.raw
    for raw in (replay.raw, watch_raw):
        lines = _data_lines(raw)
        assert len(lines) >= 4
        for line in lines:
            assert_compact_sorted(line)
        assert "é" in raw and "\\u00e9" not in raw, "non-ASCII must be raw UTF-8"
    notification = replay.notifications()[0]
    assert notification.data["data"]["payload"] == payload
