"""Core performance figures, each printed beside a baseline measured in the same run.

  python -m benchmarks.core [--quick] [--only notify,replay,watchers,jetstream]

Each part is a module of its own, runnable alone (``python -m benchmarks.<module>``):

- ``notify`` (:mod:`benchmarks.notify_path`): notify on the in-memory backend
  against a bare Starlette JSON POST endpoint and a raw ASGI endpoint, five rotated rounds,
  server CPU per request, medians, spreads and ratios;
- ``replay``: replay events/s to one client with pacing off (this module);
- ``watchers`` (:mod:`benchmarks.watchers`): publish-to-receive p50/p99
  to 1,000 and 10,000 live watches, and server memory per idle watch at 2,000 and 10,000;
- ``jetstream`` (:mod:`benchmarks.jetstream`): notify on JetStream against
  notify in-memory, three alternated rounds.

The last line is every figure as JSON, keyed ``part.figure``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory

from aviso_loadtests.servers import raw_post
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


def notification_body(run: str, step: int, payload: object) -> dict[str, object]:
    """The notify body of the ``bench`` schema (``CONFIG``) for ``run`` and ``step``."""
    return {"event_type": "bench", "identifier": {"run": run, "step": step}, "payload": payload}


def notification(run: str, step: int, payload: object) -> bytes:
    """:func:`notification_body` as a whole ``POST /api/v1/notification`` request."""
    return request_bytes("/api/v1/notification", notification_body(run, step, payload))


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


def replay_figure(quick: bool) -> dict[str, float]:
    """Replay events/s to one client with pacing off, from a freshly filled history."""
    history = 10_000 if quick else 100_000
    print(f"(replay) replay of {history} stored notifications, pacing off", flush=True)
    with TemporaryDirectory() as folder:
        config = Path(folder) / "config.yaml"
        config.write_text(CONFIG)
        with aviso_process(config, Path(folder) / "aviso.log") as (url, _):
            port = int(url.rsplit(":", 1)[1])
            statuses = asyncio.run(
                post_many(port, history, lambda n: notification("replay", n % 100, {"n": n}), 8)
            )
            assert statuses == {200: history}, statuses
            rate, received = asyncio.run(replay_rate(port, "replay", history))
    assert received == history, received
    print(f"    replay: {rate:8.0f} events/s (goal >= 20000)")
    return {"replay_eps": rate}


def main(argv: list[str] | None = None) -> None:
    # Imported here: those modules import this one for CONFIG and the request helpers.
    from benchmarks import jetstream, notify_path, watchers

    parts: dict[str, Callable[[bool], dict[str, float]]] = {
        "notify": lambda quick: notify_path.main(["--quick"] if quick else []),
        "replay": replay_figure,
        "watchers": lambda quick: watchers.main(["--quick"] if quick else []),
        "jetstream": lambda quick: jetstream.main(["--notify-only", *(["--quick"] * quick)]),
    }
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument(
        "--only",
        type=lambda text: text.split(","),
        default=list(parts),
        help=f"comma-separated parts to run, of: {','.join(parts)}",
    )
    args = parser.parse_args(argv)
    unknown = set(args.only) - set(parts)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    results: dict[str, float] = {}
    for name in args.only:
        results.update({f"{name}.{key}": value for key, value in parts[name](args.quick).items()})
    print(json.dumps({key: round(value, 2) for key, value in results.items()}))


if __name__ == "__main__":
    main()
