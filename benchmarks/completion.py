"""What a completion rule costs a notify, measured in one run; and the completion goal run.

  python -m benchmarks.completion [--quick] [--rounds 3] [--one-after-the-other]
  python -m benchmarks.completion --goal [--workers 8]

Two ``aviso-server serve`` processes on the in-memory backend, the same ``ens`` schema, one
with a ``completion`` rule (51 members per run and step, an ensemble's size) and one
without. Each round posts
the same notifications to both at once (``--one-after-the-other``: in turn, the order
rotating), over 32 keep-alive connections each, every group completed: on a machine shared
with other work both servers then see the same load. Each server's CPU time (user + system)
is read once its notifies are answered, the rule's once it has published every complete
event, so the consumer's work is in its figure (polled
with replays that each read only what is new, so a lagging consumer is not charged more
polls' rendering). Medians over
the rounds, and the ratio with / without (goal: at most 1.10).

``--goal``: 41 steps x 51 members (2,091 notifications) shuffled, 5 % of them published
again, then a step left at 50 members (an event type of its own, whose rule's deadline is
60 s), sent alternately to two instances of ``aviso-server serve --workers N`` sharing one
JetStream; the first instance is killed (SIGKILL) halfway, and what it did not answer is
sent to the other. Then one more complete
group (a sentinel: the consumer reads in sequence order, so its event comes after every
earlier one) and the count of completion events per group and status: 41 complete, 1
incomplete naming the missing member, none twice; and each complete event's delay after its
last member's notify (storage times), p50/p99.
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import json
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx
import psutil

from aviso_loadtests.report import percentile
from benchmarks.results import spread, write_results
from tests.support.pipelined import post_many, request_bytes
from tests.support.process import aviso_process

MEMBERS = 51
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
      expected_count: 51
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


def complete_events(url: str, run: str, from_id: int = 0) -> list[int]:
    """The sequences of the complete events of ``run`` from ``from_id`` on."""
    body = {"event_type": "ens_complete", "identifier": {"run": run}, "from_id": str(from_id)}
    response = httpx.post(f"{url}/api/v1/replay", json=body, timeout=60)
    return [
        json.loads(line[6:])["sequence"]
        for line in response.text.splitlines()
        if line.startswith("data: ") and '"specversion"' in line
    ]


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def await_complete_events(url: str, run: str, requests: int) -> None:
    """Until every complete event of ``run`` is stored. Each poll reads only the events
    stored since the last one, so the polls render each event once whatever the consumer's
    lag (their cost is in the figure)."""
    deadline = time.monotonic() + WAIT
    seen = complete_events(url, run)
    while len(seen) < requests // MEMBERS:
        if time.monotonic() > deadline:
            raise RuntimeError("the complete events did not all arrive")
        time.sleep(0.1)
        seen += complete_events(url, run, seen[-1] + 1 if seen else 0)
    assert len(seen) == requests // MEMBERS, len(seen)


def measure(url: str, process: psutil.Process, run: str, requests: int, rule: bool) -> float:
    """Server CPU microseconds per notify, the rule's events included."""
    before = cpu_seconds(process)
    statuses = asyncio.run(
        post_many(port_of(url), requests, lambda n: member(run, n), CONNECTIONS, window=1)
    )
    assert statuses == {200: requests}, statuses
    if rule:
        await_complete_events(url, run, requests)
    return (cpu_seconds(process) - before) / requests * 1e6


def measure_together(
    with_side: tuple[str, psutil.Process],
    without_side: tuple[str, psutil.Process],
    run: str,
    requests: int,
) -> tuple[float, float]:
    """:func:`measure` of both servers at once, the same notifications posted to each over
    the same interval: on a machine shared with other work, both then see the same load,
    where one after the other each sees its own."""
    (with_url, with_process), (without_url, without_process) = with_side, without_side
    before = cpu_seconds(with_process), cpu_seconds(without_process)

    async def both() -> list[dict[int, int]]:
        return await asyncio.gather(
            *(
                post_many(port_of(url), requests, lambda n: member(run, n), CONNECTIONS, window=1)
                for url in (with_url, without_url)
            )
        )

    for statuses in asyncio.run(both()):
        assert statuses == {200: requests}, statuses
    without_cpu = cpu_seconds(without_process) - before[1]
    await_complete_events(with_url, run, requests)
    with_cpu = cpu_seconds(with_process) - before[0]
    return with_cpu / requests * 1e6, without_cpu / requests * 1e6


@contextmanager
def served(folder: Path, rule: bool) -> Iterator[tuple[str, psutil.Process]]:
    config = folder / ("with.yaml" if rule else "without.yaml")
    config.write_text(BASE + SCHEMA + (RULE if rule else ""))
    with aviso_process(config, folder / f"{config.stem}.log") as (url, process):
        yield url, psutil.Process(process.pid)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,040 notifications a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--one-after-the-other",
        action="store_true",
        help="post to one server, then to the other (order rotating), instead of to both at once",
    )
    parser.add_argument("--goal", action="store_true", help="the goal run on JetStream instead")
    parser.add_argument("--workers", type=int, default=8, help="workers per instance (--goal)")
    args = parser.parse_args(argv)
    if args.goal:
        return goal_main(args.workers)
    requests = MEMBERS * (40 if args.quick else 200)
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
            if args.one_after_the_other:
                for side, url, process in sides[:: 1 if number % 2 else -1]:
                    figures[f"{side}_cpu_us"] = measure(url, process, run, requests, side == "with")
            else:
                figures["with_cpu_us"], figures["without_cpu_us"] = measure_together(
                    (with_url, with_process), (without_url, without_process), run, requests
                )
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


# -- the goal run ----------------------------------------------------------------------------

GOAL_STEPS = 41
GOAL_MEMBERS = 51
REPUBLISHED = 0.05
GOAL_DEADLINE = 3600
"""Seconds: the 41 steps complete long before (no incomplete event while the run lasts)."""
SHORT_DEADLINE = 60
"""Seconds: the rule of the step left at 50 members (its own event type), sent last: its
members must all be stored within it (52 requests), its incomplete event comes after it."""


def goal_schema(event_type: str, deadline: int) -> dict[str, Any]:
    return {
        "topic": {"base": event_type, "key_order": ["run", "step", "member"]},
        "identifier": {
            "run": {"type": "StringHandler", "required": True},
            "step": {"type": "IntHandler", "required": True},
            "member": {"type": "IntHandler", "required": True},
        },
        "completion": {
            "event_type": f"{event_type}_complete",
            "group_by": ["run", "step"],
            "member": "member",
            "expected_values": list(range(GOAL_MEMBERS)),
            "deadline_seconds": deadline,
        },
    }


def goal_config(nats_url: str, event_type: str) -> dict[str, Any]:
    """``event_type`` (the 41 steps) and ``<event_type>s`` (the step left short)."""
    return {
        "application": {"host": "127.0.0.1", "port": 0},
        "logging": {"level": "warn"},
        "notification_backend": {"kind": "jetstream", "jetstream": {"nats_url": nats_url}},
        "watch_endpoint": {"replay_batch_delay_ms": 0},
        "notification_schema": {
            event_type: goal_schema(event_type, GOAL_DEADLINE),
            f"{event_type}s": goal_schema(f"{event_type}s", SHORT_DEADLINE),
        },
    }


def _parse_time(text: str) -> float:
    whole, _, fraction = text.rstrip("Z").partition(".")
    moment = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return moment + (float(f"0.{fraction}") if fraction else 0.0)


def _send(urls: list[str], body: dict[str, Any]) -> None:
    """POST to the first instance that answers 200 (a killed one refuses or drops)."""
    identifier = body["identifier"]
    for url in urls:
        try:
            answer = httpx.post(f"{url}/api/v1/notification", json=body, timeout=30)
        except httpx.TransportError:
            continue
        if answer.status_code == 200:
            return
    raise RuntimeError(f"no instance stored {identifier}")


def completion_events(url: str, event_type: str) -> list[dict[str, Any]]:
    body = {"event_type": f"{event_type}_complete", "identifier": {}, "from_id": "0"}
    answer = httpx.post(f"{url}/api/v1/replay", json=body, timeout=60)
    events = []
    for line in answer.text.splitlines():
        if line.startswith("data: ") and '"specversion"' in line:
            events.append(json.loads(line[6:]))
    return events


def goal(directory: Path, nats_url: str, workers: int, seed: int = 7) -> dict[str, Any]:
    """The goal run (see the module's text); returns what was counted and measured."""
    from tests.host.backends.jetstream_support import aviso_serving

    event_type = f"ens{int(time.time() * 1000) % 10**9}"
    rng = random.Random(seed)
    members: list[dict[str, Any]] = [
        {"event_type": event_type, "identifier": {"run": "r1", "step": str(step), "member": str(n)}}
        for step in range(GOAL_STEPS)
        for n in range(GOAL_MEMBERS)
    ]
    short_step = [
        {"event_type": f"{event_type}s", "identifier": {"run": "r1", "step": "0", "member": str(n)}}
        for n in range(GOAL_MEMBERS - 1)
    ]
    sends = []
    # The short step last, so that its members all arrive before its deadline passes.
    for group in (members, short_step):
        batch = group + rng.sample(group, int(len(group) * REPUBLISHED))
        rng.shuffle(batch)
        sends += batch
    config = goal_config(nats_url, event_type)
    args = ("--workers", str(workers))
    with ExitStack() as stack:
        first = stack.enter_context(aviso_serving(directory / "a", config, *args))
        second = stack.enter_context(aviso_serving(directory / "b", config, *args))
        urls = [first.url, second.url]
        for number, body in enumerate(sends):
            if number == len(sends) // 2:
                first.kill()
            _send(urls if number % 2 == 0 else urls[::-1], body)
        for n in range(GOAL_MEMBERS):
            identifier = {"run": "sentinel", "step": "0", "member": str(n)}
            _send([second.url], {"event_type": event_type, "identifier": identifier})
        deadline = time.monotonic() + WAIT
        while True:
            events = completion_events(second.url, event_type)
            short = completion_events(second.url, f"{event_type}s")
            runs = [event["data"]["identifier"]["run"] for event in events]
            if "sentinel" in runs and short:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(events)} completion events after {WAIT} s")
            time.sleep(0.5)
    groups: dict[tuple[str, str, str, str], int] = {}
    delays = []
    missing = None
    labelled = [("long", event) for event in events] + [("short", event) for event in short]
    for label, event in labelled:
        identifier = event["data"]["identifier"]
        key = (label, identifier["run"], identifier["step"], identifier["status"])
        groups[key] = groups.get(key, 0) + 1
        payload = event["data"]["payload"]
        if identifier["status"] == "incomplete":
            missing = payload["missing"]
        elif label == "long" and identifier["run"] == "r1":
            delays.append(_parse_time(event["time"]) - _parse_time(payload["last"]["time"]))
    complete = sorted(
        int(step)
        for label, run, step, status in groups
        if label == "long" and run == "r1" and status == "complete"
    )
    return {
        "complete": len(complete),
        "complete_steps": complete,
        "incomplete": sum(1 for (*_, status) in groups if status == "incomplete"),
        "incomplete_missing": missing,
        "duplicated": sum(count - 1 for count in groups.values()),
        "delay_p50_s": statistics.median(delays) if delays else None,
        "delay_p99_s": percentile(delays, 0.99) if delays else None,
        "sent": len(sends),
    }


def goal_main(workers: int) -> dict[str, Any]:
    from tests.support.nats import nats_server

    with TemporaryDirectory() as folder, nats_server(Path(folder) / "nats") as nats:
        for name in ("a", "b"):
            (Path(folder) / name).mkdir()
        found = goal(Path(folder), nats.url, workers)
    print(
        f"{found['sent']} notifications through 2 instances x {workers} workers, one killed: "
        f"{found['complete']} complete, {found['incomplete']} incomplete (missing "
        f"{found['incomplete_missing']}), {found['duplicated']} duplicated; delay after the "
        f"last member p50 {found['delay_p50_s']:.3f} s, p99 {found['delay_p99_s']:.3f} s",
        flush=True,
    )
    path = write_results(f"completion_goal_workers{workers}", [found], {})
    print(f"raw results: {path}")
    print(json.dumps(found))
    return found


if __name__ == "__main__":
    main()
