"""What an ``Idempotency-Key`` costs a notify on the in-memory backend.

  python -m benchmarks.idempotency [--quick]

One aviso process; rounds of notifies without a key and with a fresh key on every request
(each one remembered in the backend's duplicate window) alternate in ABBA order, so that both
see the same machine load and store size (1,000 topics, one notification each: the store
does not grow between rounds). Prints the best round of each and their ratio (goal >= 0.9),
and, steadier on a shared machine, the server's CPU time per request each way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

from tests.support.pipelined import post_many
from tests.support.process import aviso_process

CONNECTIONS = 32
TOPICS = 1_000
CONFIG = """
application: {host: 127.0.0.1, port: 0}
logging: {level: warn}
notification_backend:
  kind: in_memory
  in_memory: {max_history_per_topic: 1, max_topics: 10000}
notification_schema:
  bench:
    topic: {base: bench, key_order: [run, step]}
    identifier:
      run: {type: StringHandler, required: true}
      step: {type: IntHandler, required: false}
"""


def notification(run: str, step: int, key: str | None) -> bytes:
    body = json.dumps(
        {"event_type": "bench", "identifier": {"run": run, "step": step}, "payload": {"n": step}}
    ).encode()
    header = f"Idempotency-Key: {key}\r\n" if key is not None else ""
    head = (
        f"POST /api/v1/notification HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\n{header}Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(port: int, pid: int, count: int, keyed: bool) -> tuple[float, float]:
    """Requests per second, and server CPU microseconds per request."""
    # Spark-like keys: 64 hex digits, unique per request, so every request is stored.
    keys = [uuid.uuid4().hex * 2 if keyed else None for _ in range(count)]
    requests = [notification("bench", n % TOPICS, keys[n]) for n in range(count)]
    cpu = cpu_seconds(pid)
    start = time.perf_counter()
    statuses = asyncio.run(post_many(port, count, requests.__getitem__, CONNECTIONS, window=1))
    elapsed = time.perf_counter() - start
    assert statuses == {200: count}, statuses
    return count / elapsed, (cpu_seconds(pid) - cpu) / count * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    args = parser.parse_args(argv)
    requests = 3_000 if args.quick else 20_000
    rounds = 2 if args.quick else 4
    rates: dict[bool, list[float]] = {False: [], True: []}
    costs: dict[bool, list[float]] = {False: [], True: []}
    with TemporaryDirectory() as folder:
        config = Path(folder) / "config.yaml"
        config.write_text(CONFIG)
        print(
            f"notify throughput, in-memory, {rounds} rounds of {requests} requests each way "
            f"over {CONNECTIONS} keep-alive connections",
            flush=True,
        )
        with aviso_process(config, Path(folder) / "aviso.log") as (url, process):
            port = int(url.rsplit(":", 1)[1])
            measure(port, process.pid, 2 * TOPICS, False)  # warm-up: every topic stored
            for round_ in range(rounds):
                for keyed in (False, True) if round_ % 2 == 0 else (True, False):
                    rate, cost = measure(port, process.pid, requests, keyed)
                    rates[keyed].append(rate)
                    costs[keyed].append(cost)
                    label = "with key   " if keyed else "without key"
                    print(f"    round {round_ + 1} {label}: {rate:8.0f} req/s {cost:6.0f} us CPU")
    plain, keyed_rate = max(rates[False]), max(rates[True])
    print(f"    notify without a key:        {plain:8.0f} req/s (best round)")
    print(
        f"    notify with Idempotency-Key: {keyed_rate:8.0f} req/s (best round)"
        f"   ratio {keyed_rate / plain:.2f} (goal >= 0.9)"
    )
    plain_cost, keyed_cost = min(costs[False]), min(costs[True])
    print(
        f"    server CPU per request: {plain_cost:.0f} us without, {keyed_cost:.0f} us with a key"
        f"   ratio {plain_cost / keyed_cost:.2f}"
    )


if __name__ == "__main__":
    main()
