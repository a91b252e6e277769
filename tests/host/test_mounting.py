"""create_app() works mounted under a path prefix inside another Starlette application."""

from __future__ import annotations

import json

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from aviso_host.app import create_app
from aviso_host.config import settings_from_document
from aviso_host.plugins import discover
from tests.support.configs import API_EXAMPLE
from tests.support.server import serve_app
from tests.support.sse import DEFAULT_TIMEOUT, Stream, collect


async def _gateway_home(request: object) -> PlainTextResponse:
    return PlainTextResponse("gateway")


def test_notify_watch_and_replay_through_a_prefix() -> None:
    registry = discover()
    aviso = create_app(settings_from_document(API_EXAMPLE, registry), registry)
    gateway = Starlette(routes=[Route("/", _gateway_home), Mount("/aviso", app=aviso)])
    notification = {
        "event_type": "river_gauge",
        "identifier": {"basin": "mounted", "date": "2026-04-02", "level": 4},
        "payload": {"via": "prefix"},
    }
    watch = {"event_type": "river_gauge", "identifier": {"basin": "mounted"}}
    with (
        serve_app(gateway, aviso.state.service) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        assert client.get("/").text == "gateway"
        assert client.get("/aviso/health").json() == {"status": "ok"}
        with client.stream(
            "POST", "/aviso/api/v1/watch", content=json.dumps(watch), timeout=DEFAULT_TIMEOUT
        ) as response:
            assert response.status_code == 200
            assert response.headers["x-request-id"]
            events = Stream(response).events()
            assert next(events).kind == "live-notification/connection_established"
            posted = client.post("/aviso/api/v1/notification", content=json.dumps(notification))
            assert posted.status_code == 200
            live = next(event for event in events if event.name == "live-notification")
        assert live.data["data"]["payload"] == {"via": "prefix"}
        replayed = collect(client, "/aviso/api/v1/replay", {**watch, "from_id": "0"})
        assert [event.data["sequence"] for event in replayed if event.name == "replay"] == [
            live.data["sequence"]
        ]
        assert client.get("/api/v1/schema").status_code == 404, "nothing leaks outside /aviso"
