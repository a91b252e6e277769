"""What a completion rule costs a notify, measured in one run.

  python -m benchmarks.completion [--quick] [--rounds 3]

Two ``aviso-server serve`` processes on the in-memory backend, the same ``ens`` schema, one
with a ``completion`` rule (5 members per run and step) and one without. Each round posts
the same notifications to both in turn (the order rotating), over 32 keep-alive connections,
every group completed; the server's CPU time (user + system) is read once the rule's server
has published every complete event, so the consumer's work is in its figure. Medians over
the rounds, and the ratio with / without (goal: at most 1.10).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx
import psutil

from benchmarks.results import spread, write_results
from tests.support.pipelined import post_many, request_bytes
from tests.support.process import aviso_process

MEMBERS = 5
CONNECTIONS = 32
WAIT = 300.0
SCHEMA = """
notification_schema:
  ens:
    topic: {base: ens, key_order: [run, step, member]}
    identifier:
      run: {type: StringHandler, required: true}
      step: {type: IntHandler, required: true}
      member: {type: IntHandler, required: true}
"""
RULE = """    completion:
      event_type: ens_complete
      group_by: [run, step]
      member: member
      expected_count: 5
      deadline_seconds: 3600
"""
BASE = """
application: {host: 127.0.0.1, port: 0}
logging: {level: warn}
notification_backend:
  kind: in_memory
  in_memory: {max_history_per_topic: 1000000, max_topics: 1000000}
watch_endpoint: {replay_batch_delay_ms: 0}
"""


def member(run: str, n: int) -> bytes:
    identifier = {"run": run, "step": n // MEMBERS, "member": n % MEMBERS}
    return request_bytes("/api/v1/notification", {"event_type": "ens", "identifier": identifier})


def complete_events(url: str, run: str) -> int:
    body = {"event_type": "ens_complete", "identifier": {"run": run}, "from_id": "0"}
    response = httpx.post(f"{url}/api/v1/replay", json=body, timeout=60)
    return response.text.count('"specversion"')


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def measure(url: str, process: psutil.Process, run: str, requests: int, rule: bool) -> float:
    """Server CPU microseconds per notify, the rule's events included."""
    port = int(url.rsplit(":", 1)[1])
    before = cpu_seconds(process)
    statuses = asyncio.run(
        post_many(port, requests, lambda n: member(run, n), CONNECTIONS, window=1)
    )
    assert statuses == {200: requests}, statuses
    if rule:
        deadline = time.monotonic() + WAIT
        while complete_events(url, run) < requests // MEMBERS:
            if time.monotonic() > deadline:
                raise RuntimeError("the complete events did not all arrive")
            time.sleep(0.1)
    return (cpu_seconds(process) - before) / requests * 1e6


@contextmanager
def served(folder: Path, rule: bool) -> Iterator[tuple[str, psutil.Process]]:
    config = folder / ("with.yaml" if rule else "without.yaml")
    config.write_text(BASE + SCHEMA + (RULE if rule else ""))
    with aviso_process(config, folder / f"{config.stem}.log") as (url, process):
        yield url, psutil.Process(process.pid)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 notifications a round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    requests = 2_000 if args.quick else 10_000
    rounds = []
    with ExitStack() as stack:
        folder = Path(stack.enter_context(TemporaryDirectory()))
        with_url, with_process = stack.enter_context(served(folder, True))
        without_url, without_process = stack.enter_context(served(folder, False))
        for number in range(1, args.rounds + 1):
            run = f"round{number}"
            sides = [
                ("with", with_url, with_process),
                ("without", without_url, without_process),
            ]
            figures: dict[str, Any] = {"round": number}
            for side, url, process in sides[:: 1 if number % 2 else -1]:
                figures[f"{side}_cpu_us"] = measure(url, process, run, requests, side == "with")
            figures["ratio"] = figures["with_cpu_us"] / figures["without_cpu_us"]
            rounds.append(figures)
            print(
                f"round {number}: with a rule {figures['with_cpu_us']:.1f} us CPU per "
                f"notify, without {figures['without_cpu_us']:.1f} us, "
                f"ratio {figures['ratio']:.3f}",
                flush=True,
            )
    summary = {
        key: spread([r[key] for r in rounds]) for key in ("with_cpu_us", "without_cpu_us", "ratio")
    }
    path = write_results("completion", rounds, summary)
    print(f"raw results: {path}")
    figures = {key: round(value["median"], 3) for key, value in summary.items()}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
