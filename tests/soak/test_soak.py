"""Soak: many watches held open under steady publishing; the server's memory stays flat.

A server subprocess gets a burst of notifications first (history reaches its retention
bound, allocator pools fill), then ``watches`` streams are opened and notifications are
published at a steady rate for ``seconds`` while the server's RSS is sampled once a second.
After a warm-up the median RSS of the last third of the samples must stay within
``RSS_SLACK`` of the first third's, and every watch must have received every notification.
Each notification carries a 2 KiB payload, so a leak of the stored records or of one
rendered event per delivery would outgrow the slack within the run.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.support.held_watches import close_all, count_until, open_watch
from tests.support.pipelined import post_many, request_bytes
from tests.support.process import aviso_process

TOPICS = 20
PAD = "x" * 2048
WARM_UP_NOTIFICATIONS = 2_000
WARM_UP_FRACTION = 0.2
RSS_SLACK = 8 * 1024 * 1024
CLOUDEVENT = b'"type":"int.ecmwf.aviso.feed"'
DELIVERY_TIMEOUT = 120.0

CONFIG = """
application: {host: 127.0.0.1, port: 0}
logging: {level: warn}
notification_backend:
  kind: in_memory
  in_memory: {max_history_per_topic: 5, max_topics: 1000}
notification_schema:
  feed:
    topic: {base: soak, key_order: [name]}
    identifier:
      name: {type: StringHandler, required: true}
"""
WATCH = {"event_type": "feed", "identifier": {"name": "*"}}


@dataclass
class SoakResult:
    published: int
    delivered: list[int]
    rss: list[int]

    def thirds(self) -> tuple[float, float]:
        """Median RSS of the first and last thirds of the samples after warm-up."""
        steady = self.rss[int(len(self.rss) * WARM_UP_FRACTION) :]
        third = max(1, len(steady) // 3)
        return statistics.median(steady[:third]), statistics.median(steady[-third:])


def _notification(n: int) -> bytes:
    body = {
        "event_type": "feed",
        "identifier": {"name": f"t{n % TOPICS}"},
        "payload": {"n": n, "pad": PAD},
    }
    return request_bytes("/api/v1/notification", body)


async def _soak(
    port: int, server: psutil.Process, watches: int, seconds: int, rate: int
) -> SoakResult:
    warm_up = await post_many(port, WARM_UP_NOTIFICATIONS, _notification)
    assert warm_up == {200: WARM_UP_NOTIFICATIONS}
    gate = asyncio.Semaphore(200)
    held = await asyncio.gather(*(open_watch(port, WATCH, gate) for _ in range(watches)))
    published = seconds * rate
    counters = [
        asyncio.create_task(count_until(reader, CLOUDEVENT, published)) for reader, _ in held
    ]
    loop = asyncio.get_running_loop()
    rss: list[int] = []
    try:
        start = loop.time()
        for second in range(seconds):
            statuses = await post_many(
                port, rate, lambda n, at=second * rate: _notification(at + n), 1, window=rate
            )
            assert statuses == {200: rate}
            rss.append(server.memory_info().rss)
            # Pacing, not synchronisation: the next second's batch starts on the clock.
            await asyncio.sleep(max(0.0, start + second + 1 - loop.time()))
        delivered = await asyncio.wait_for(asyncio.gather(*counters), DELIVERY_TIMEOUT)
    finally:
        for counter in counters:
            counter.cancel()
        close_all(held)
    return SoakResult(published, list(delivered), rss)


def run_soak(tmp_path: Path, watches: int, seconds: int, rate: int, budget: float) -> SoakResult:
    """Run one soak; ``budget`` bounds the whole run in seconds (pytest-timeout cannot
    interrupt a running event loop: asyncio swallows the exception it raises)."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    with aviso_process(config, tmp_path / "server.log") as (url, process):
        port = int(url.rsplit(":", 1)[1])
        soak = _soak(port, psutil.Process(process.pid), watches, seconds, rate)
        result = asyncio.run(asyncio.wait_for(soak, budget))
    first, last = result.thirds()
    print(
        f"soak: {watches} watches, {result.published} notifications over {seconds} s;"
        f" RSS first third {first / 2**20:.1f} MiB, last third {last / 2**20:.1f} MiB,"
        f" min {min(result.rss) / 2**20:.1f}, max {max(result.rss) / 2**20:.1f} MiB"
    )
    return result


def assert_flat_and_complete(result: SoakResult) -> None:
    assert result.delivered == [result.published] * len(result.delivered), (
        f"short deliveries: {sorted(set(result.delivered))}"
    )
    first, last = result.thirds()
    assert last <= first + RSS_SLACK, f"RSS grew from {first / 2**20:.1f} to {last / 2**20:.1f} MiB"


def test_a_hundred_watches_for_twenty_seconds_keep_memory_flat(tmp_path: Path) -> None:
    assert_flat_and_complete(run_soak(tmp_path, watches=100, seconds=20, rate=10, budget=90))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_thousand_watches_for_seven_minutes_keep_memory_flat(tmp_path: Path) -> None:
    assert_flat_and_complete(run_soak(tmp_path, watches=1_000, seconds=420, rate=3, budget=570))
