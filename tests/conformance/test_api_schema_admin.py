"""Schema discovery, admin endpoints, operational routes.

What needs auth enabled lives in ``test_api_auth.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conformance.helpers import (
    ADMIN_KEYS,
    POLYGON_AROUND_ZURICH,
    WIPE_KEYS,
    admin_body,
    assert_compact_sorted,
    gauge,
    notify,
    replay_all,
    request_id_header,
    unique_basin,
    unique_date,
    wipe_stream,
)
from tests.support.configs import API_EXAMPLE, ForBackend, with_changes
from tests.support.server import running_server


@pytest.fixture
def fresh(for_backend: ForBackend) -> Iterator[httpx.Client]:
    """A server of its own, for tests that wipe data.

    On JetStream the wipes purge streams of the session's shared nats-server; no test relies on
    data stored before it started, so that is harmless to the others.
    """
    with (
        running_server(for_backend(API_EXAMPLE)) as server,
        httpx.Client(base_url=server.url) as http,
    ):
        yield http


# -- 51–53: schema discovery --------------------------------------------------------------------


def test_schema_listing(client: httpx.Client) -> None:
    response = client.get("/api/v1/schema")
    assert response.status_code == 200
    body = assert_compact_sorted(response.text)
    assert set(body) == {"event_types", "schema", "status", "total_schemas"}
    assert body["status"] == "success"
    assert body["total_schemas"] == 2
    assert body["event_types"] == ["river_gauge", "storm_cell"]
    for forbidden in ('"topic"', '"storage_policy"', '"auth"', '"key_order"', '"endpoint"'):
        assert forbidden not in response.text
    assert set(body["schema"]["storm_cell"]) == {"identifier", "payload"}
    assert body["schema"]["storm_cell"]["identifier"]["polygon"] == {
        "operators": [],
        "required": True,
        "type": "PolygonHandler",
        "value_kind": "polygon",
    }
    assert body["schema"]["storm_cell"]["payload"] == {"required": True}


def test_authorization_header_ignored_without_auth(client: httpx.Client) -> None:
    response = client.get("/api/v1/schema", headers={"Authorization": "Garbage x"})
    assert response.status_code == 200


def test_no_schema_configured(for_backend: ForBackend) -> None:
    document = {key: value for key, value in API_EXAMPLE.items() if key != "notification_schema"}
    with running_server(for_backend(document)) as server, httpx.Client(base_url=server.url) as http:
        listing = http.get("/api/v1/schema")
        assert listing.status_code == 200
        assert listing.text == (
            '{"event_types":[],"message":"No notification schema configured","schema":{},'
            '"status":"success","total_schemas":0}'
        )
        missing = http.get("/api/v1/schema/river_gauge")
        assert missing.status_code == 404
        body = assert_compact_sorted(missing.text)
        assert set(body) == {"message", "request_id", "status"}
        assert body["message"] == "No notification schema configured"
        assert body["request_id"] == request_id_header(missing)


def test_one_schema(client: httpx.Client) -> None:
    response = client.get("/api/v1/schema/river_gauge")
    assert response.status_code == 200
    body = assert_compact_sorted(response.text)
    assert set(body) == {"event_type", "schema", "status"}
    assert body["event_type"] == "river_gauge"
    assert body["status"] == "success"
    assert body["schema"]["identifier"]["level"]["range"] == [0, 10]
    assert body["schema"]["payload"]["required"] is False
    assert body["schema"]["identifier"]["basin"] == {
        "max_length": None,
        "operators": [],
        "required": True,
        "type": "StringHandler",
        "value_kind": "text",
    }
    # The field description says how to ask for a value and which constraints apply.
    level = body["schema"]["identifier"]["level"]
    assert level["value_kind"] == "integer"
    assert level["operators"] == ["between", "eq", "gt", "gte", "in", "lt", "lte"]
    assert body["schema"]["identifier"]["date"]["value_kind"] == "date"


def test_unknown_schema(client: httpx.Client) -> None:
    response = client.get("/api/v1/schema/tide_gauge")
    assert response.status_code == 404
    body = assert_compact_sorted(response.text)
    assert set(body) == {"available_types", "message", "request_id", "status"}
    assert body["status"] == "error"
    assert body["message"] == "Event type 'tide_gauge' not found"
    assert sorted(body["available_types"]) == ["river_gauge", "storm_cell"]
    assert body["request_id"] == request_id_header(response)


# -- 55–58: delete one notification ---------------------------------------------------------


def test_delete_malformed_id(client: httpx.Client) -> None:
    response = client.delete("/api/v1/admin/notification/not-an-id")
    assert response.status_code == 400
    body = admin_body(response, ADMIN_KEYS)
    assert body["success"] is False
    assert body["message"] == "notification_id must be in '<stream>@<sequence>' format"
    assert body["notification_id"] == "not-an-id"


@pytest.mark.parametrize("raw", ["@5", "gauge@", "@"])
def test_delete_empty_parts(client: httpx.Client, raw: str) -> None:
    response = client.delete(f"/api/v1/admin/notification/{raw}")
    assert response.status_code == 400
    body = admin_body(response, ADMIN_KEYS)
    assert body["message"] == "notification_id must be in '<stream>@<sequence>' format"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("gauge@0", "notification_id sequence must be greater than zero"),
        ("gauge@x1", "notification_id sequence must be a positive integer"),
        ("gauge@-3", "notification_id sequence must be a positive integer"),
        ("gauge@1.5", "notification_id sequence must be a positive integer"),
        ("gauge@18446744073709551616", "notification_id sequence must be a positive integer"),
    ],
)
def test_delete_bad_sequence(client: httpx.Client, raw: str, message: str) -> None:
    response = client.delete(f"/api/v1/admin/notification/{raw}")
    assert response.status_code == 400
    body = admin_body(response, ADMIN_KEYS)
    assert body["success"] is False
    assert body["message"] == message
    assert body["notification_id"] == raw


@pytest.mark.parametrize("raw", ["river_gauge@999999999", "no_such_stream@999999999"])
def test_delete_unknown(client: httpx.Client, raw: str) -> None:
    response = client.delete(f"/api/v1/admin/notification/{raw}")
    assert response.status_code == 404
    body = admin_body(response, ADMIN_KEYS)
    assert body["success"] is False
    assert body["message"] == "Notification not found"


@pytest.mark.parametrize("form", ["event_type", "topic_base"])
def test_delete_a_replayed_notification(client: httpx.Client, form: str) -> None:
    basin = unique_basin()
    gauge(client, basin)
    (event,) = replay_all(client, "river_gauge", {"basin": basin}).notifications()
    cloudevent_id = event.data["id"]
    sequence = event.data["sequence"]
    raw = cloudevent_id if form == "event_type" else f"gauge@{sequence}"
    response = client.delete(f"/api/v1/admin/notification/{raw}")
    assert response.status_code == 200, response.text
    body = admin_body(response, ADMIN_KEYS)
    assert body == {
        "success": True,
        "message": "Notification deleted",
        "notification_id": raw,
        "request_id": body["request_id"],
    }
    assert replay_all(client, "river_gauge", {"basin": basin}).notifications() == []


# -- 59–60: wipes -----------------------------------------------------------------------------


def _storm(client: httpx.Client, day: str) -> None:
    identifier = {"date": day, "time": "12", "polygon": POLYGON_AROUND_ZURICH}
    notify(client, "storm_cell", identifier, {"cell": "A17"})


def test_wipe_stream(fresh: httpx.Client) -> None:
    basin = unique_basin()
    day = unique_date()
    gauge(fresh, basin)
    _storm(fresh, day)
    response = wipe_stream(fresh, b'{"stream_name":"GAUGE"}')
    assert response.status_code == 200
    body = admin_body(response, WIPE_KEYS)
    assert body["success"] is True
    assert body["message"] == "Successfully wiped stream: GAUGE"
    assert replay_all(fresh, "river_gauge", {"basin": basin}).notifications() == []
    assert (
        len(replay_all(fresh, "storm_cell", {"date": day, "point": "47.3,8.5"}).notifications())
        == 1
    )


# ``stream_name`` accepts a topic base in any case or an event type.
def test_wipe_stream_resolves_event_type_aliases(fresh: httpx.Client) -> None:
    basin = unique_basin()
    gauge(fresh, basin)
    response = wipe_stream(fresh, b'{"stream_name":"river_gauge","extra":1}')
    assert response.status_code == 200
    assert admin_body(response, WIPE_KEYS)["message"] == "Successfully wiped stream: river_gauge"
    assert replay_all(fresh, "river_gauge", {"basin": basin}).notifications() == []


def test_wipe_all(fresh: httpx.Client) -> None:
    basin = unique_basin()
    day = unique_date()
    gauge(fresh, basin)
    _storm(fresh, day)
    response = fresh.delete("/api/v1/admin/wipe/all")
    assert response.status_code == 200
    body = admin_body(response, WIPE_KEYS)
    assert body["success"] is True
    assert body["message"] == "Successfully wiped all data"
    assert replay_all(fresh, "river_gauge", {"basin": basin}).notifications() == []
    assert replay_all(fresh, "storm_cell", {"date": day, "point": "47.3,8.5"}).notifications() == []
    gauge(fresh, basin, payload={"after": "wipe"})
    (event,) = replay_all(fresh, "river_gauge", {"basin": basin}).notifications()
    assert event.data["data"]["payload"] == {"after": "wipe"}


# -- 63–64: operational routes ------------------------------------------------------------------


def test_openapi_and_swagger(client: httpx.Client) -> None:
    from aviso_host.service import server_version

    response = client.get("/api-docs/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"].split(";")[0] == "application/json"
    document = response.json()
    assert "openapi" in document
    assert str(document["openapi"]).startswith("3.1")
    assert document["info"]["title"] == "Aviso Notification Service API"
    assert document["info"]["version"] == server_version()
    for path in (
        "/api/v1/notification",
        "/api/v1/watch",
        "/api/v1/replay",
        "/api/v1/schema",
        "/api/v1/schema/{event_type}",
        "/api/v1/admin/notification/{notification_id}",
        "/api/v1/admin/wipe/stream",
        "/api/v1/admin/wipe/all",
        "/health",
        "/",
    ):
        assert path in document["paths"], path
    tags = {tag["name"] for tag in document.get("tags", [])}
    assert {"health", "general", "schema", "notification", "streaming", "admin"} <= tags
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearer_jwt"]["type"] == "http"
    assert schemes["bearer_jwt"]["scheme"].lower() == "bearer"
    assert schemes["bearer_jwt"]["bearerFormat"] == "JWT"
    assert schemes["basic"]["type"] == "http"
    assert schemes["basic"]["scheme"].lower() == "basic"
    request_id_header(response)

    page = client.get("/swagger-ui/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "api-docs/openapi.json" in page.text
    request_id_header(page)


def test_landing_page_default(client: httpx.Client) -> None:
    from aviso_host.service import server_version

    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert server_version() in response.text
    assert "{{SERVER_VERSION}}" not in response.text
    request_id_header(response)


def test_landing_page_from_static_files_path(tmp_path: Path, for_backend: ForBackend) -> None:
    from aviso_host.service import server_version

    (tmp_path / "index.html").write_text(
        "<html><body>v={{SERVER_VERSION}} again {{SERVER_VERSION}}</body></html>"
    )
    (tmp_path / "app.css").write_text("body{}")
    document = with_changes(API_EXAMPLE, application={"static_files_path": str(tmp_path)})
    with running_server(for_backend(document)) as server, httpx.Client(base_url=server.url) as http:
        response = http.get("/")
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        version = server_version()
        assert response.text == f"<html><body>v={version} again {version}</body></html>"
        asset = http.get("/static/app.css")
        assert asset.status_code == 200
        assert asset.text == "body{}"
        request_id_header(asset)
