"""Core performance figures, each printed beside a baseline measured in the same run.

  python -m benchmarks.core [--quick]

(a) notify requests/s against a bare Starlette JSON POST endpoint served the same way;
(b) replay events/s to one client with pacing off;
(c) delivery latency from notify to 1,000 concurrent watchers (p50/p99).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from aviso_loadtests.report import percentile
from aviso_loadtests.servers import bare_server, raw_post
from tests.support.pipelined import post_many, request_bytes
from tests.support.process import aviso_process

CONFIG = """
application: {host: 127.0.0.1, port: 0}
logging: {level: warn}
notification_backend:
  kind: in_memory
  in_memory: {max_history_per_topic: 200000, max_topics: 10000}
watch_endpoint:
  replay_batch_delay_ms: 0
  replay_batch_size: 100
  max_historical_notifications: 1000000
  sse_heartbeat_interval_sec: 30
notification_schema:
  bench:
    topic: {base: bench, key_order: [run, step]}
    identifier:
      run: {type: StringHandler, required: true}
      step: {type: IntHandler, required: false}
"""


def notification(run: str, step: int, payload: object) -> bytes:
    body = {"event_type": "bench", "identifier": {"run": run, "step": step}, "payload": payload}
    return request_bytes("/api/v1/notification", body)


def requests_per_second(port: int, count: int, connections: int) -> float:
    start = time.perf_counter()
    statuses = asyncio.run(
        post_many(port, count, lambda n: notification("rps", n, {"n": n}), connections, window=1)
    )
    elapsed = time.perf_counter() - start
    assert statuses == {200: count}, statuses
    return count / elapsed


# -- replay ----------------------------------------------------------------------------------


async def replay_rate(port: int, run: str, expected: int) -> tuple[float, int]:
    body = json.dumps({"event_type": "bench", "identifier": {"run": run}, "from_id": "0"})
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start = time.perf_counter()
    writer.write(raw_post("/api/v1/replay", body))
    await writer.drain()
    marker = b"event: replay\n"
    received = 0
    data = b""
    # A marker can straddle two reads, so each read is searched together with the last
    # few bytes of the previous one (too short to hold a whole marker themselves).
    while b"end_of_stream" not in data:
        chunk = await asyncio.wait_for(reader.read(1 << 20), 60)
        if not chunk:
            break
        data = data[-(len(marker) - 1) :] + chunk
        received += data.count(marker)
    elapsed = time.perf_counter() - start
    writer.close()
    return received / elapsed, received


# -- fan-out latency -------------------------------------------------------------------------


async def _watcher(
    port: int,
    ready: asyncio.Event,
    opened: list[int],
    latencies: list[float],
    expected: int,
    total: int,
) -> None:
    body = json.dumps({"event_type": "bench", "identifier": {"run": "fanout"}})
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw_post("/api/v1/watch", body))
    await writer.drain()
    seen = 0
    buffer = b""
    announced = False
    while seen < expected:
        chunk = await asyncio.wait_for(reader.read(65536), 60)
        now = time.time()
        buffer += chunk
        if not announced and b"connection_established" in buffer:
            announced = True
            opened.append(1)
            if len(opened) == total:
                ready.set()
        while b'"sent_at":' in buffer:
            _, _, rest = buffer.partition(b'"sent_at":')
            number, _, buffer = rest.partition(b"}")
            latencies.append(now - float(number))
            seen += 1
    writer.close()


async def fan_out_latency(port: int, watchers: int, notifications: int, gap: float) -> list[float]:
    ready = asyncio.Event()
    opened: list[int] = []
    latencies: list[float] = []
    tasks = [
        asyncio.create_task(_watcher(port, ready, opened, latencies, notifications, watchers))
        for _ in range(watchers)
    ]
    await asyncio.wait_for(ready.wait(), 60)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for step in range(notifications):
        writer.write(notification("fanout", step, {"sent_at": time.time()}))
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        await reader.readuntil(b"}")
        await asyncio.sleep(gap)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    writer.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    args = parser.parse_args()
    requests = 5_000 if args.quick else 30_000
    history = 10_000 if args.quick else 100_000
    watchers = 100 if args.quick else 1_000
    results: dict[str, float] = {}
    with TemporaryDirectory() as folder:
        config = Path(folder) / "config.yaml"
        config.write_text(CONFIG)
        print(
            f"(a) notify throughput, {requests} requests over 32 keep-alive connections", flush=True
        )
        with bare_server() as bare_port:
            results["bare_rps"] = requests_per_second(bare_port, requests, 32)
        with aviso_process(config, Path(folder) / "aviso.log") as (url, _):
            port = int(url.rsplit(":", 1)[1])
            results["notify_rps"] = requests_per_second(port, requests, 32)
            print(f"    bare Starlette POST: {results['bare_rps']:8.0f} req/s")
            print(
                f"    aviso notify:        {results['notify_rps']:8.0f} req/s"
                f"   ratio {results['notify_rps'] / results['bare_rps']:.2f} (goal >= 0.5)"
            )

            print(f"(b) replay of {history} stored notifications, pacing off", flush=True)
            statuses = asyncio.run(
                post_many(port, history, lambda n: notification("replay", n % 100, {"n": n}), 8)
            )
            assert statuses == {200: history}, statuses
            rate, received = asyncio.run(replay_rate(port, "replay", history))
            assert received == history, received
            results["replay_eps"] = rate
            print(f"    replay: {rate:8.0f} events/s (goal >= 20000)")

            print(f"(c) delivery latency to {watchers} concurrent watchers", flush=True)
            latencies = asyncio.run(fan_out_latency(port, watchers, 20, 0.25))
            results["fanout_p50_ms"] = statistics.median(latencies) * 1000
            results["fanout_p99_ms"] = percentile(latencies, 0.99) * 1000
            print(
                f"    {len(latencies)} deliveries: p50 {results['fanout_p50_ms']:.1f} ms, "
                f"p99 {results['fanout_p99_ms']:.1f} ms (goal p99 <= 250 ms)"
            )
    print(json.dumps({key: round(value, 1) for key, value in results.items()}))


if __name__ == "__main__":
    main()
