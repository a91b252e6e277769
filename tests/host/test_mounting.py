"""create_app() works mounted under a path prefix inside another Starlette application."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from aviso_host.app import create_app
from aviso_host.config import settings_from_document
from aviso_host.plugins import discover
from aviso_host.server import uvicorn_config
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import START_TIMEOUT, serve_app
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
        # The console and the status it reads are reached through the prefix too.
        assert client.get("/aviso/status").json()["backend"]["kind"] == "in_memory"
        console = client.get("/aviso/console")
        assert console.status_code == 200
        assert 'src="console/console.js"' in console.text
        assert client.get("/aviso/console/console.js").status_code == 200
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


class _StockServer(uvicorn.Server):
    """uvicorn as a gateway runs it: its own HTTP protocol, none of aviso's limits."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()


@contextmanager
def _served_by_stock_uvicorn(app: Starlette) -> Iterator[str]:
    server = _StockServer(uvicorn_config(app, "127.0.0.1", 0))
    thread = threading.Thread(target=server.run, name="uvicorn-stock", daemon=True)
    thread.start()
    try:
        assert server.ready.wait(START_TIMEOUT) and server.started, "the server did not start"
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT)


def test_bodies_stay_bounded_under_a_gateways_own_server() -> None:
    """Without aviso's protocol (which parses the declared length for the limit), the edge
    finds the length itself, and counts a chunked body."""
    registry = discover()
    document = with_changes(API_EXAMPLE, limits={"max_body_bytes": 1024})
    aviso = create_app(settings_from_document(document, registry), registry)
    gateway = Starlette(routes=[Mount("/aviso", app=aviso)])
    path = "/aviso/api/v1/notification"
    with _served_by_stock_uvicorn(gateway) as url, httpx.Client(base_url=url) as client:
        declared = client.post(path, content=b"x" * 2048)
        chunked = client.post(path, content=iter([b"x" * 2048]))
        # Under the limit, a chunked body reaches the handler (which finds it is no JSON).
        small = client.post(path, content=iter([b"x" * 512, b"x" * 512]))
    for answer in (declared, chunked):
        assert answer.status_code == 413, answer.text
        assert answer.json()["code"] == "PAYLOAD_TOO_LARGE"
        assert answer.headers["x-request-id"] == answer.json()["request_id"]
    assert (small.status_code, small.json()["code"]) == (400, "INVALID_JSON")
