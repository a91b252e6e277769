"""Replay end points must not cost a scan of history.

  python -m benchmarks.replay_bounds [--count N]

With N notifications stored (default 1,000,000, in-memory), in one run:
(a) start-up of a replay bounded by ``to_id`` at the middle against the same replay unbounded:
    time from the request to ``replay_started`` and to the first notification (median of
    several requests each), and their ratio (about 1 when the bound is found by search);
(b) start-up of a replay bounded by ``to_date`` at the middle, against the unbounded one;
(c) the backend's ``to_date`` resolution (``first_sequence_after``) with N stored against the
    same call with N/1000 stored, and against one linear pass over the N storage times: a
    search stays near 1x of the small store and far below the pass;
(d) the same resolution on JetStream (a nats-server of its own), M stored (default 100,000)
    against M/1000 (``--jetstream-count 0`` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_builtins.backends.jetstream import JetStreamBackend
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import BackendContext
from tests.support.nats import nats_server
from tests.support.server import RunningServer, load_yaml, running_server

RUNS = 100
TOPICS = 1000
REQUESTS = 15
CONFIG = f"""
application: {{host: 127.0.0.1, port: 0}}
logging: {{level: warn}}
notification_backend:
  kind: in_memory
  in_memory: {{max_history_per_topic: 100000, max_topics: {TOPICS}}}
watch_endpoint:
  replay_batch_delay_ms: 0
  replay_batch_size: 100
  max_historical_notifications: 1000000
notification_schema:
  bench:
    topic: {{base: bench, key_order: [run]}}
    identifier:
      run: {{type: StringHandler, required: false}}
"""
PATTERN = TopicPattern(("bench", None))


async def fill(backend: Any, count: int) -> list[int]:
    """``count`` notifications over ``TOPICS`` topics; their storage times, in order."""
    times = []
    for n in range(count):
        record = await backend.publish(f"bench.run{n % TOPICS}", f'{{"n":{n}}}', {})
        times.append(record.time_ns)
    return times


def start_up(client: httpx.Client, body: dict[str, Any]) -> tuple[float, float]:
    """Seconds from sending ``body`` to ``replay_started``, and to the first notification."""
    opened = time.perf_counter()
    started = first = 0.0
    with client.stream("POST", "/api/v1/replay", content=json.dumps(body)) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not started and "replay_started" in line:
                started = time.perf_counter() - opened
            if line == "event: replay":
                first = time.perf_counter() - opened
                break
    assert started and first, "the replay delivered nothing"
    return started, first


def medians(server: RunningServer, bodies: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Median start-up (ms) per body; the bodies take turns, and each request starts only
    once the previous one's stream has closed on the server (a closed client connection
    still leaves the server paging until it notices)."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in bodies}
    with httpx.Client(base_url=server.url, timeout=600.0) as client:
        start_up(client, next(iter(bodies.values())))  # warm-up
        for _ in range(REQUESTS):
            for name, body in bodies.items():
                wait_for_no_streams(server)
                samples[name].append(start_up(client, body))
    figures = {}
    for name, values in samples.items():
        figures[f"{name}_started_ms"] = statistics.median(value[0] for value in values) * 1000
        figures[f"{name}_first_ms"] = statistics.median(value[1] for value in values) * 1000
    return figures


def wait_for_no_streams(server: RunningServer) -> None:
    async def open_streams() -> int:
        return len(server.service.streams.open)

    deadline = time.monotonic() + 600
    while server.call(open_streams) and time.monotonic() < deadline:
        time.sleep(0.01)


async def resolution_seconds(
    backend: Any, time_ns: int, pattern: TopicPattern = PATTERN, runs: int = RUNS
) -> float:
    opened = time.perf_counter()
    for _ in range(runs):
        await backend.first_sequence_after(pattern, time_ns)
    return (time.perf_counter() - opened) / runs


async def publish_times(backend: Any, base: str, count: int) -> list[int]:
    """``count`` notifications on ``base``, 500 in flight; their (local) storage times."""
    times: list[int] = []
    for first in range(0, count, 500):
        records = await asyncio.gather(
            *(
                backend.publish(f"{base}.run{n % TOPICS}", f'{{"n":{n}}}', {})
                for n in range(first, min(first + 500, count))
            )
        )
        times.extend(record.time_ns for record in records)
    return times


async def jetstream_resolution(url: str, count: int) -> dict[str, float]:
    backend = JetStreamBackend(BackendContext(options={"nats_url": url}, storage_policies={}))
    await backend.start()
    try:
        figures = {}
        for name, base, stored in (
            ("js_small", "small", max(count // 1000, 1)),
            ("js_large", "large", count),
        ):
            times = await publish_times(backend, base, stored)
            pattern = TopicPattern((base, None))
            seconds = await resolution_seconds(backend, times[len(times) // 2], pattern, 20)
            figures[f"{name}_us"] = seconds * 1e6
        return figures
    finally:
        await backend.shutdown()


def jetstream_figures(count: int) -> dict[str, float]:
    with TemporaryDirectory() as folder, nats_server(Path(folder)) as server:
        return asyncio.run(jetstream_resolution(server.url, count))


def linear_pass_seconds(times: list[int], time_ns: int) -> float:
    opened = time.perf_counter()
    next(index for index, value in enumerate(times) if value > time_ns)
    return time.perf_counter() - opened


async def resolution(count: int) -> dict[str, float]:
    context = BackendContext(
        options={"max_history_per_topic": count, "max_topics": TOPICS}, storage_policies={}
    )
    small, large = InMemoryBackend(context), InMemoryBackend(context)
    small_times = await fill(small, max(count // 1000, 1))
    large_times = await fill(large, count)
    small_s = await resolution_seconds(small, small_times[len(small_times) // 2])
    large_s = await resolution_seconds(large, large_times[len(large_times) // 2])
    # The pass runs to the middle: half of what a scan for the middle would read at least.
    scan_s = linear_pass_seconds(large_times, large_times[len(large_times) // 2])
    return {"small_us": small_s * 1e6, "large_us": large_s * 1e6, "scan_us": scan_s * 1e6}


def replay_start_up(count: int) -> dict[str, float]:
    with running_server(load_yaml(CONFIG)) as server:
        backend = server.service.backend
        times = server.call(lambda: fill(backend, count), timeout=3600)
        middle = count // 2
        middle_date = times[middle - 1] // 1000  # whole microseconds, as a client sends
        seconds, micro = divmod(middle_date, 1_000_000)
        to_date = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micro:06d}Z"
        unbounded = {"event_type": "bench", "identifier": {}, "from_id": "1"}
        return medians(
            server,
            {
                "unbounded": unbounded,
                "to_id": {**unbounded, "to_id": str(middle)},
                "to_date": {**unbounded, "to_date": to_date},
            },
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--jetstream-count", type=int, default=100_000)
    arguments = parser.parse_args(argv)
    count, js_count = arguments.count, arguments.jetstream_count

    figures = replay_start_up(count)
    figures.update(asyncio.run(resolution(count)))
    if js_count:
        figures.update(jetstream_figures(js_count))
    print(f"{count:,} notifications stored (in-memory, {TOPICS} topics of one stream)")
    print(
        "(a) to_id at the middle:   replay_started "
        f"{figures['to_id_started_ms']:.2f} ms vs unbounded {figures['unbounded_started_ms']:.2f}"
        f" ms (ratio {figures['to_id_started_ms'] / figures['unbounded_started_ms']:.2f}); "
        f"first event {figures['to_id_first_ms']:.2f} ms vs "
        f"{figures['unbounded_first_ms']:.2f} ms "
        f"(ratio {figures['to_id_first_ms'] / figures['unbounded_first_ms']:.2f})"
    )
    print(
        "(b) to_date at the middle: replay_started "
        f"{figures['to_date_started_ms']:.2f} ms "
        f"(ratio {figures['to_date_started_ms'] / figures['unbounded_started_ms']:.2f}); "
        f"first event {figures['to_date_first_ms']:.2f} ms "
        f"(ratio {figures['to_date_first_ms'] / figures['unbounded_first_ms']:.2f})"
    )
    print(
        f"(c) to_date resolution: {figures['large_us']:.2f} us with {count:,} stored vs "
        f"{figures['small_us']:.2f} us with {max(count // 1000, 1):,} "
        f"(ratio {figures['large_us'] / figures['small_us']:.2f}); one linear pass to the "
        f"middle takes {figures['scan_us']:.0f} us "
        f"(search / pass {figures['large_us'] / figures['scan_us']:.5f})"
    )
    if js_count:
        print(
            f"(d) JetStream to_date resolution: {figures['js_large_us']:.0f} us with "
            f"{js_count:,} stored vs {figures['js_small_us']:.0f} us with "
            f"{max(js_count // 1000, 1):,} "
            f"(ratio {figures['js_large_us'] / figures['js_small_us']:.2f})"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
