"""Where notify's CPU goes at the ASGI level, in process, layer by layer.

  python -m benchmarks.notify_layers [--requests N] [--rounds R] [--results-dir DIR]

aviso's app (``create_app`` on benchmarks.core's configuration, in-memory, started, the
garbage collector paced as ``aviso-server serve`` paces it) called with benchmarks.core's
notifications (past the topic cap, so every publish evicts a topic, as in
``benchmarks.notify_path``), whole and with one layer at a time swapped for a stand-in
that hands back what the layer would have (its result computed beforehand), so that each
layer is measured where it runs, among the others:

- ``parse``: reading and parsing the body (``read_request``);
- ``plan``: the checks and plan of the notification (``plan_checked_notification``);
- ``publish``: the in-memory backend's ``publish_from``;
- ``route``: the notify endpoint's own steps with all three swapped (the event-type gate,
  the policy check, metadata, the idempotency-key lookup, the writer, the counters, the
  answer), less ``edge``;
- ``edge``: the app with the notify endpoint swapped for one that reads the body and sends
  the success answer (Starlette's application call, aviso's edge with its request id, body
  limit, route dispatch, ``X-Request-ID`` stamping and log-line check, the answer's two
  messages), less ``harness``;
- ``harness``: that endpoint called alone (the benchmark's own scope, messages and
  ``send``).

Each layer's figure is the app's CPU per call less the app's with that layer swapped (the
stand-ins cost a call each, ~0.1 us, counted to no layer). CPU time of this process per call
(user + system); each round measures every variant in a rotated order; medians and spreads
over the rounds, written as JSON under ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from collections.abc import Iterator
from typing import Any

from benchmarks.notify_app import call
from benchmarks.results import (
    add_round_options,
    load_average,
    parse_rounds,
    rotated,
    spread,
    write_results,
)

VARIANTS = ("app", "no_parse", "no_plan", "no_publish", "no_steps", "edge", "harness")
ROUNDS = 5
REQUESTS = 20_000


async def measure(rounds: int, requests: int) -> dict[str, list[float]]:
    """CPU us per call of each variant, round by round."""
    import yaml

    from aviso_host.app import create_app
    from aviso_host.config import settings_from_document
    from aviso_host.errors import Endpoint, JsonAnswer
    from aviso_host.identifiers import plan_checked_notification
    from aviso_host.plugins import discover
    from aviso_host.requests import parse_body
    from aviso_host.streaming.collector import freeze_startup_objects, pace_garbage_collector
    from aviso_plugins.storage import StoredNotification
    from benchmarks.core import CONFIG, notification_body

    registry = discover()
    app = create_app(settings_from_document(yaml.safe_load(CONFIG), registry), registry)
    service = app.state.service
    await service.ensure_started()
    bodies = [json.dumps(notification_body("rps", n, {"n": n})).encode() for n in range(requests)]
    for body in bodies[: requests // 10]:  # warm-up: imports, caches, the allocator
        await call(app, body)
    pace_garbage_collector()
    freeze_startup_objects()
    # The module whose names the stand-ins replace, and the edge's direct route: both
    # reached past their types, as a benchmark swapping parts of the app in place must.
    notify_module: Any = importlib.import_module("aviso_host.routes.notify")
    edge: Any = app.middleware_stack
    route = edge.direct["/api/v1/notification"]
    endpoint = route.app
    answer = b'{"status":"success","request_id":"00000000-0000-4000-8000-000000000000"}'

    async def answering(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await JsonAnswer(answer)(scope, receive, send)

    limits = service.settings.limits
    parsed = [parse_body(body, Endpoint.NOTIFY) for body in bodies]
    planned = [
        plan_checked_notification(
            service.catalog.get(body.event_type),
            body.event_type,
            body.identifier,
            body.payload,
            limits.max_identifier_value_bytes,
            limits.max_topic_bytes,
            limits.max_payload_bytes,
        )
        for body in parsed
    ]
    stored = StoredNotification(1, planned[0].topic, planned[0].payload, 0, planned[0].metadata)
    real_read, real_plan = notify_module.read_request, notify_module.plan_checked_notification
    backend: Any = service.backend
    real_publish = backend.publish_from
    parsed_next: Iterator[Any] = iter(())
    planned_next: Iterator[Any] = iter(())

    async def read_stand_in(request: Any, endpoint: Endpoint) -> Any:
        await request.receive()
        return next(parsed_next)

    def plan_stand_in(*args: Any) -> Any:
        return next(planned_next)

    async def publish_stand_in(*args: Any) -> StoredNotification:
        return stored

    async def variant(name: str) -> None:
        nonlocal parsed_next, planned_next
        parsed_next, planned_next = iter(parsed), iter(planned)
        swapped = {
            "no_parse": ("parse",),
            "no_plan": ("plan",),
            "no_publish": ("publish",),
            "no_steps": ("parse", "plan", "publish"),
        }.get(name, ())
        if "parse" in swapped:
            notify_module.read_request = read_stand_in
        if "plan" in swapped:
            notify_module.plan_checked_notification = plan_stand_in
        if "publish" in swapped:
            backend.publish_from = publish_stand_in
        if name == "edge":
            route.app = answering
        target = answering if name == "harness" else app
        try:
            for body in bodies:
                await call(target, body)
        finally:
            notify_module.read_request = real_read
            notify_module.plan_checked_notification = real_plan
            backend.publish_from = real_publish
            route.app = endpoint

    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_number in range(rounds):
        for name in rotated(VARIANTS, round_number):
            start = time.process_time()
            await variant(name)
            cpu[name].append((time.process_time() - start) / requests * 1e6)
    return cpu


def layers(cpu: dict[str, list[float]]) -> dict[str, list[float]]:
    """Each layer's CPU per call, round by round, from the variants' (the module's doc)."""

    def less(mine: list[float], theirs: list[float]) -> list[float]:
        return [a - b for a, b in zip(mine, theirs, strict=True)]

    return {
        "app": cpu["app"],
        "harness": cpu["harness"],
        "edge": less(cpu["edge"], cpu["harness"]),
        "route": less(cpu["no_steps"], cpu["edge"]),
        "parse": less(cpu["app"], cpu["no_parse"]),
        "plan": less(cpu["app"], cpu["no_plan"]),
        "publish": less(cpu["app"], cpu["no_publish"]),
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=REQUESTS, help="calls per figure")
    add_round_options(parser, ROUNDS, "rotated")
    args = parse_rounds(parser, argv)
    import uvloop

    print(
        f"notify layer by layer, in process: {args.rounds} rotated rounds of {args.requests} "
        f"calls per layer; CPU us per call; load average {load_average()}",
        flush=True,
    )
    cpu = uvloop.run(measure(args.rounds, args.requests))
    cpu.update(layers(cpu))
    rounds = [
        {"round": number + 1, **{name: {"cpu_us_per_call": cpu[name][number]} for name in cpu}}
        for number in range(args.rounds)
    ]
    summary: dict[str, Any] = {"calls_per_figure": args.requests}
    for name, values in cpu.items():
        summary[f"{name}_cpu_us"] = spread(values)
    path = write_results("notify_layers", rounds, summary, args.results_dir)
    results = {name: summary[f"{name}_cpu_us"]["median"] for name in cpu}
    for name in ("app", "harness", "edge", "route", "parse", "plan", "publish"):
        figure = summary[f"{name}_cpu_us"]
        print(
            f"    {name:8} {figure['median']:6.2f} us (median; {figure['min']:.2f}-"
            f"{figure['max']:.2f})"
        )
    print(f"    load average at the end {load_average()}; rounds written to {path}")
    print(json.dumps({key: round(value, 3) for key, value in results.items()}))
    return results


if __name__ == "__main__":
    main()
