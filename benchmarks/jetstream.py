"""JetStream figures against their physical limits, measured in the same run.

  python -m benchmarks.jetstream [--quick] [--notify-only]

(a) notify on the JetStream backend against notify on the in-memory backend:
    both servers run side by side and are measured in three alternated rounds, each giving
    req/s and the aviso process's CPU us per request (user + system, from the kernel, which
    other load disturbs far less than wall-clock throughput), nats-server's CPU us per
    publish, and the JetStream / in-memory ratios; the medians and every round's ratio are
    printed (goal: >= 0.8 in every round), with raw nats-py publish-with-ack at the same
    concurrency beside them as the limit;
(b) replay events/s to one client against a raw nats-py ordered-consumer read of the stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

import psutil

from aviso_loadtests.baselines import raw_ordered_read_rate, raw_publish_rate
from benchmarks.core import CONFIG, notification, replay_rate, requests_per_second
from benchmarks.limits import cpu_seconds
from tests.support.nats import nats_server
from tests.support.pipelined import post_many
from tests.support.process import aviso_process

CONNECTIONS = 32
ROUNDS = 3
BACKENDS = ("memory", "jetstream")

JETSTREAM_BACKEND = """
notification_backend:
  kind: jetstream
  jetstream: {{nats_url: "{url}", storage_type: file}}
"""


def jetstream_config(url: str, batch_size: int) -> str:
    """The core benchmark's schema on JetStream, keeping every message (as in-memory does)."""
    config = CONFIG.split("notification_backend:")[0] + JETSTREAM_BACKEND.format(url=url)
    config += CONFIG[CONFIG.index("watch_endpoint:") :].replace(
        "replay_batch_size: 100", f"replay_batch_size: {batch_size}"
    )
    return config.replace(
        "      step: {type: IntHandler, required: false}\n",
        "      step: {type: IntHandler, required: false}\n"
        "    storage_policy: {allow_duplicates: true}\n",
    )


def measure(port: int, process: psutil.Process, requests: int) -> tuple[float, float]:
    """(requests/s, server CPU microseconds per request) of one round."""
    cpu_before = cpu_seconds(process)
    rate = requests_per_second(port, requests, CONNECTIONS)
    return rate, (cpu_seconds(process) - cpu_before) / requests * 1e6


def notify_rounds(
    servers: dict[str, tuple[int, psutil.Process]],
    nats_process: psutil.Process,
    requests: int,
    rounds: int,
) -> dict[str, list[float]]:
    """Alternated rounds (the start order flips every round): per backend its req/s and
    aviso CPU us per request, and nats-server's CPU us per JetStream publish."""
    figures: dict[str, list[float]] = {
        f"{backend}_{figure}": [] for backend in BACKENDS for figure in ("rps", "cpu_us")
    }
    figures["nats_cpu_us"] = []
    for round_number in range(rounds):
        order = BACKENDS if round_number % 2 == 0 else BACKENDS[::-1]
        for backend in order:
            nats_before = cpu_seconds(nats_process)
            rate, cpu_us = measure(*servers[backend], requests)
            if backend == "jetstream":
                nats_us = (cpu_seconds(nats_process) - nats_before) / requests * 1e6
                figures["nats_cpu_us"].append(nats_us)
            figures[f"{backend}_rps"].append(rate)
            figures[f"{backend}_cpu_us"].append(cpu_us)
        print(
            f"    round {round_number + 1}: in-memory {figures['memory_rps'][-1]:7.0f} req/s "
            f"{figures['memory_cpu_us'][-1]:5.0f} us CPU/req | JetStream "
            f"{figures['jetstream_rps'][-1]:7.0f} req/s {figures['jetstream_cpu_us'][-1]:5.0f}"
            f" us CPU/req (nats-server {figures['nats_cpu_us'][-1]:4.0f} us/publish) | ratio "
            f"{figures['jetstream_rps'][-1] / figures['memory_rps'][-1]:.2f}, CPU ratio "
            f"{figures['memory_cpu_us'][-1] / figures['jetstream_cpu_us'][-1]:.2f}",
            flush=True,
        )
    return figures


def report_notify(figures: dict[str, list[float]], raw_publish_rps: float) -> None:
    rate_ratios = [
        js / memory
        for js, memory in zip(figures["jetstream_rps"], figures["memory_rps"], strict=True)
    ]
    cpu_ratios = [
        memory / js
        for js, memory in zip(figures["jetstream_cpu_us"], figures["memory_cpu_us"], strict=True)
    ]
    median = statistics.median
    print(f"    raw nats-py publish+ack (limit): {raw_publish_rps:8.0f} msg/s")
    for backend, label in (("memory", "in-memory"), ("jetstream", "JetStream")):
        print(
            f"    aviso notify, {label:10} {median(figures[f'{backend}_rps']):8.0f} req/s"
            f"  {median(figures[f'{backend}_cpu_us']):5.0f} us CPU/request (medians)"
        )
    print(f"    nats-server CPU per JetStream publish: {median(figures['nats_cpu_us']):.0f} us")
    print(
        f"    ratio JetStream / in-memory: median {median(rate_ratios):.2f}"
        f" (rounds: {' '.join(f'{r:.2f}' for r in rate_ratios)}); goal >= 0.8 in every round"
    )
    print(
        f"    CPU ratio (in-memory / JetStream per request): median {median(cpu_ratios):.2f}"
        f" (rounds: {' '.join(f'{r:.2f}' for r in cpu_ratios)})"
    )


@contextmanager
def aviso_servers(folder: Path, nats_url: str) -> Iterator[dict[str, tuple[int, psutil.Process]]]:
    """Both aviso servers, warmed up: in-memory and JetStream, as ``aviso-server serve``."""
    memory_config = folder / "memory.yaml"
    memory_config.write_text(CONFIG)
    js_config = folder / "jetstream.yaml"
    js_config.write_text(jetstream_config(nats_url, 1000))
    with (
        aviso_process(memory_config, folder / "memory.log") as (memory_url, memory),
        aviso_process(js_config, folder / "jetstream.log") as (js_url, jetstream),
    ):
        servers = {
            "memory": (int(memory_url.rsplit(":", 1)[1]), psutil.Process(memory.pid)),
            "jetstream": (int(js_url.rsplit(":", 1)[1]), psutil.Process(jetstream.pid)),
        }
        for port, _ in servers.values():
            requests_per_second(port, 1_000, CONNECTIONS)
        yield servers


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--notify-only", action="store_true", help="skip the replay figure")
    args = parser.parse_args(argv)
    requests = 3_000 if args.quick else 10_000
    history = 10_000 if args.quick else 50_000
    results: dict[str, float] = {}
    with TemporaryDirectory() as folder, nats_server(Path(folder) / "nats") as nats_srv:
        assert nats_srv.process is not None
        nats_process = psutil.Process(nats_srv.process.pid)
        print(
            f"(a) notify, {ROUNDS} alternated rounds of {requests} requests over {CONNECTIONS}"
            " keep-alive connections per backend",
            flush=True,
        )
        results["raw_publish_rps"] = asyncio.run(
            raw_publish_rate(nats_srv.url, requests, CONNECTIONS)
        )
        with aviso_servers(Path(folder), nats_srv.url) as servers:
            figures = notify_rounds(servers, nats_process, requests, ROUNDS)
            report_notify(figures, results["raw_publish_rps"])
            for key, values in figures.items():
                results[key] = statistics.median(values)
            results["notify_ratio"] = statistics.median(
                js / memory
                for js, memory in zip(figures["jetstream_rps"], figures["memory_rps"], strict=True)
            )
            results["notify_ratio_min"] = min(
                js / memory
                for js, memory in zip(figures["jetstream_rps"], figures["memory_rps"], strict=True)
            )
            if args.notify_only:
                print(json.dumps({key: round(value, 2) for key, value in results.items()}))
                return results
            port = servers["jetstream"][0]
            print(f"(b) replay of {history} stored notifications, pacing off", flush=True)
            statuses = asyncio.run(
                post_many(port, history, lambda n: notification("jsreplay", n % 100, {"n": n}), 8)
            )
            assert statuses == {200: history}, statuses
            rate, received = asyncio.run(replay_rate(port, "jsreplay", history))
            assert received == history, received
            results["jetstream_replay_eps"] = rate
        results["raw_ordered_eps"] = asyncio.run(
            raw_ordered_read_rate(nats_srv.url, "bench.jsreplay.>", history)
        )
        ratio = results["jetstream_replay_eps"] / results["raw_ordered_eps"]
        print(f"    raw nats-py ordered consumer (limit): {results['raw_ordered_eps']:8.0f} msg/s")
        print(
            f"    aviso replay, JetStream:              {results['jetstream_replay_eps']:8.0f}"
            f" events/s   ratio {ratio:.2f} (goal >= 0.3)"
        )
    print(json.dumps({key: round(value, 1) for key, value in results.items()}))
    return results


if __name__ == "__main__":
    main()
