"""The ``http`` sink against a real server, and the notify route's ``Idempotency-Key``."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from aviso_host.plugins import discover
from aviso_plugins.types import Notification, Sink, SinkContext, SinkUnavailable
from tests.support.nats import NatsServer, nats_server
from tests.support.process import free_port
from tests.support.server import running_server
from tests.support.sse import collect

SCHEMA = {
    "payload": {"required": False},
    "topic": {"base": "sinktest", "key_order": ["run", "step"]},
    "identifier": {
        "run": {"type": "StringHandler", "required": True},
        "step": {"type": "IntHandler", "range": [0, 100], "required": False},
    },
}


def document(backend: dict[str, Any]) -> dict[str, Any]:
    return {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": backend,
        "notification_schema": {"sinktest": SCHEMA},
    }


def jetstream(url: str, **options: Any) -> dict[str, Any]:
    return {"kind": "jetstream", "jetstream": {"nats_url": url, **options}}


def http_sink(**options: str) -> Sink:
    return discover().sinks["http"](SinkContext(options))


async def publish(sink: Sink, notifications: list[Notification]) -> list[Any]:
    await sink.start()
    try:
        return await sink.publish_batch(notifications)
    finally:
        await sink.close()


def replayed_steps(url: str, run: str) -> list[str]:
    body = {"event_type": "sinktest", "identifier": {"run": run}, "from_id": "1"}
    with httpx.Client(base_url=url) as client:
        events = collect(client, "/api/v1/replay", body, until="connection-closing")
    return [event.data["data"]["identifier"]["step"] for event in events if event.name == "replay"]


def test_publishes_rejects_and_deduplicates_by_message_id(nats_session: NatsServer) -> None:
    run = uuid.uuid4().hex
    with running_server(document(jetstream(nats_session.url))) as server:
        sink = http_sink(url=server.url, concurrency="4")
        notifications = [
            Notification("sinktest", {"run": run, "step": 1}, {"n": 1}, "id-1"),
            Notification("sinktest", {"run": run, "step": 1}, {"n": 1}, "id-1"),  # a re-send
            Notification("sinktest", {"run": run, "step": 2}, None, "id-2"),
            Notification("sinktest", {"run": run, "step": 101}, None, "id-3"),
            Notification("unknown", {"run": run}, None, "id-4"),
        ]
        outcomes = asyncio.run(publish(sink, notifications))
        assert [outcome.error is None for outcome in outcomes] == [True, True, True, False, False]
        assert outcomes[3].error.code == "INVALID_NOTIFICATION_REQUEST"
        assert outcomes[3].error.message.startswith("Field 'step'")
        assert outcomes[4].error.code == "UNKNOWN_EVENT_TYPE"
        # The second "id-1" was answered 200 but JetStream dropped it as a duplicate.
        assert sorted(replayed_steps(server.url, run)) == ["1", "2"]


def test_the_notify_route_refuses_an_unusable_idempotency_key(nats_session: NatsServer) -> None:
    with running_server(document(jetstream(nats_session.url))) as server:
        body = {"event_type": "sinktest", "identifier": {"run": "x", "step": 1}}
        response = httpx.post(
            f"{server.url}/api/v1/notification",
            content=json.dumps(body),
            headers={"Idempotency-Key": "x" * 129},
        )
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_NOTIFICATION_REQUEST"
    assert "Idempotency-Key" in response.json()["message"]


def test_connection_errors_are_retried_then_reported() -> None:
    sink = http_sink(url=f"http://127.0.0.1:{free_port()}", retries="2", backoff_ms="1")
    with pytest.raises(SinkUnavailable, match="after 3 attempts: ConnectError"):
        asyncio.run(publish(sink, [Notification("sinktest", {"run": "r", "step": 1}, None)]))


def test_server_errors_are_retried_then_reported(tmp_path: Path) -> None:
    with nats_server(tmp_path / "nats") as nats:
        backend = jetstream(nats.url, publish_retry_attempts=1, enable_auto_reconnect=False)
        with running_server(document(backend)) as server:
            nats.stop()  # the server now answers 500 NOTIFICATION_STORAGE_FAILED
            sink = http_sink(url=server.url, retries="1", backoff_ms="1")
            with pytest.raises(SinkUnavailable, match="after 2 attempts: HTTP 500"):
                asyncio.run(
                    publish(sink, [Notification("sinktest", {"run": "r", "step": 1}, None)])
                )


def test_options_are_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="'url'"):
        http_sink()
    with pytest.raises(ValueError, match="'retries' must be an integer"):
        http_sink(url="http://127.0.0.1:1", retries="many")
