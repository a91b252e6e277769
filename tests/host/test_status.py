"""``GET /status``: the public summary behind the home page and the console.

Anonymous, so it must stay cheap: the rate comes from one-second buckets kept as
notifications are stored, and the body (backend readiness included) is shared between
callers for a second.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from aviso_host.service import server_version
from aviso_host.status import NotificationRate, StatusBoard
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.disconnected_backend import DisconnectedPlugin
from tests.support.server import running_server


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_counts_the_last_minute_only() -> None:
    clock = _Clock()
    rate = NotificationRate(clock)
    for _ in range(30):
        rate.record()
    clock.now += 30
    assert rate.last_minute() == 30
    assert rate.per_second() == 1.0  # 30 over the 30 s served so far
    clock.now += 20
    for _ in range(60):
        rate.record()
    assert rate.last_minute() == 90
    assert rate.per_second() == 1.8  # 90 over a full minute
    clock.now += 45  # the first 30 are now older than a minute
    assert rate.last_minute() == 60
    assert rate.per_second() == 1.0
    clock.now += 3600  # a bucket reused much later starts from zero
    rate.record()
    assert rate.last_minute() == 1
    assert rate.total == 91


def test_concurrent_callers_share_one_readiness_probe() -> None:
    probes = 0

    async def ready() -> bool:
        nonlocal probes
        probes += 1
        await asyncio.sleep(0)
        return True

    board = StatusBoard("1.2.3", "in_memory", ready, NotificationRate(), ttl=3600)

    async def many() -> list[bytes]:
        return await asyncio.gather(*(board.body() for _ in range(50)))

    bodies = asyncio.run(many())
    assert probes == 1
    assert len(set(bodies)) == 1
    assert json.loads(bodies[0])["backend"] == {"kind": "in_memory", "ready": True}


def test_a_failing_probe_reads_as_not_ready() -> None:
    async def ready() -> bool:
        raise RuntimeError("connection refused")

    board = StatusBoard("1.2.3", "in_memory", ready, NotificationRate())
    body = json.loads(asyncio.run(board.body()))
    assert body["backend"]["ready"] is False
    assert "connection refused" not in json.dumps(body)


def test_status_reports_version_backend_and_notifications() -> None:
    with running_server(API_EXAMPLE) as server, httpx.Client(base_url=server.url) as http:
        for level in (1, 2):
            notify = {
                "event_type": "river_gauge",
                "identifier": {"basin": "rhine", "date": "20260101", "level": level},
            }
            assert http.post("/api/v1/notification", json=notify).status_code == 200
        refused = {"event_type": "river_gauge", "identifier": {"basin": "rhine", "level": 99}}
        assert http.post("/api/v1/notification", json=refused).status_code == 400
        response = http.get("/status")
        assert http.post("/status").status_code == 405
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert response.text == json.dumps(body, separators=(",", ":"), sort_keys=True)
    assert body["status"] == "ok"
    assert body["version"] == server_version()
    assert body["backend"] == {"kind": "in_memory", "ready": True}
    # Only stored notifications count.
    assert body["notifications"]["total"] == 2
    assert body["notifications"]["last_minute"] == 2
    assert body["notifications"]["per_second"] > 0


def test_status_stays_200_when_the_backend_is_not_ready() -> None:
    config: dict[str, Any] = with_changes(
        API_EXAMPLE, notification_backend={"kind": "disconnected"}
    )
    with (
        running_server(config, (DisconnectedPlugin(),)) as server,
        httpx.Client(base_url=server.url) as http,
    ):
        response = http.get("/status")
    assert response.status_code == 200
    assert response.json()["backend"] == {"kind": "disconnected", "ready": False}
