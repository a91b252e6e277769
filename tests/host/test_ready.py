"""``GET /ready``: the backend's readiness, beside ``/health``.

JetStream's readiness during and after an outage is proven in
``tests/host/backends/test_jetstream_healing.py``; here the in-memory backend (always ready)
and a third-party backend reporting through ``StorageBackend.ready()``.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.disconnected_backend import DisconnectedPlugin
from tests.support.server import running_server


def _get(
    config: dict[str, Any], *paths: str, plugins: tuple[Any, ...] = ()
) -> list[httpx.Response]:
    with running_server(config, plugins) as server, httpx.Client(base_url=server.url) as http:
        return [http.get(path) for path in paths]


def test_the_in_memory_backend_is_always_ready() -> None:
    with running_server(API_EXAMPLE) as server, httpx.Client(base_url=server.url) as http:
        ready, health = http.get("/ready"), http.get("/health")
        assert http.post("/ready").status_code == 405
    assert ready.status_code == 200
    assert ready.headers["content-type"] == "application/json"
    assert ready.content == b'{"status":"ready","backend_connected":true}'
    assert health.json() == {"status": "ok"}


def test_a_backend_reporting_not_ready_makes_ready_503_and_health_stays_200() -> None:
    config = with_changes(API_EXAMPLE, notification_backend={"kind": "disconnected"})
    ready, health = _get(config, "/ready", "/health", plugins=(DisconnectedPlugin(),))
    assert ready.status_code == 503
    assert ready.content == b'{"status":"not_ready","backend_connected":false}'
    assert health.status_code == 200
