"""Issue acceptance: configurations written for aviso-server work unchanged, and the shipped
default configuration serves on 127.0.0.1:8000 with no other setup.

``aviso_server_config.yaml`` (next to this file) is written in the style of aviso-server's
own example: dissemination, mars and test_polygon schemas, an unused ``jetstream:``
section, ``logging: {level: info, format: json}`` and ``auth.enabled: false``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conformance.config_support import (
    SYSTEM_CONFIG,
    Sandbox,
    cloudevents,
    no_system_config,
    notify_ok,
    port_is_free,
    replay,
)
from tests.support.process import free_port

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent.parent
AVISO_SERVER_CONFIG = HERE / "aviso_server_config.yaml"
BASE_URL = "http://localhost:8000"  # application.base_url in that file

POLYGON = "(52.5,13.4,52.6,13.5,52.4,13.6,52.5,13.4)"

# (event_type, notified identifier, payload, replay identifier, canonical identifier)
EVENTS: list[tuple[str, dict[str, Any], Any, dict[str, Any], dict[str, Any]]] = [
    (
        "dissemination",
        {
            "destination": "FOO",
            "target": "E1",
            "class": "od",
            "expver": "1",
            "domain": "G",
            "date": "2025-01-15",
            "time": "12",
            "stream": "enfo",
            "step": "006",
        },
        {"location": "/dissemination/FOO/E1/20250115/1200/enfo/6.grib"},
        {"destination": "FOO", "class": "od", "step": 6},
        {
            "destination": "FOO",
            "target": "E1",
            "class": "od",
            "expver": "0001",
            "domain": "g",
            "date": "20250115",
            "time": "1200",
            "stream": "enfo",
            "step": "6",
        },
    ),
    (
        "mars",
        {
            "class": "od",
            "expver": "0001",
            "domain": "g",
            "date": 20250115,
            "time": "0:00",
            "stream": "oper",
            "step": 0,
        },
        None,
        {"class": "od", "stream": "oper"},
        {
            "class": "od",
            "expver": "0001",
            "domain": "g",
            "date": "20250115",
            "time": "0000",
            "stream": "oper",
            "step": "0",
        },
    ),
    (
        "test_polygon",
        {"date": "20250115", "time": "1200", "polygon": POLYGON},
        "storm cell over Berlin",
        {"date": "20250115", "point": "52.5,13.5"},
        # Delivered as an array since upstream 0.11 (this expected the producer's string).
        {
            "date": "20250115",
            "time": "1200",
            "polygon": [[52.5, 13.4], [52.6, 13.5], [52.4, 13.6], [52.5, 13.4]],
        },
    ),
]


def check_every_event_type(client: httpx.Client) -> None:
    """Notify each event type of the file, then replay it back as a CloudEvent."""
    for event_type, identifier, payload, selection, canonical in EVENTS:
        notify_ok(client, event_type, identifier, payload)
        events = cloudevents(replay(client, event_type, selection))
        assert len(events) == 1, (event_type, events)
        event = events[0]
        assert event["type"] == f"int.ecmwf.aviso.{event_type}"
        assert event["source"] == BASE_URL
        assert event["dataschema"] == f"{BASE_URL}/schema/{event_type}"
        assert event["data"]["identifier"] == canonical, event
        assert event["data"].get("payload") == payload, event


def test_aviso_server_config_with_config_and_port_options(sandbox: Sandbox) -> None:
    port = free_port()
    args = ("--config", str(AVISO_SERVER_CONFIG), "--port", str(port))
    with sandbox.serve(*args, port=port) as server, server.client() as client:
        schemas = client.get("/api/v1/schema").json()
        assert sorted(schemas["event_types"]) == ["dissemination", "mars", "test_polygon"]
        check_every_event_type(client)


def test_aviso_server_config_with_environment_variables(sandbox: Sandbox) -> None:
    port = free_port()
    env = {
        "AVISOSERVER_CONFIG_FILE": str(AVISO_SERVER_CONFIG),
        "AVISOSERVER_APPLICATION__PORT": str(port),
    }
    with sandbox.serve(port=port, env=env) as server, server.client() as client:
        check_every_event_type(client)


@no_system_config
def test_default_configuration_serves_on_port_8000(sandbox: Sandbox) -> None:
    """``aviso-server serve`` from the repository root: ./configuration/config.yaml is found and
    nothing else is needed (HOME is an empty temporary directory)."""
    if not port_is_free(8000):
        pytest.skip("port 8000 is in use on this machine")
    shipped = yaml.safe_load((REPOSITORY / "configuration" / "config.yaml").read_text())
    with sandbox.serve(port=8000, cwd=REPOSITORY) as server, server.client() as client:
        assert server.url == "http://127.0.0.1:8000"
        listing = client.get("/api/v1/schema")
    assert listing.status_code == 200
    assert sorted(listing.json()["event_types"]) == sorted(shipped["notification_schema"])
    assert {"dissemination", "mars", "test_polygon"} <= set(listing.json()["event_types"])
    assert not SYSTEM_CONFIG.exists()
