"""JetStream figures against their physical limits, measured in the same run.

  python -m benchmarks.jetstream [--quick]

(a) notify req/s on the JetStream backend against notify on the in-memory backend, with raw
    nats-py publish-with-ack at the same concurrency and the bare Starlette POST beside them;
(b) replay events/s to one client against a raw nats-py ordered-consumer read of the stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from tempfile import TemporaryDirectory

from aviso_loadtests.baselines import raw_ordered_read_rate, raw_publish_rate
from aviso_loadtests.servers import bare_server
from benchmarks.core import CONFIG, notification, replay_rate, requests_per_second
from tests.support.nats import nats_server
from tests.support.pipelined import post_many
from tests.support.process import aviso_process

CONNECTIONS = 32

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    args = parser.parse_args()
    requests = 5_000 if args.quick else 20_000
    history = 10_000 if args.quick else 50_000
    results: dict[str, float] = {}
    with TemporaryDirectory() as folder, nats_server(Path(folder) / "nats") as nats_srv:
        memory_config = Path(folder) / "memory.yaml"
        memory_config.write_text(CONFIG)
        js_config = Path(folder) / "jetstream.yaml"
        js_config.write_text(jetstream_config(nats_srv.url, 1000))
        print(f"(a) notify throughput, {requests} requests, {CONNECTIONS} connections", flush=True)
        with bare_server() as bare_port:
            results["bare_rps"] = requests_per_second(bare_port, requests, CONNECTIONS)
        with aviso_process(memory_config, Path(folder) / "memory.log") as (url, _):
            results["memory_rps"] = requests_per_second(
                int(url.rsplit(":", 1)[1]), requests, CONNECTIONS
            )
        results["raw_publish_rps"] = asyncio.run(
            raw_publish_rate(nats_srv.url, requests, CONNECTIONS)
        )
        with aviso_process(js_config, Path(folder) / "jetstream.log") as (url, _):
            port = int(url.rsplit(":", 1)[1])
            results["jetstream_rps"] = requests_per_second(port, requests, CONNECTIONS)
            ratio = results["jetstream_rps"] / results["memory_rps"]
            print(f"    bare Starlette POST (limit):      {results['bare_rps']:8.0f} req/s")
            print(f"    raw nats-py publish+ack (limit):  {results['raw_publish_rps']:8.0f} msg/s")
            print(f"    aviso notify, in-memory:          {results['memory_rps']:8.0f} req/s")
            print(
                f"    aviso notify, JetStream:          {results['jetstream_rps']:8.0f} req/s"
                f"   ratio to in-memory {ratio:.2f} (goal >= 0.8)"
            )

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


if __name__ == "__main__":
    main()
