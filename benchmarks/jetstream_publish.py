"""The raw nats-py ceiling of an acknowledged JetStream publish, publishing what aviso
publishes, beside nats-py's ``js.publish``, in process.

  python -m benchmarks.jetstream_publish [--quick] [--publishes N] [--rounds R]
                                         [--results-dir DIR]

One nats-server (file storage) and this client process. Every publish is the message the
JetStream backend publishes for benchmarks.core's notification (:func:`aviso_message`: the
topic as subject, the payload's JSON, the ``identifier`` and ``Nats-Expected-Stream``
headers), 32 in flight, two ways, the order alternating from round to round:

- ceiling: the publish-and-await-ack path the backend uses (``PublishingClient.
  publish_for_ack``: a plain publish with a reply subject under one wildcard inbox
  subscription, the PubAck's sequence and duplicate flag read without decoding it), with
  nothing of aviso around it: the most a notify on JetStream can reach;
- js.publish: nats-py's own request path (a reply inbox and future per request, a timer, a
  decoded ``PubAck``), for comparison.

The figure per round is this process's CPU time per publish (user + system, from the
kernel; the event loop's waits for nats-server cost none), which other load on the machine
disturbs far less than wall-clock throughput; publishes/s is recorded beside it. Medians,
spreads and every round are written as JSON under ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import uvloop

from aviso_builtins.backends.jetstream.publisher import (
    PublishingClient,
    acknowledged_sequence,
    dropped_as_duplicate,
    message_headers,
)
from benchmarks.results import (
    add_round_options,
    load_average,
    parse_rounds,
    ratio_spread,
    rotated,
    spread,
    write_results,
)
from tests.support.nats import nats_server

IN_FLIGHT = 32
ROUNDS = 5
STREAM = "BENCH"
ACK_TIMEOUT = 5.0
"""The backend's acknowledgement timeout of a publish without an ``Idempotency-Key``."""

Publish = Callable[[int], Awaitable[object]]


def aviso_message(
    n: int, stream: str = STREAM, run: str = "rps"
) -> tuple[str, bytes, dict[str, str]]:
    """(subject, payload, headers) the JetStream backend publishes for benchmarks.core's
    ``notification(run, n, {"n": n})``: the topic ``bench.<run>.<step>``, the payload as
    compact JSON, the canonical identifier (keys sorted, the step's text) as the
    ``identifier`` header, and the stream JetStream must store it in. No actor header (the
    benchmark's server has no auth) and no ``Nats-Msg-Id`` (no ``Idempotency-Key``)."""
    identifier = json.dumps({"run": run, "step": str(n)}, separators=(",", ":"))
    headers = message_headers({"identifier": identifier}, stream)
    return f"bench.{run}.{n}", json.dumps({"n": n}, separators=(",", ":")).encode(), headers


async def ceiling_publish(client: PublishingClient, n: int, stream: str = STREAM) -> int:
    """One publish of :func:`aviso_message` the backend's way, answered with its sequence."""
    subject, payload, headers = aviso_message(n, stream)
    reply = await client.publish_for_ack(subject, payload, headers, ACK_TIMEOUT)
    sequence = acknowledged_sequence(reply)
    if dropped_as_duplicate(reply):
        raise RuntimeError(f"publish {n} dropped as a duplicate")
    return sequence


async def timed(publish: Publish, publishes: int) -> tuple[float, float]:
    """``publishes`` calls of ``publish``, ``IN_FLIGHT`` at a time: (CPU us per call,
    calls/s)."""
    numbers = iter(range(publishes))

    async def sender() -> None:
        for n in numbers:
            await publish(n)

    start, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
    elapsed = time.perf_counter() - started
    return (time.process_time() - start) / publishes * 1e6, publishes / elapsed


async def measured(nats_url: str, publishes: int, rounds: int) -> list[dict[str, Any]]:
    client = PublishingClient()
    await client.connect(nats_url, allow_reconnect=False)
    try:
        await client.listen_for_acks()
        js = client.jetstream()
        await js.add_stream(name=STREAM, subjects=["bench.>"], max_msgs=100_000)

        async def ceiling(n: int) -> int:
            return await ceiling_publish(client, n)

        async def stock(n: int) -> object:
            subject, payload, headers = aviso_message(n)
            return await js.publish(subject, payload, headers=headers, timeout=ACK_TIMEOUT)

        ways: dict[str, Publish] = {"ceiling": ceiling, "js.publish": stock}
        for publish in ways.values():  # warm-up: caches, the allocator
            await timed(publish, publishes // 10)
        figures: list[dict[str, Any]] = []
        for round_number in range(rounds):
            order = rotated(tuple(ways), round_number)
            figure: dict[str, Any] = {"round": round_number + 1, "order": order}
            for name in order:
                cpu_us, rate = await timed(ways[name], publishes)
                figure[name] = {"cpu_us_per_publish": cpu_us, "publishes_per_s": rate}
            figure["load_average"] = os.getloadavg()
            figures.append(figure)
            print(
                f"    round {round_number + 1}: "
                + "  ".join(
                    f"{name} {figure[name]['cpu_us_per_publish']:5.1f} us" for name in ways
                ),
                flush=True,
            )
        return figures
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 publishes a round")
    parser.add_argument("--publishes", type=int, help="publishes per round (default 10,000)")
    add_round_options(parser, ROUNDS, "alternated")
    args = parse_rounds(parser, argv)
    publishes = args.publishes or (2_000 if args.quick else 10_000)
    print(
        f"acked JetStream publish of aviso's message, {args.rounds} alternated rounds of "
        f"{publishes} publishes, {IN_FLIGHT} in flight; client CPU us per publish; load average "
        f"{load_average()}",
        flush=True,
    )
    with TemporaryDirectory() as folder, nats_server(Path(folder)) as server:
        rounds = uvloop.run(measured(server.url, publishes, args.rounds))
    cpu = {
        name: [figure[name]["cpu_us_per_publish"] for figure in rounds]
        for name in ("ceiling", "js.publish")
    }
    summary: dict[str, Any] = {
        "publishes_per_round": publishes,
        "in_flight": IN_FLIGHT,
        "ceiling_cpu_us": spread(cpu["ceiling"]),
        "js_publish_cpu_us": spread(cpu["js.publish"]),
        "ceiling_js_publish_cpu_ratio": ratio_spread(cpu["ceiling"], cpu["js.publish"]),
    }
    path = write_results("jetstream_publish", rounds, summary, args.results_dir)
    results = {
        "ceiling_cpu_us": round(summary["ceiling_cpu_us"]["median"], 2),
        "js_publish_cpu_us": round(summary["js_publish_cpu_us"]["median"], 2),
        "cpu_ratio": round(summary["ceiling_js_publish_cpu_ratio"]["median"], 3),
    }
    print(
        f"    medians: ceiling {results['ceiling_cpu_us']:.1f} us, js.publish "
        f"{results['js_publish_cpu_us']:.1f} us per publish (ratio {results['cpu_ratio']:.2f});"
        f" rounds written to {path}"
    )
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
