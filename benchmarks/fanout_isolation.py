"""Fan-out isolation: idle watchers elsewhere must not slow delivery to this stream.

  python -m benchmarks.fanout_isolation [--quick] [--backend in_memory|jetstream]

Delivery latency (notify sent -> event received, p50/p99) to 10 watches of one stream is
measured on a fresh server alone, then again while many idle watches are held open, and the
ratio is printed. Two placements of the idle watches, each against its own same-run
baseline: (a) on other event types (other topic bases), (b) on the same event type under other
leading identifier values (other topics of the same base).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

from aviso_loadtests.report import percentile
from benchmarks.core import CONFIG, fan_out_latency
from benchmarks.jetstream import jetstream_config
from tests.support.held_watches import close_all, open_watch
from tests.support.nats import nats_server
from tests.support.process import aviso_process

WATCHERS = 10
OTHER_TYPES = 20
OPENING_CONCURRENCY = 200
# Idle streams would otherwise each wake every 30 s; the measurement is about fan-out only.
QUIET_HEARTBEAT = "sse_heartbeat_interval_sec: 3600"


def _other_schemas() -> str:
    return "".join(
        f"  other_{n:02d}:\n"
        f"    topic: {{base: other{n:02d}, key_order: [run]}}\n"
        f"    identifier: {{run: {{type: StringHandler, required: true}}}}\n"
        for n in range(OTHER_TYPES)
    )


def config_text(backend: str, nats_url: str | None) -> str:
    base = CONFIG if backend == "in_memory" else jetstream_config(str(nats_url), 100)
    return base.replace("sse_heartbeat_interval_sec: 30", QUIET_HEARTBEAT) + _other_schemas()


def idle_watch(placement: str, n: int) -> dict[str, object]:
    if placement == "other_bases":
        return {"event_type": f"other_{n % OTHER_TYPES:02d}", "identifier": {"run": f"idle{n}"}}
    return {"event_type": "bench", "identifier": {"run": f"idle{n}"}}


async def measure(port: int, placement: str, idle: int, notifications: int) -> dict[str, float]:
    """p50/p99 alone, then with ``idle`` watches open (in milliseconds)."""
    results: dict[str, float] = {}
    alone = await fan_out_latency(port, WATCHERS, notifications, 0.02)
    gate = asyncio.Semaphore(OPENING_CONCURRENCY)
    held = await asyncio.gather(
        *(open_watch(port, idle_watch(placement, n), gate) for n in range(idle))
    )
    try:
        crowded = await fan_out_latency(port, WATCHERS, notifications, 0.02)
    finally:
        close_all(held)
    for name, latencies in (("alone", alone), ("with_idle", crowded)):
        results[f"{name}_p50_ms"] = statistics.median(latencies) * 1000
        results[f"{name}_p99_ms"] = percentile(latencies, 0.99) * 1000
    return results


@contextmanager
def served(backend: str, folder: Path) -> Iterator[int]:
    """A fresh aviso process (and nats-server) for one placement; yields its port."""
    with ExitStack() as stack:
        nats_url = None
        if backend == "jetstream":
            nats_url = stack.enter_context(nats_server(folder / "nats")).url
        config = folder / "config.yaml"
        config.write_text(config_text(backend, nats_url))
        url, _ = stack.enter_context(aviso_process(config, folder / "aviso.log"))
        yield int(url.rsplit(":", 1)[1])


def raise_fd_limit(needed: int) -> None:
    """Each held watch is one socket here and one in the server (which inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = needed + 1024
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            raise SystemExit(f"need {wanted} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1,000 idle watches, for a smoke run")
    parser.add_argument("--backend", choices=("in_memory", "jetstream"), default="in_memory")
    args = parser.parse_args()
    idle = 1_000 if args.quick else 10_000
    notifications = 50 if args.quick else 200
    raise_fd_limit(idle)
    summary: dict[str, float] = {}
    for placement in ("other_bases", "same_base_other_topics"):
        print(
            f"{placement}: {WATCHERS} watches of bench/run=fanout, {notifications} notifications,"
            f" alone then with {idle} idle watches ({args.backend})",
            flush=True,
        )
        with TemporaryDirectory() as folder, served(args.backend, Path(folder)) as port:
            results = asyncio.run(measure(port, placement, idle, notifications))
        for quantile in ("p50", "p99"):
            alone, crowded = results[f"alone_{quantile}_ms"], results[f"with_idle_{quantile}_ms"]
            print(
                f"    {quantile}: alone {alone:6.2f} ms, with idle {crowded:6.2f} ms,"
                f" ratio {crowded / alone:.2f}"
            )
            summary[f"{placement}_{quantile}_ratio"] = crowded / alone
        summary.update({f"{placement}_{key}": value for key, value in results.items()})
    print(json.dumps({key: round(value, 2) for key, value in summary.items()}))


if __name__ == "__main__":
    main()
