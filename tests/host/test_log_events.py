"""Error telemetry events (seed 003, "Error Telemetry Events"): each route failure logs one
JSON line with ``event_name``, its level, the response's ``request_id`` and, where the seed
says so, ``event_type`` and ``topic``.

The server's own log output is captured: a handler with the server's JSON formatter on the
``aviso`` logger, for the duration of each test, while a real uvicorn server answers.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import httpx
import pytest

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_host.logs import JsonLineFormatter
from aviso_plugins import hookimpl
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import (
    LiveSink,
    StorageBackend,
    StoredNotification,
    Subscription,
)
from tests.support.server import running_server


class BrokenStore(InMemoryBackend):
    """Refuses every write and every live subscription, as a store that lost its disk might."""

    kind: ClassVar[str] = "broken_store"

    async def publish(
        self, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> StoredNotification:
        raise OSError("no space left on device")

    async def subscribe(self, pattern: TopicPattern, sink: LiveSink) -> Subscription:
        raise ConnectionError("consumer refused")


class BrokenStorePlugin:
    @hookimpl
    def aviso_storage_backends(self) -> list[type[StorageBackend]]:
        return [BrokenStore]


CONFIG = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {"kind": "broken_store", "broken_store": {}},
    "notification_schema": {
        "feed": {
            "topic": {"base": "feed", "key_order": ["name", "step"]},
            "identifier": {
                "name": {"type": "StringHandler", "required": True},
                "step": {"type": "IntHandler", "required": True},
            },
        }
    },
}
FEED = {"event_type": "feed", "identifier": {"name": "x", "step": 1}}


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with (
        running_server(CONFIG, extra_plugins=[BrokenStorePlugin()]) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as http,
    ):
        yield http


class ServerLog:
    """The JSON lines the server logs while a test runs, formatted as ``aviso-server serve``
    does."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()
        self.handler = logging.StreamHandler(self.buffer)
        self.handler.setFormatter(JsonLineFormatter())

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.buffer.getvalue().splitlines()]

    def event(self, name: str, response: httpx.Response) -> dict[str, Any]:
        """The one ``name`` line logged for ``response`` (matched by its request id)."""
        request_id = response.headers["x-request-id"]
        found = [
            line
            for line in self.lines()
            if line.get("event_name") == name and line.get("request_id") == request_id
        ]
        assert len(found) == 1, self.lines()
        return found[0]


@pytest.fixture
def server_log() -> Iterator[ServerLog]:
    log = ServerLog()
    logger = logging.getLogger("aviso")
    logger.addHandler(log.handler)
    try:
        yield log
    finally:
        logger.removeHandler(log.handler)


def post(client: httpx.Client, path: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, content=content)


def test_parse_failure_logs_without_event_type_or_topic(
    client: httpx.Client, server_log: ServerLog
) -> None:
    response = post(client, "/api/v1/notification", b"{not json")
    assert response.status_code == 400
    line = server_log.event("api.request.parse.failed", response)
    assert line["level"] == "warn"
    assert line["code"] == "INVALID_JSON"
    assert "event_type" not in line and "topic" not in line


def test_notify_validation_failure_carries_the_event_type(
    client: httpx.Client, server_log: ServerLog
) -> None:
    response = post(client, "/api/v1/notification", {**FEED, "identifier": {"name": "x"}})
    assert response.status_code == 400
    line = server_log.event("api.request.validation.failed", response)
    assert line["level"] == "warn"
    assert line["event_type"] == "feed"
    assert "topic" not in line


def test_watch_validation_failure_carries_no_event_type(
    client: httpx.Client, server_log: ServerLog
) -> None:
    """The watch/replay request validator runs before the handler records the event type."""
    response = post(client, "/api/v1/replay", FEED)  # no from_id / from_date
    assert response.status_code == 400
    line = server_log.event("api.request.validation.failed", response)
    assert line["code"] == "INVALID_REPLAY_REQUEST"
    assert "event_type" not in line and "topic" not in line


def test_storage_failure_logs_processing_failed_with_event_type_and_topic(
    client: httpx.Client, server_log: ServerLog
) -> None:
    response = post(client, "/api/v1/notification", {**FEED, "payload": None})
    assert response.status_code == 500
    assert response.json()["code"] == "NOTIFICATION_STORAGE_FAILED"
    line = server_log.event("api.request.processing.failed", response)
    assert line["level"] == "error"
    assert line["event_type"] == "feed"
    assert line["topic"].startswith("feed.")


def test_stream_setup_failure_logs_with_event_type_and_topic(
    client: httpx.Client, server_log: ServerLog
) -> None:
    response = post(client, "/api/v1/watch", FEED)
    assert response.status_code == 500
    assert response.json()["code"] == "SSE_STREAM_INITIALIZATION_FAILED"
    line = server_log.event("stream.sse.initialization.failed", response)
    assert line["level"] == "error"
    assert line["event_type"] == "feed"
    assert line["topic"] == response.json()["topic"]
