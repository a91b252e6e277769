"""Worst-case spatial replay: does the rest of the service keep answering?

  python -m benchmarks.spatial_replay [--records 100] [--on-loop]

Stores ``--records`` polygons of the largest stored size (61,440 canonical bytes, about
3,500 vertices), replays them with a 10,000-vertex filter polygon (every record matches),
and probes ``GET /health`` every 20 ms while the replay runs. Printed: the replay's
duration, and /health latency (p50, max) idle and during the replay with their ratio.
``--on-loop`` matches on the event loop instead of the spatial worker threads (the
behaviour before), for comparison in the same run conditions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import httpx

from aviso_host import filtering
from tests.hostile.test_spatial import DOCUMENT, circle, notify, polygon_at_the_byte_cap
from tests.support.server import running_server


def health_latencies(client: httpx.Client, until: threading.Event, limit: int) -> list[float]:
    latencies: list[float] = []
    while not until.is_set() and len(latencies) < limit:
        start = time.perf_counter()
        assert client.get("/health").status_code == 200
        latencies.append((time.perf_counter() - start) * 1000)
        time.sleep(0.02)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--on-loop", action="store_true")
    args = parser.parse_args()
    if args.on_loop:
        filtering.INLINE_SPATIAL_CHARS = 10**12
    with running_server(DOCUMENT) as server, httpx.Client(base_url=server.url, timeout=120) as c:
        ring = polygon_at_the_byte_cap(0.5)
        identifier = {"date": "2200-01-01", "time": "0", "polygon": ring}
        for _ in range(args.records):
            assert notify(c, "storm_cell", identifier).status_code == 200
        idle = health_latencies(c, threading.Event(), 50)
        query = {"date": "2200-01-01", "polygon": circle(10_000, 1.0)}
        body = {"event_type": "storm_cell", "identifier": query, "from_id": "1"}
        done = threading.Event()
        result: dict[str, float] = {}

        def replay() -> None:
            start = time.perf_counter()
            with httpx.Client(base_url=server.url, timeout=120) as own:
                text = own.post("/api/v1/replay", content=json.dumps(body)).text
            result["seconds"] = time.perf_counter() - start
            result["delivered"] = text.count("event: replay\n")
            done.set()

        thread = threading.Thread(target=replay)
        thread.start()
        busy = health_latencies(c, done, 100_000)
        thread.join()
    print(f"stored polygons: {args.records} x {len(ring)} vertices; filter: 10,000 vertices")
    print(f"matching: {'event loop' if args.on_loop else 'spatial worker threads'}")
    print(f"replay: {result['seconds']:.2f} s, {result['delivered']:.0f} delivered")
    idle_p50, busy_p50 = statistics.median(idle), statistics.median(busy)
    print(f"/health idle: p50 {idle_p50:.1f} ms, max {max(idle):.1f} ms")
    print(f"/health during replay: p50 {busy_p50:.1f} ms, max {max(busy):.1f} ms")
    print(f"ratio during/idle: p50 {busy_p50 / idle_p50:.1f}, max {max(busy) / max(idle):.1f}")


if __name__ == "__main__":
    main()
