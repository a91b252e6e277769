"""The JetStream backend's acknowledged publish against nats-py's ``js.publish``, in process.

  python -m benchmarks.jetstream_publish [--quick] [--publishes N]

One nats-server (file storage) and one client process; each round sends the same publishes
(a payload and two metadata headers, one of them a fresh ``Nats-Msg-Id``) with 32 in flight,
once through ``PublishingClient.publish_acked`` and once through ``js.publish``, the order
alternating from round to round. The figure per round is this process's CPU time per
publish (user + system, from the kernel; the event loop's waits for nats-server cost none),
which other load on the machine disturbs far less than wall-clock throughput. Medians over
the rounds and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from tempfile import TemporaryDirectory

import uvloop

from aviso_builtins.backends.jetstream.publisher import PublishingClient, message_headers
from tests.support.nats import nats_server

IN_FLIGHT = 32
ROUNDS = 3
STREAM = "BENCHPUB"
PAYLOAD = b'{"class": "od", "expver": "0001", "step": "12"}' * 3

Publish = Callable[[int], Awaitable[object]]


def metadata(n: int) -> dict[str, str]:
    return {"aviso_actor": "benchmark", "Nats-Msg-Id": f"{os.getpid()}-{time.monotonic_ns()}-{n}"}


async def cpu_us_per_publish(publish: Publish, publishes: int) -> float:
    """``publishes`` calls of ``publish``, ``IN_FLIGHT`` at a time: CPU us per call."""
    numbers = iter(range(publishes))

    async def sender() -> None:
        for n in numbers:
            await publish(n)

    start = time.process_time()
    await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
    return (time.process_time() - start) / publishes * 1e6


async def rounds(nats_url: str, publishes: int) -> dict[str, list[float]]:
    client = PublishingClient()
    await client.connect(nats_url, allow_reconnect=False)
    try:
        await client.listen_for_acks()
        js = client.jetstream()
        await js.add_stream(name=STREAM, subjects=["benchpub.>"], max_msgs=10_000)

        async def acked(n: int) -> int:
            headers = message_headers(metadata(n), STREAM)
            return await client.publish_acked("benchpub.a", PAYLOAD, headers, 5.0)

        async def stock(n: int) -> object:
            return await js.publish("benchpub.a", PAYLOAD, stream=STREAM, headers=metadata(n))

        ways: dict[str, Publish] = {"publish_acked": acked, "js.publish": stock}
        for publish in ways.values():  # warm-up: caches, the allocator
            await cpu_us_per_publish(publish, publishes // 10)
        figures: dict[str, list[float]] = {name: [] for name in ways}
        for round_number in range(ROUNDS):
            for name in tuple(ways)[:: -1 if round_number % 2 else 1]:
                figures[name].append(await cpu_us_per_publish(ways[name], publishes))
            print(
                f"    round {round_number + 1}: "
                + "  ".join(f"{name} {figures[name][-1]:5.1f} us" for name in ways),
                flush=True,
            )
        return figures
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 publishes a round")
    parser.add_argument("--publishes", type=int, help="publishes per round (default 10,000)")
    args = parser.parse_args(argv)
    publishes = args.publishes or (2_000 if args.quick else 10_000)
    print(
        f"acked JetStream publish, {ROUNDS} alternated rounds of {publishes} publishes, "
        f"{IN_FLIGHT} in flight; CPU us per publish; load average "
        f"{' '.join(f'{load:.1f}' for load in os.getloadavg())}",
        flush=True,
    )
    with TemporaryDirectory() as folder, nats_server(Path(folder)) as server:
        figures = uvloop.run(rounds(server.url, publishes))
    results = {
        "publish_acked_cpu_us": round(statistics.median(figures["publish_acked"]), 2),
        "js_publish_cpu_us": round(statistics.median(figures["js.publish"]), 2),
    }
    results["cpu_ratio"] = round(results["publish_acked_cpu_us"] / results["js_publish_cpu_us"], 3)
    print(
        f"    medians: publish_acked {results['publish_acked_cpu_us']:.1f} us, js.publish "
        f"{results['js_publish_cpu_us']:.1f} us per publish (ratio {results['cpu_ratio']:.2f})"
    )
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
