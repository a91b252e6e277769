"""A summary stream (``ServiceAccess.summary_stream``) whose plugin summary fails: no summary
follows, the client gets a watch's ``stream_processing_failed`` and ``end_of_stream``, with
nothing of the exception's text, and the failure is logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from aviso_plugins import hookimpl
from aviso_plugins.service import ServiceAccess, Summary, SummaryLimitReached
from aviso_plugins.types import StoredNotification
from tests.conformance.helpers import open_stream
from tests.plugins.aggregate.test_aggregate import CONFIG, publish, unique_run
from tests.support.server import running_server
from tests.support.sse import Event

SECRET = "summary-internals-5f0c"


class _Fragile:
    """Counts notifications; the third one breaks it."""

    @property
    def event(self) -> str:
        return "fragile"

    def __init__(self) -> None:
        self.count = 0

    def add(self, record: StoredNotification) -> bool:
        self.count += 1
        if self.count == 3:
            raise RuntimeError(f"summary broke ({SECRET})")
        return True

    def render(self, members: Mapping[str, Any]) -> bytes:
        data = {**members, "count": self.count}
        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


class _BadRender(_Fragile):
    """Takes everything in; its render breaks (or gives what no frame can carry) once it has
    counted ``breaks_at`` notifications."""

    def __init__(self, breaks_at: int, junk: Any) -> None:
        super().__init__()
        self.breaks_at = breaks_at
        self.junk = junk

    def add(self, record: StoredNotification) -> bool:
        self.count += 1
        return True

    def render(self, members: Mapping[str, Any]) -> bytes:
        if self.count < self.breaks_at:
            return super().render(members)
        if self.junk is None:
            raise RuntimeError(f"render broke ({SECRET})")
        junk: bytes = self.junk
        return junk


class _BadLimit(_Fragile):
    """Reaches its limit on the second notification, with details no JSON can carry."""

    def add(self, record: StoredNotification) -> bool:
        self.count += 1
        if self.count == 2:
            raise SummaryLimitReached("fragile_limit", "too many", "closing", {"at": object()})
        return True


class _BadEvent(_Fragile):
    @property
    def event(self) -> str:
        raise RuntimeError(f"event broke ({SECRET})")


SUMMARIES: dict[str, Callable[[], Summary]] = {
    "fragile": _Fragile,
    "render-raises": lambda: _BadRender(0, None),
    "render-str": lambda: _BadRender(0, "not bytes"),
    "render-lines": lambda: _BadRender(0, b'{"a":1}\n\nevent: notification\ndata: {}'),
    "event-raises": _BadEvent,
    "limit-junk": _BadLimit,
    "update-raises": lambda: _BadRender(5, None),
}


class _FragilePlugin:
    @hookimpl
    def aviso_api_routes(self, service: ServiceAccess) -> list[BaseRoute]:
        def route(name: str, make: Callable[[], Summary]) -> Route:
            async def fragile(request: Request) -> ASGIApp:
                body = await service.read_stream_request(request, "watch")
                return await service.summary_stream(
                    request,
                    body,
                    endpoint="watch",
                    route=f"/api/v1/{name}",
                    summarise=lambda layout: make(),
                    debounce_ms=0,
                )

            return Route(f"/api/v1/{name}", service.stream_endpoint(fragile), methods=["POST"])

        return [route(name, make) for name, make in SUMMARIES.items()]


def _event_name(record: logging.LogRecord) -> str:
    fields: dict[str, str] = record.__dict__["fields"]
    return fields["event_name"]


def _assert_failed_read(events: list[Event], caplog: pytest.LogCaptureFixture) -> None:
    assert [event.name for event in events[-2:]] == ["error", "connection-closing"]
    assert events[-2].data["error"] == "stream_processing_failed"
    assert events[-1].data["reason"] == "end_of_stream"
    assert SECRET not in json.dumps([event.data for event in events])
    [failure] = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert _event_name(failure) == "stream.summary.failed"


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
    assert _event_name(failure) == "stream.summary.failed"
    assert SECRET in failure.getMessage()


@pytest.mark.parametrize(
    "name", ["render-raises", "render-str", "render-lines", "event-raises", "limit-junk"]
)
def test_a_summary_that_cannot_render_its_snapshot_ends_as_a_failed_read(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing of what it gave reaches the wire (a line break in it would pose as events of
    the stream's own), and the stream still closes in the words of a watch."""
    run = unique_run()
    with (
        running_server(CONFIG, extra_plugins=[_FragilePlugin()]) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        publish(client, run, 0)
        publish(client, run, 6)
        body = {"event_type": "forecast", "identifier": {"run": run}}
        with open_stream(client, f"/api/v1/{name}", body) as stream:
            events = stream.to_end()
            raw = stream.raw
    assert [event.name for event in events] == ["error", "connection-closing"]
    _assert_failed_read(events, caplog)
    assert "event: notification" not in raw


def test_a_summary_whose_update_cannot_render_ends_after_its_snapshot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = unique_run()
    with (
        running_server(CONFIG, extra_plugins=[_FragilePlugin()]) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        for step in range(4):
            publish(client, run, step)
        body = {"event_type": "forecast", "identifier": {"run": run}}
        with open_stream(client, "/api/v1/update-raises", body) as stream:
            snapshot = stream.until(lambda event: event.name == "fragile")
            publish(client, run, 4)
            events = stream.to_end()
    assert snapshot.data["count"] == 4
    assert "update" not in [event.data.get("type") for event in events]
    _assert_failed_read(events, caplog)
