"""What each part of a completion rule's work costs a notification, in one process.

  python -m benchmarks.completion_parts [--rounds 3]

``benchmarks.completion`` measures the rule's whole cost through two servers; this one
times its parts alone, each over the same 10,200 stored notifications (200 groups of 51
members, each page of 256 spanning about 17 groups, as notifies from many connections
arrive), the garbage collector off, CPU time per notification:

- ``count_us``: the completion consumer fed pages (``consume_page``, the host's page over
  stored records), its claims and events included, with a publisher that stores nothing;
- ``checkpoint_us``: its group writes at each page's checkpoint;
- ``history_us``: the history pages that hand the records over (``fetch_batch``);
- ``fan_out_us``: what the live subscription that wakes the consumer adds to a publish.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_builtins.completion.consumer import CompletionConsumer
from aviso_host.consumers import SchemaRecordReader, StoredPage
from aviso_plugins.consumers import ConsumerHistory, ConsumerMetrics
from aviso_plugins.service import Wakeup
from aviso_plugins.state import ProcessLocalState, SharedState
from aviso_plugins.storage import BackendContext, StoredNotification
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import StartCursor
from benchmarks.results import spread, write_results

MEMBERS = 51
GROUPS = 200
NOTIFICATIONS = MEMBERS * GROUPS
PAGE = 256
SPREAD = 600
"""How far (in notifications) a member may arrive from its place in order."""
PATTERN = TopicPattern(("ens", None, None, None))
"""The whole stream, as a consumer follows it."""
RULE = {
    "event_type": "ens_complete",
    "group_by": ["run", "step"],
    "member": "member",
    "expected_count": MEMBERS,
    "deadline_seconds": 3600,
}
SCHEMAS = {
    "ens": {
        "topic": {"base": "ens", "key_order": ["run", "step", "member"]},
        "identifier": {
            "run": {"type": "StringHandler", "required": True},
            "step": {"type": "IntHandler", "required": True},
            "member": {"type": "IntHandler", "required": True},
        },
        "completion": RULE,
    }
}


class Discarding:
    """A publisher that stores nothing (the events' own publishes are the notify path's)."""

    async def publish(
        self,
        event_type: str,
        identifier: Mapping[str, Any],
        payload: Any = None,
        message_id: str | None = None,
    ) -> StoredNotification:
        return StoredNotification(1, event_type, "null", time.time_ns())


@dataclass
class Context:
    publisher: Discarding
    event_types: tuple[str, ...] = ("ens",)
    schemas: Mapping[str, Any] = field(default_factory=lambda: SCHEMAS)
    state: SharedState = field(default_factory=ProcessLocalState)
    metrics: ConsumerMetrics = field(default_factory=ConsumerMetrics)
    history: ConsumerHistory = field(default_factory=ConsumerHistory)


def notifications(run: str) -> list[tuple[str, str, dict[str, str]]]:
    """Topic, payload and metadata of each notification, in arrival order."""
    rng = random.Random(1)
    order = sorted(range(NOTIFICATIONS), key=lambda n: n + rng.uniform(0, SPREAD))
    found = []
    for n in order:
        step, member = divmod(n, MEMBERS)
        identifier = {"run": run, "step": str(step), "member": str(member)}
        metadata = {"identifier": json.dumps(identifier, separators=(",", ":"))}
        found.append((f"ens.{run}.{step}.{member}", "null", metadata))
    return found


async def one_round(number: int) -> dict[str, Any]:
    run = f"round{number}"
    sent = notifications(run)
    backends = {}
    for subscribed in (False, True):
        backend = InMemoryBackend(BackendContext({"max_history_per_topic": 10**6}, {}))
        if subscribed:
            await backend.subscribe(PATTERN, Wakeup())
        started = time.process_time()
        for topic, payload, metadata in sent:
            await backend.publish(topic, payload, metadata)
        backends[subscribed] = (backend, time.process_time() - started)
    backend = backends[True][0]
    pages: list[list[StoredNotification]] = []
    started = time.process_time()
    after = 0
    while True:
        batch = await backend.fetch_batch(PATTERN, StartCursor(from_sequence=after + 1), PAGE)
        if not batch.messages:
            break
        pages.append(batch.messages)
        after = batch.messages[-1].sequence
    history = time.process_time() - started
    consumer = CompletionConsumer(cast(Any, Context(Discarding())))
    await consumer.start()
    # No renderer: every record's stored identifier is read (no spatial field).
    reader = SchemaRecordReader(cast(Any, None), cast(Any, SimpleNamespace(spatial_keys=())))
    count = checkpoint = 0.0
    for page in pages:
        started = time.process_time()
        await consumer.consume_page(StoredPage("completion", "ens", page, reader))
        between = time.process_time()
        await consumer.checkpoint()
        count += between - started
        checkpoint += time.process_time() - between
    await consumer.close()
    per = 1e6 / NOTIFICATIONS
    return {
        "round": number,
        "count_us": count * per,
        "checkpoint_us": checkpoint * per,
        "history_us": history * per,
        "fan_out_us": (backends[True][1] - backends[False][1]) * per,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    gc.disable()
    rounds = []
    for number in range(1, args.rounds + 1):
        figures = asyncio.run(one_round(number))
        rounds.append(figures)
        print(json.dumps({k: round(v, 3) for k, v in figures.items()}), flush=True)
    keys = ("count_us", "checkpoint_us", "history_us", "fan_out_us")
    summary = {key: spread([r[key] for r in rounds]) for key in keys}
    path = write_results("completion_parts", rounds, summary)
    print(f"raw results: {path}")
    figures = {key: round(value["median"], 3) for key, value in summary.items()}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
