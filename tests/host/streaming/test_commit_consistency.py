"""A notification reaches watchers only after the backend accepted it; a failed publish
produces no event anywhere (no phantom notifications)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar

import httpx

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_plugins import hookimpl
from aviso_plugins.types import StorageBackend, StoredNotification
from tests.support.server import running_server
from tests.support.sse import DEFAULT_TIMEOUT, Stream, collect


class RefusingStore(InMemoryBackend):
    """A store that refuses any payload asking for it, like a full disk would."""

    kind: ClassVar[str] = "refusing_store"

    async def publish(
        self, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> StoredNotification:
        if '"refuse":true' in payload:
            raise OSError("no space left on device")
        return await super().publish(topic, payload, metadata)


class RefusingStorePlugin:
    @hookimpl
    def aviso_storage_backends(self) -> list[type[StorageBackend]]:
        return [RefusingStore]


CONFIG = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {"kind": "refusing_store", "refusing_store": {}},
    "notification_schema": {
        "feed": {
            "topic": {"base": "feed", "key_order": ["name"]},
            "identifier": {"name": {"type": "StringHandler", "required": True}},
        }
    },
}
WATCH = {"event_type": "feed", "identifier": {"name": "x"}}


def _notify(client: httpx.Client, payload: object) -> httpx.Response:
    body = {**WATCH, "payload": payload}
    return client.post("/api/v1/notification", content=json.dumps(body))


def test_a_failed_publish_reaches_no_watcher_and_no_replay() -> None:
    with (
        running_server(CONFIG, extra_plugins=[RefusingStorePlugin()]) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        with client.stream(
            "POST", "/api/v1/watch", content=json.dumps(WATCH), timeout=DEFAULT_TIMEOUT
        ) as response:
            events = Stream(response).events()
            assert next(events).kind == "live-notification/connection_established"
            refused = _notify(client, {"refuse": True})
            assert refused.status_code == 500
            assert refused.json()["code"] == "NOTIFICATION_STORAGE_FAILED"
            assert _notify(client, {"refuse": False}).status_code == 200
            delivered = next(e for e in events if e.name == "live-notification")
        # The first notification the watch saw is the accepted one, not the refused one.
        assert delivered.data["data"]["payload"] == {"refuse": False}
        history = collect(client, "/api/v1/replay", {**WATCH, "from_id": "0"})
        payloads = [e.data["data"]["payload"] for e in history if e.name == "replay"]
    assert payloads == [{"refuse": False}]
