"""Configuration effects on a running server."""

from __future__ import annotations

import time

import httpx
import pytest
import yaml

from tests.conformance.config_support import (
    Sandbox,
    config_text,
    notify,
    notify_ok,
    post_status,
    replay,
)
from tests.support.process import free_port
from tests.support.sse import collect

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

# Declared out of alphabetical order so that sorting is visible.
TWO_SCHEMAS = """
notification_schema:
  river_gauge:
    topic: {base: gauge, key_order: [basin]}
    identifier:
      basin: {type: EnumHandler, values: [danube, rhine], required: true}
  model_run:
    topic: {base: run, key_order: [suite]}
    identifier:
      suite: {type: StringHandler, required: true}
"""

ENDPOINTS = ("/api/v1/notification", "/api/v1/watch", "/api/v1/replay")


def unknown_event_type_bodies(client: httpx.Client, event_type: str) -> list[dict[str, object]]:
    """POST the same undeclared event type to notify, watch and replay; all must be 400."""
    bodies = []
    for path in ENDPOINTS:
        body = {"event_type": event_type, "identifier": {"k": "v"}}
        if path.endswith("replay"):
            body["from_id"] = "0"
        response = post_status(client, path, body)
        assert response.status_code == 400, (path, response.status_code)
        bodies.append(response.json())
    return bodies


# -- schemas imply strict ---------------------------------------------------------------


def test_schemas_imply_strict(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port, TWO_SCHEMAS))
    with sandbox.serve("--config", str(path), port=port) as server, server.client() as client:
        bodies = unknown_event_type_bodies(client, "rainfall")
    for body in bodies:
        assert body.keys() == {
            "code",
            "error",
            "message",
            "configured_event_types",
            "request_id",
        }, body
        assert body["code"] == "UNKNOWN_EVENT_TYPE"
        assert body["error"] == "unknown_event_type"
        assert body["message"] == "unknown event type 'rainfall'"
        assert body["configured_event_types"] == ["model_run", "river_gauge"]


# -- strict without schemas -------------------------------------------------------------


def test_strict_without_schemas_refuses_everything(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port, "notification_schema_strict: true"))
    with sandbox.serve("--config", str(path), port=port) as server, server.client() as client:
        bodies = unknown_event_type_bodies(client, "anything")
    for body in bodies:
        assert body["code"] == "UNKNOWN_EVENT_TYPE", body
        assert body["configured_event_types"] == [], body
        assert "details" not in body


# -- non-strict with schemas ------------------------------------------------------------


def test_non_strict_with_schemas(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write(
        "config.yaml", config_text(port, TWO_SCHEMAS + "notification_schema_strict: false\n")
    )
    with sandbox.serve("--config", str(path), port=port) as server:
        with server.client() as client:
            notify_ok(client, "rainfall", {"k": "v"})
            generic = replay(client, "rainfall", {"k": "v"})
            notify_ok(client, "river_gauge", {"basin": "rhine"})
            invalid = notify(client, "river_gauge", {"basin": "nile"})
        warnings = [
            record
            for record in server.log_records()
            if record.get("event_name") == "config.warning"
            and "notification_schema_strict" in record.get("message", "")
        ]
    assert [e.data["type"] for e in generic if e.name == "replay"] == ["int.ecmwf.aviso.rainfall"]
    assert invalid.status_code == 400, invalid.text
    assert invalid.json()["code"] == "INVALID_NOTIFICATION_REQUEST"
    assert len(warnings) == 1, server.stderr()


# -- partial watch endpoint block -------------------------------------------------------


def test_partial_watch_endpoint_block(sandbox: Sandbox) -> None:
    """Heartbeats every 5 s as configured (the first is immediate, the second after one
    interval); of the five defaulted keys, replay_batch_size
    (100, in ``replay_started``) and replay_batch_delay_ms (100 ms between batches) are
    observable within a test's time; the other three are not checked here."""
    port = free_port()
    extra = "watch_endpoint: {sse_heartbeat_interval_sec: 5}"
    path = sandbox.write("config.yaml", config_text(port, extra))
    with sandbox.serve("--config", str(path), port=port) as server, server.client() as client:
        for n in range(101):  # two batches of the default size
            notify_ok(client, "item26_generic", {"n": str(n)})
        began = time.monotonic()
        events = replay(client, "item26_generic", {"n": "*"})
        replay_seconds = time.monotonic() - began

        began = time.monotonic()
        watch = collect(
            client,
            "/api/v1/watch",
            {"event_type": "item26_generic", "identifier": {"n": "none"}},
            limit=3,  # the opening event, the immediate heartbeat, the next one
        )
        heartbeat_seconds = time.monotonic() - began

    started = [e.data for e in events if e.kind == "replay-control/replay_started"]
    assert [s["batch_size"] for s in started] == [100], started
    assert len([e for e in events if e.name == "replay"]) == 101
    assert replay_seconds >= 0.1, "one pause of replay_batch_delay_ms between two batches"
    kinds = [e.kind for e in watch]
    assert kinds == ["live-notification/connection_established", "heartbeat", "heartbeat"]
    assert 4.5 <= heartbeat_seconds < 9.0, heartbeat_seconds


# -- secrets redacted -------------------------------------------------------------------

SECRETS = {
    "jwt_secret": "jwt-VALUE-7f3a",
    "password": "ecpds-VALUE-91c2",
    "token": "nats-VALUE-5d0e",
    "url_password": "url-VALUE-c4b8",
}

# Auth stays disabled (its provider plugins arrive later); its secret is still configured.
REDACTION_CONFIG = f"""
logging: {{level: debug}}
auth:
  enabled: false
  mode: trusted_proxy
  jwt_secret: "{SECRETS["jwt_secret"]}"
  admin_roles: {{ecmwf: [admin]}}
ecpds:
  username: "svc-aviso"
  password: "{SECRETS["password"]}"
  servers: ["https://ecpds.example.net"]
  match_key: destination
"""


def test_secrets_are_redacted(sandbox: Sandbox) -> None:
    port = free_port()
    backend = (
        f'{{kind: in_memory, jetstream: {{token: "{SECRETS["token"]}", '
        f'nats_url: "nats://aviso:{SECRETS["url_password"]}@nats.example.net:4222"}}}}'
    )
    path = sandbox.write("config.yaml", config_text(port, REDACTION_CONFIG, backend=backend))

    check = sandbox.cli("config", "check", str(path))
    assert check.returncode == 0, check.stderr
    printed = yaml.safe_load(check.stdout)
    assert printed["auth"]["jwt_secret"] == "[REDACTED]"
    assert printed["ecpds"]["password"] == "[REDACTED]"
    assert printed["notification_backend"]["jetstream"]["token"] == "[REDACTED]"
    assert printed["ecpds"]["username"] == "svc-aviso"  # only secrets are masked
    for value in SECRETS.values():
        assert value not in check.stdout + check.stderr, value

    # The running server (at debug level) never writes them to its log either.
    with sandbox.serve("--config", str(path), port=port) as server:
        with server.client() as client:
            notify_ok(client, "item30_generic", {"k": "v"})
        logs = server.stderr()
    for value in SECRETS.values():
        assert value not in logs, value
