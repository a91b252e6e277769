"""The hooks that receive the service (``aviso_api_routes``, ``aviso_startup``,
``aviso_shutdown``), exercised by a plugin registered in code on a real server: its API route
answers as the host's do, its startup runs before the first request and its shutdown when
the server stops, and a failing startup fails the server's start and shuts the others down."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from aviso_plugins import hookimpl
from aviso_plugins.service import ApiRefusal, ServiceAccess
from aviso_plugins.testing import build_app, serve
from tests.support.configs import API_EXAMPLE


class Counter:
    """Counts the requests it answers; started and stopped with the service."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.ticks = 0

    @hookimpl
    def aviso_api_routes(self, service: ServiceAccess) -> list[BaseRoute]:
        async def tick(request: Request) -> ASGIApp:
            if request.query_params.get("refuse"):
                raise ApiRefusal(409, "TICK_REFUSED", "Tick Refused", "no tick for you")
            if request.query_params.get("explode"):
                raise RuntimeError("secret internals")
            self.ticks += 1
            started = "started" in self.events
            return service.json_response({"ticks": self.ticks, "started": started})

        return [Route("/api/v1/ticks", service.api_endpoint(tick), methods=["POST"])]

    @hookimpl
    async def aviso_startup(self, service: ServiceAccess) -> None:
        await asyncio.sleep(0)  # awaited on the serving loop
        self.events.append("started")

    @hookimpl
    def aviso_shutdown(self, service: ServiceAccess) -> None:
        self.events.append("stopped")


def test_an_api_route_answers_as_the_hosts_do_between_startup_and_shutdown() -> None:
    counter = Counter()
    with serve(API_EXAMPLE, plugins=[counter]) as aviso:
        answer = aviso.post("/api/v1/ticks")
        assert answer.status_code == 200
        assert answer.json() == {"started": True, "ticks": 1}
        assert answer.headers["x-request-id"]
        refused = aviso.post("/api/v1/ticks", params={"refuse": "1"})
        assert refused.status_code == 409
        body: dict[str, Any] = refused.json()
        assert body["code"] == "TICK_REFUSED" and body["error"] == "Tick Refused"
        assert body["request_id"] == refused.headers["x-request-id"]
        exploded = aviso.post("/api/v1/ticks", params={"explode": "1"})
        assert exploded.status_code == 500
        assert exploded.json()["code"] == "INTERNAL_ERROR"
        assert "secret" not in exploded.text
        assert counter.events == ["started"]
    assert counter.events == ["started", "stopped"]


class FailingStart:
    @hookimpl
    async def aviso_startup(self, service: ServiceAccess) -> None:
        raise RuntimeError("cannot start")


def test_a_failing_startup_fails_the_start_and_shuts_the_plugins_down() -> None:
    counter = Counter()
    service = build_app(API_EXAMPLE, plugins=[counter, FailingStart()]).state.service

    async def start() -> None:
        with pytest.raises(RuntimeError, match="cannot start"):
            await service.ensure_started()

    asyncio.run(start())
    assert counter.events[-1] == "stopped"
