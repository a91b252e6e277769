"""10,000 idle subscriptions on JetStream: what they cost the server process (resident
memory, measured by the operating system) and that they create no JetStream consumer while
nobody is connected. One ``aviso-server serve`` on a real nats-server."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.host.backends.jetstream_support import (
    Aviso,
    aviso_serving,
    document,
    notify_ok,
    unique,
    with_jetstream,
)
from tests.support.nats import NatsServer, nats_server
from tests.support.process import free_port

pytestmark = pytest.mark.heavy

SUBSCRIPTIONS = "/api/v1/subscriptions"
COUNT = 10_000
BUDGET_BYTES = 10 * 1024 * 1024
THREADS = 8


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    with nats_server(tmp_path / "nats") as server:
        yield server


def resident(server: Aviso) -> int:
    gc.collect()  # ours, not the server's: the server is measured as it runs
    return int(psutil.Process(server.process.pid).memory_info().rss)


def consumers(url: str, stream: str) -> int:
    async def count(js: Any) -> int:
        return int((await js.stream_info(stream)).state.consumer_count)

    return with_jetstream(url, count)


def create(server: Aviso, names: list[str], body: dict[str, Any]) -> None:
    def one(chunk: list[str]) -> None:
        with httpx.Client(base_url=server.url, timeout=30.0) as http:
            for name in chunk:
                response = http.put(f"{SUBSCRIPTIONS}/{name}", json=body)
                assert response.status_code == 201, response.text

    chunks = [names[index::THREADS] for index in range(THREADS)]
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, chunks))


def again(server: Aviso, name: str, body: dict[str, Any], count: int) -> None:
    def some(times: int) -> None:
        with httpx.Client(base_url=server.url, timeout=30.0) as http:
            for _ in range(times):
                response = http.put(f"{SUBSCRIPTIONS}/{name}", json=body)
                assert response.status_code == 200, response.text

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(some, [count // THREADS] * THREADS))


@pytest.mark.timeout(600)
def test_ten_thousand_idle_pulled_subscriptions_cost_under_10_mib_and_no_consumer(
    tmp_path: Path, nats: NatsServer
) -> None:
    event_type = unique("idle")
    content = document(nats.url)
    content["subscriptions"] = {"max_per_user": COUNT + 100, "max_total": COUNT + 100}
    body = {"event_type": event_type, "identifier": {"n": "*"}}
    with aviso_serving(tmp_path, content) as server:
        with server.client() as http:
            notify_ok(http, event_type, {"n": 1})
            # The baseline is taken after as many requests as the measurement makes, each
            # storing nothing (the same definition put again): 10,000 requests alone grow
            # the process by about as much as the budget (the allocator's high-water mark,
            # measured at 11.7 MiB), which is no cost of the subscriptions themselves.
            create(server, ["warm"], body)
            again(server, "warm", body, COUNT)
            assert http.delete(f"{SUBSCRIPTIONS}/warm").status_code == 204
            stream = event_type.upper()
            before_consumers = consumers(nats.url, stream)
            before = resident(server)
            create(server, [f"idle-{index}" for index in range(COUNT)], body)
            after = resident(server)
            after_consumers = consumers(nats.url, stream)
            listed = http.get(SUBSCRIPTIONS).json()["subscriptions"]
        grown = after - before
        print(
            f"\n{COUNT} idle pulled subscriptions: resident memory {before / 2**20:.1f} MiB -> "
            f"{after / 2**20:.1f} MiB (+{grown / 2**20:.2f} MiB), JetStream consumers on the "
            f"stream {before_consumers} -> {after_consumers}"
        )
        assert len(listed) == COUNT
        assert after_consumers <= before_consumers
        assert grown <= BUDGET_BYTES, f"{grown / 2**20:.2f} MiB for {COUNT} subscriptions"


@pytest.mark.timeout(1200)
def test_ten_thousand_idle_webhook_subscriptions_cost_under_10_mib_and_no_consumer(
    tmp_path: Path, nats: NatsServer
) -> None:
    event_type = unique("hooks")
    content = document(nats.url)
    content["subscriptions"] = {
        "max_per_user": COUNT + 100,
        "max_total": COUNT + 100,
        "webhook": {"allow_private_networks": True, "retry_schedule_seconds": [3600]},
    }
    metrics_port = free_port()
    content["metrics"] = {"enabled": True, "port": metrics_port}
    metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    # Nothing listens on the discard port: every attempt fails (and is counted) at once.
    delivery = {"kind": "webhook", "url": "http://127.0.0.1:9/hook"}
    body = {"event_type": event_type, "identifier": {"n": "*"}, "delivery": delivery}
    with aviso_serving(tmp_path, content) as server:
        with server.client() as http:
            notify_ok(http, event_type, {"n": 0})
            create(server, ["warm"], body)
            again(server, "warm", body, COUNT)
            assert http.delete(f"{SUBSCRIPTIONS}/warm").status_code == 204
            stream = event_type.upper()
            before_consumers = consumers(nats.url, stream)
            before = resident(server)
            create(server, [f"hook-{index}" for index in range(COUNT)], body)
            after = resident(server)
            after_consumers = consumers(nats.url, stream)
            # Each is idle (no task, only its key under the shared feed): one notification
            # makes every one of them try.
            notify_ok(http, event_type, {"n": 1})
            # A bound, not a figure: 10,000 failed attempts took over 300 s beside the rest
            # of the heavy tier on 2 cores.
            deadline = time.monotonic() + 900
            made = 0.0
            while made < COUNT:
                assert time.monotonic() < deadline, f"{made} attempts"
                time.sleep(2)
                # A server busy with the attempts may answer a scrape late: asked again.
                with contextlib.suppress(httpx.TimeoutException):
                    made = attempts(metrics)
            busy = resident(server)
        grown = after - before
        print(
            f"\n{COUNT} idle webhook subscriptions: resident memory {before / 2**20:.1f} MiB -> "
            f"{after / 2**20:.1f} MiB (+{grown / 2**20:.2f} MiB), JetStream consumers on the "
            f"stream {before_consumers} -> {after_consumers}; after each made one failed "
            f"attempt (each then holds its notification for a retry): {busy / 2**20:.1f} MiB"
        )
        assert after_consumers <= before_consumers + 1  # the live feed's, shared by all
        assert grown <= BUDGET_BYTES, f"{grown / 2**20:.2f} MiB for {COUNT} subscriptions"


def attempts(metrics: str) -> float:
    """Webhook attempts made so far (``aviso_webhook_deliveries_total``, every outcome)."""
    with httpx.Client(timeout=30.0) as http:
        text = http.get(metrics).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("aviso_webhook_deliveries_total{")
    )
