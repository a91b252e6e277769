"""Raw nats-py baselines for JetStream runs: what NATS alone does on this machine.

Publish-with-ack rate and ordered-consumer read rate (``benchmarks.jetstream`` uses them
too), and the live path: publish-with-ack, then delivery through one ordered push consumer
(what aviso's JetStream backend uses for live fan-out before its own SSE fan-out).
"""

from __future__ import annotations

import asyncio
import json
import time

import nats
from nats.js import api


async def raw_publish_rate(url: str, count: int, concurrency: int) -> float:
    connection = await nats.connect(url)
    js = connection.jetstream()
    await js.add_stream(name="RAWBENCH", subjects=["rawbench.>"], max_msgs_per_subject=-1)
    body = json.dumps({"n": 1}).encode()

    async def worker(share: int) -> None:
        for n in range(share):
            await js.publish(f"rawbench.run.{n % 100}", body)

    start = time.perf_counter()
    await asyncio.gather(*(worker(count // concurrency) for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    await connection.close()
    return count / elapsed


async def raw_ordered_read_rate(url: str, subject: str, expected: int) -> float:
    connection = await nats.connect(url)
    js = connection.jetstream()
    done = asyncio.Event()
    received = 0

    async def on_message(msg: object) -> None:
        nonlocal received
        received += 1
        if received == expected:
            done.set()

    start = time.perf_counter()
    subscription = await js.subscribe(
        subject, cb=on_message, ordered_consumer=True, deliver_policy=api.DeliverPolicy.ALL
    )
    await asyncio.wait_for(done.wait(), 300)
    elapsed = time.perf_counter() - start
    await subscription.unsubscribe()
    await connection.close()
    return expected / elapsed


async def raw_delivery_latencies(url: str, count: int, gap: float) -> list[float]:
    """Milliseconds from ``js.publish`` to the ordered consumer's callback, per message."""
    connection = await nats.connect(url)
    try:
        js = connection.jetstream()
        await js.add_stream(name="RAWWATCH", subjects=["rawwatch.>"], max_msgs_per_subject=-1)
        latencies: list[float] = []
        done = asyncio.Event()

        async def on_message(msg: object) -> None:
            sent_at = json.loads(msg.data)["sent_at"]  # type: ignore[attr-defined]
            latencies.append((time.time() - sent_at) * 1000)
            if len(latencies) >= count:
                done.set()

        subscription = await js.subscribe(
            "rawwatch.>",
            cb=on_message,
            ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.NEW,
        )
        for n in range(count):
            body = json.dumps({"n": n, "sent_at": time.time()}).encode()
            await js.publish(f"rawwatch.od.enfo.{n % 50}", body)
            await asyncio.sleep(gap)
        await asyncio.wait_for(done.wait(), 30)
        await subscription.unsubscribe()
        return latencies
    finally:
        await connection.close()
