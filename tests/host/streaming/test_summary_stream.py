"""A summary stream (``ServiceAccess.summary_stream``) whose plugin summary fails: no summary
follows, the client gets a watch's ``stream_processing_failed`` and ``end_of_stream``, with
nothing of the exception's text, and the failure is logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from aviso_plugins import hookimpl
from aviso_plugins.service import ServiceAccess, TypeLayout
from aviso_plugins.types import StoredNotification
from tests.conformance.helpers import open_stream
from tests.plugins.aggregate.test_aggregate import CONFIG, publish, unique_run
from tests.support.server import running_server

SECRET = "summary-internals-5f0c"


class _Fragile:
    """Counts notifications; the third one breaks it."""

    event = "fragile"

    def __init__(self) -> None:
        self.count = 0

    def add(self, record: StoredNotification) -> bool:
        self.count += 1
        if self.count == 3:
            raise RuntimeError(f"summary broke ({SECRET})")
        return True

    def render(self, members: Mapping[str, Any]) -> bytes:
        return json.dumps({**members, "count": self.count}).encode()


class _FragilePlugin:
    @hookimpl
    def aviso_api_routes(self, service: ServiceAccess) -> list[BaseRoute]:
        def summarise(layout: TypeLayout | None) -> _Fragile:
            return _Fragile()

        async def fragile(request: Request) -> ASGIApp:
            body = await service.read_stream_request(request, "watch")
            return await service.summary_stream(
                request,
                body,
                endpoint="watch",
                route="/api/v1/fragile",
                summarise=summarise,
                debounce_ms=0,
            )

        return [Route("/api/v1/fragile", service.stream_endpoint(fragile), methods=["POST"])]


def test_a_failing_summary_ends_the_stream_as_a_failed_history_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = unique_run()
    with (
        running_server(CONFIG, extra_plugins=[_FragilePlugin()]) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        for step in (0, 6, 12, 18):
            publish(client, run, step)
        body = {"event_type": "forecast", "identifier": {"run": run}}
        with open_stream(client, "/api/v1/fragile", body) as stream:
            events = stream.to_end()
    assert [event.name for event in events] == ["error", "connection-closing"]
    assert events[0].data["error"] == "stream_processing_failed"
    assert events[1].data["reason"] == "end_of_stream"
    assert SECRET not in json.dumps([event.data for event in events])
    [failure] = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert failure.fields["event_name"] == "stream.summary.failed"
    assert SECRET in failure.getMessage()
