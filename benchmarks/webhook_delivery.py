"""Webhook push: deliveries per second per worker to local receivers, and notify-to-webhook
latency, beside a bare httpx loop posting the same bodies to the same receiver.

  python -m benchmarks.webhook_delivery [--quick] [--rounds 3]

Each round starts a fresh ``aviso-server serve`` (one worker, in-memory) with SUBSCRIPTIONS
webhook subscriptions, each to a path of its own on one receiver process
(:mod:`benchmarks.webhook_receiver`), then measures:

- throughput: NOTIFICATIONS notifications sent as fast as 8 connections allow; deliveries/s
  from the first notify to the last delivery, and the server's CPU per delivery;
- latency: PACED notifications at RATE per second; notify-to-delivery p50/p99 over every
  delivery (the notification's payload carries its send time);
- retries: FLAKY subscriptions whose receiver answers 503 twice per notification; how late
  each retry comes after its scheduled 1 s, as a fraction of it (p50, p99, max);
- the baseline, in the same round: SUBSCRIPTIONS tasks of one httpx client each posting the
  same webhook bodies in turn (throughput), and posting one at each tick (latency).

Raw rounds go to ``benchmarks/results/webhook_delivery-*.json``; the last line is the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx
import psutil

from aviso_loadtests.report import percentile
from benchmarks.core import CONFIG
from benchmarks.results import spread, write_results
from tests.support.process import aviso_process, free_port

WEBHOOKS = """
subscriptions:
  max_per_user: 10000
  webhook: {allow_private_networks: true, retry_schedule_seconds: [1, 1], timeout_seconds: 15}
"""
RETRY_DELAY = 1.0
"""Each of ``retry_schedule_seconds`` in WEBHOOKS."""
FLAKY = 10
FLAKY_NOTIFICATIONS = 5
SENDERS = 8
"""Connections the throughput phase notifies through."""
WAIT = 300.0
"""Seconds a phase may take before the run is declared failed (a bound, not a figure)."""


@contextmanager
def receiver() -> Iterator[str]:
    port = free_port()
    command = [
        sys.executable, "-m", "uvicorn", "benchmarks.webhook_receiver:app",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
        "--backlog", "4096", "--no-access-log",
    ]  # fmt: skip
    process = subprocess.Popen(command)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/stats", timeout=1.0)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the receiver did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def notification(step: int) -> dict[str, Any]:
    return {
        "event_type": "bench",
        "identifier": {"run": "hook", "step": step},
        "payload": {"sent": time.time(), "step": step},
    }


async def notify_all(url: str, count: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        steps = iter(range(count))

        async def sender() -> None:
            for step in steps:
                response = await client.post("/api/v1/notification", json=notification(step))
                response.raise_for_status()

        await asyncio.gather(*(sender() for _ in range(SENDERS)))


async def notify_paced(url: str, count: int, rate: float) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        start = time.monotonic()
        for step in range(count):
            await asyncio.sleep(max(0.0, start + step / rate - time.monotonic()))
            (await client.post("/api/v1/notification", json=notification(step))).raise_for_status()


def stats(receiver_url: str) -> dict[str, Any]:
    document: dict[str, Any] = httpx.get(f"{receiver_url}/stats", timeout=30).json()
    return document


def wait_for(receiver_url: str, expected: int) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        found = stats(receiver_url)
        if len(found["arrivals"]) >= expected:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(found['arrivals'])} of {expected} deliveries arrived")
        time.sleep(0.2)


def reset(receiver_url: str) -> None:
    httpx.post(f"{receiver_url}/reset", timeout=30).raise_for_status()


def subscribe(url: str, name: str, run: str, target: str) -> None:
    """Subscription ``name``: the notifications of ``run``, delivered to ``target``."""
    body = {
        "event_type": "bench",
        "identifier": {"run": run},
        "delivery": {"kind": "webhook", "url": target},
    }
    httpx.put(f"{url}/api/v1/subscriptions/{name}", json=body).raise_for_status()


def aviso_round(
    receiver_url: str, folder: Path, subscriptions: int, notifications: int, paced: int, rate: float
) -> dict[str, float]:
    config = folder / "config.yaml"
    config.write_text(CONFIG + WEBHOOKS)
    with aviso_process(config, folder / "aviso.log") as (url, process):
        server = psutil.Process(process.pid)
        for n in range(subscriptions):
            subscribe(url, f"s{n}", "hook", f"{receiver_url}/e/{n}")
        reset(receiver_url)
        cpu = sum(server.cpu_times()[:2])
        start = time.time()
        asyncio.run(notify_all(url, notifications))
        found = wait_for(receiver_url, subscriptions * notifications)
        deliveries = subscriptions * notifications
        used = sum(server.cpu_times()[:2]) - cpu
        figures = {
            "deliveries_per_s": deliveries / (max(found["arrivals"]) - start),
            "cpu_us_per_delivery": used / deliveries * 1e6,
        }
        reset(receiver_url)
        asyncio.run(notify_paced(url, paced, rate))
        latencies = wait_for(receiver_url, subscriptions * paced)["latencies"]
        figures["p50_ms"] = percentile(latencies, 0.5) * 1000
        figures["p99_ms"] = percentile(latencies, 0.99) * 1000
        figures.update(retry_lateness(url, receiver_url))
    return figures


def retry_lateness(url: str, receiver_url: str) -> dict[str, float]:
    """How late retries come after their scheduled delay (``RETRY_DELAY`` each), as a
    fraction of it: FLAKY subscriptions whose receiver answers 503 twice per notification."""
    for n in range(FLAKY):
        subscribe(url, f"flaky{n}", "flaky", f"{receiver_url}/flaky/{n}")
    reset(receiver_url)
    with httpx.Client(base_url=url, timeout=30) as client:
        for step in range(FLAKY_NOTIFICATIONS):
            body = {"event_type": "bench", "identifier": {"run": "flaky", "step": step}}
            client.post("/api/v1/notification", json=body).raise_for_status()
    gaps = wait_for(receiver_url, FLAKY * FLAKY_NOTIFICATIONS)["retry_gaps"]
    lateness = [gap / RETRY_DELAY - 1 for retries in gaps for gap in retries]
    return {
        "retry_lateness_p50": percentile(lateness, 0.5),
        "retry_lateness_p99": percentile(lateness, 0.99),
        "retry_lateness_max": max(lateness),
        "retry_earliest": min(lateness),
    }


def stamped(sample: dict[str, Any]) -> bytes:
    sample["data"]["payload"]["sent"] = time.time()
    return json.dumps(sample).encode()


async def bare_throughput(receiver_url: str, sample: dict[str, Any], per: int, tasks: int) -> float:
    limits = httpx.Limits(max_connections=tasks, max_keepalive_connections=tasks)
    headers = {"content-type": "application/cloudevents+json"}
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:

        async def poster(n: int) -> None:
            for _ in range(per):
                url = f"{receiver_url}/e/{n}"
                (
                    await client.post(url, content=stamped(sample), headers=headers)
                ).raise_for_status()

        start = time.time()
        await asyncio.gather(*(poster(n) for n in range(tasks)))
        return per * tasks / (time.time() - start)


async def bare_paced(
    receiver_url: str, sample: dict[str, Any], count: int, rate: float, tasks: int
) -> None:
    limits = httpx.Limits(max_connections=tasks, max_keepalive_connections=tasks)
    headers = {"content-type": "application/cloudevents+json"}
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        start = time.monotonic()
        for step in range(count):
            await asyncio.sleep(max(0.0, start + step / rate - time.monotonic()))
            body = stamped(sample)
            await asyncio.gather(
                *(client.post(f"{receiver_url}/e/{n}", content=body, headers=headers)
                  for n in range(tasks))
            )  # fmt: skip


def bare_round(
    receiver_url: str, subscriptions: int, notifications: int, paced: int, rate: float
) -> dict[str, float]:
    sample = json.loads(httpx.get(f"{receiver_url}/sample", timeout=30).content)
    reset(receiver_url)
    per_s = asyncio.run(bare_throughput(receiver_url, sample, notifications, subscriptions))
    reset(receiver_url)
    asyncio.run(bare_paced(receiver_url, sample, paced, rate, subscriptions))
    latencies = wait_for(receiver_url, subscriptions * paced)["latencies"]
    return {
        "deliveries_per_s": per_s,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10 subscriptions, for a smoke run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    subscriptions, notifications, paced, rate = (
        (10, 50, 20, 2.0) if args.quick else (50, 200, 60, 2.0)
    )
    print(
        f"{subscriptions} webhook subscriptions; throughput: {notifications} notifications; "
        f"latency: {paced} at {rate:g}/s; {args.rounds} rounds",
        flush=True,
    )
    rounds = []
    with receiver() as receiver_url:
        for number in range(1, args.rounds + 1):
            with TemporaryDirectory() as folder:
                aviso = aviso_round(
                    receiver_url, Path(folder), subscriptions, notifications, paced, rate
                )
            bare = bare_round(receiver_url, subscriptions, notifications, paced, rate)
            figures = {"round": number, **{f"aviso_{k}": v for k, v in aviso.items()}}
            figures.update({f"bare_{k}": v for k, v in bare.items()})
            figures["throughput_ratio"] = aviso["deliveries_per_s"] / bare["deliveries_per_s"]
            rounds.append(figures)
            print(
                f"round {number}: aviso {aviso['deliveries_per_s']:,.0f} deliveries/s "
                f"({aviso['cpu_us_per_delivery']:.0f} us CPU each), p50 {aviso['p50_ms']:.1f} ms "
                f"p99 {aviso['p99_ms']:.1f} ms, retries late by "
                f"{aviso['retry_lateness_p99'] * 100:.1f} % (p99) | "
                f"bare httpx {bare['deliveries_per_s']:,.0f}/s, "
                f"p50 {bare['p50_ms']:.1f} ms p99 {bare['p99_ms']:.1f} ms | "
                f"ratio {figures['throughput_ratio']:.2f}",
                flush=True,
            )
    keys = [key for key in rounds[0] if key != "round"]
    summary = {key: spread([figures[key] for figures in rounds]) for key in keys}
    path = write_results("webhook_delivery", rounds, summary)
    print(f"raw results: {path}")
    print(json.dumps({key: round(value["median"], 2) for key, value in summary.items()}))


if __name__ == "__main__":
    main()
