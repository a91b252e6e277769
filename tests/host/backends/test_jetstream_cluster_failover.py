"""A JetStream cluster loses the node leading a stream during a burst.

Three ``nats-server -js`` processes routed into one cluster on loopback; two
``aviso-server serve`` processes, each given all three URLs in ``nats_url``; the stream has
``replicas: 3``. Its leader is moved to a node an aviso instance is connected to, then killed
with SIGKILL in the middle of 2,000 concurrent notifies spread over both instances.

The test's client behaves as a production client should: every notify carries a unique
``Idempotency-Key`` and a 5xx or a broken connection is retried with the same key, so a notify
that was stored but whose answer was lost is not stored a second time.

Asserted: every notify is eventually answered 200 without restarting aviso; every value is
stored exactly once (replay on both instances); the watches opened on both instances before
the burst receive every notification exactly once in sequence order. The failover figures
(time from the kill to the first 200 of a notify sent after it, 5xx answers meanwhile) are
printed and recorded as test properties; docs/guarantees.md quotes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.js import JetStreamContext, api

from tests.host.backends.jetstream_support import (
    NOTIFY,
    Aviso,
    Watch,
    aviso_serving,
    document,
    poll,
    replay,
    unique,
    watching,
    with_jetstream,
)
from tests.support.nats import NatsCluster, nats_cluster

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

TOTAL = 2_000
CONCURRENCY = 32
"""Notifies in flight at any time, over both instances."""
POOL = httpx.Limits(max_connections=CONCURRENCY)
HTTP_TIMEOUT = httpx.Timeout(15.0)
KILL_AFTER = 600
"""Acknowledged notifies before the stream leader is killed: the middle of the burst."""
NOTIFY_DEADLINE = 40.0
"""How long the client keeps retrying one notify."""
RETRY_PAUSE = 0.05
PROBE_INTERVAL = 0.25
CLUSTER_TIMEOUT = 20.0
WATCH_TIMEOUT = 50.0
EVERYTHING = {"n": "*"}


@dataclass
class Attempt:
    started: float
    ended: float
    status: int
    """The HTTP status, or 0 when the connection broke before an answer."""


@dataclass
class Burst:
    """What the client saw of every notify."""

    attempts: dict[str, list[Attempt]] = field(default_factory=dict)
    acknowledged: int = 0
    failed: list[str] = field(default_factory=list)
    killed_at: float = 0.0
    probes: list[str] = field(default_factory=list)
    """Values notified after the kill to time the failover."""


async def notify_until_stored(
    client: httpx.AsyncClient, event_type: str, value: str
) -> list[Attempt]:
    """POST one notification, retrying a 5xx or a broken connection with the same key."""
    body = json.dumps({"event_type": event_type, "identifier": {"n": value}, "payload": value})
    attempts: list[Attempt] = []
    deadline = time.monotonic() + NOTIFY_DEADLINE
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            answer = await client.post(NOTIFY, content=body, headers={"Idempotency-Key": value})
            code = answer.status_code
        except httpx.TransportError:
            code = 0
        attempts.append(Attempt(started, time.monotonic(), code))
        if code == 200:
            return attempts
        assert code == 0 or code >= 500, (code, answer.text)
        await asyncio.sleep(RETRY_PAUSE)  # a client's back-off between retries
    return attempts


async def burst_with_a_kill(
    instances: list[Aviso], event_type: str, values: list[str], kill: Callable[[], None]
) -> Burst:
    """``values`` notified concurrently, alternately on each instance (one event loop: the
    watch readers of this process must keep up); ``kill`` runs once ``KILL_AFTER`` are
    acknowledged."""
    burst = Burst()
    enough = asyncio.Event()
    gate = asyncio.Semaphore(CONCURRENCY)
    clients = [
        httpx.AsyncClient(base_url=aviso.url, timeout=HTTP_TIMEOUT, limits=POOL)
        for aviso in instances
    ]

    async def one(index: int) -> None:
        async with gate:
            value = values[index]
            tries = await notify_until_stored(clients[index % len(clients)], event_type, value)
        burst.attempts[value] = tries
        if tries and tries[-1].status == 200:
            burst.acknowledged += 1
            if burst.acknowledged >= KILL_AFTER:
                enough.set()
        else:
            burst.failed.append(value)

    async def probe(value: str) -> None:
        tries = await notify_until_stored(
            clients[len(burst.probes) % len(clients)], event_type, value
        )
        burst.attempts[value] = tries
        if tries and tries[-1].status == 200:
            restored.set()
        else:
            burst.failed.append(value)

    async def killer() -> None:
        """Kill, then start a probe notify every ``PROBE_INTERVAL`` until one is answered
        200: the burst's own notifies may all be in flight, so they cannot tell when a
        notify sent after the kill is first stored again."""
        await asyncio.wait_for(enough.wait(), NOTIFY_DEADLINE)
        burst.killed_at = time.monotonic()
        await asyncio.to_thread(kill)
        probes = []
        deadline = time.monotonic() + NOTIFY_DEADLINE
        while not restored.is_set() and time.monotonic() < deadline:
            value = f"p{len(burst.probes):03d}"
            burst.probes.append(value)
            probes.append(asyncio.ensure_future(probe(value)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(restored.wait(), PROBE_INTERVAL)
        await asyncio.gather(*probes)

    restored = asyncio.Event()
    try:
        await asyncio.gather(killer(), *(one(index) for index in range(len(values))))
    finally:
        for client in clients:
            await client.aclose()
    return burst


def failover_figures(burst: Burst) -> dict[str, float]:
    """Seconds from the kill to the first 200 of a notify sent after it, and what the
    client saw meanwhile."""
    killed_at = burst.killed_at
    every_attempt = [attempt for tries in burst.attempts.values() for attempt in tries]
    after_kill = [attempt for attempt in every_attempt if attempt.ended >= killed_at]
    first_ok = min(
        attempt.ended
        for attempt in after_kill
        if attempt.status == 200 and attempt.started >= killed_at
    )
    refused = [attempt for attempt in after_kill if attempt.status != 200]
    return {
        "failover_seconds": round(first_ok - killed_at, 2),
        "5xx_after_kill": sum(1 for attempt in refused if attempt.status >= 500),
        "broken_connections_after_kill": sum(1 for attempt in refused if attempt.status == 0),
        "notifies_retried_by_the_client": sum(
            1 for tries in burst.attempts.values() if len(tries) > 1
        ),
        "longest_notify_seconds": round(max(a.ended - a.started for a in every_attempt), 2),
        "probes": len(burst.probes),
    }


def stream_cluster(cluster: NatsCluster, name: str) -> api.ClusterInfo | None:
    """The stream's cluster report, asked of any node that answers."""

    async def info(js: JetStreamContext) -> api.ClusterInfo | None:
        return (await js.stream_info(name)).cluster

    for node in cluster.nodes:
        if node.process is not None and node.process.poll() is None:
            try:
                return with_jetstream(node.url, info)
            except Exception:  # this node is down or has no answer yet: ask the next
                continue
    return None


def settled_leader(cluster: NatsCluster, name: str) -> str | None:
    """The stream leader once all three replicas are current, else ``None``."""
    report = stream_cluster(cluster, name)
    if report is None or not report.leader or report.replicas is None:
        return None
    if len(report.replicas) != 2 or not all(peer.current for peer in report.replicas):
        return None
    return report.leader


def move_leader(cluster: NatsCluster, name: str, target: str) -> None:
    """Ask the stream's leader to step down in favour of ``target`` (nats-server 2.11+)."""

    async def step_down(js: JetStreamContext) -> None:
        request = json.dumps({"placement": {"preferred": target}}).encode()
        await js._nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", request, timeout=5)

    for _ in range(5):
        if settled_leader(cluster, name) == target:
            return
        with_jetstream(cluster.node(target).url, step_down)
        poll(lambda: settled_leader(cluster, name), CLUSTER_TIMEOUT, "a settled stream leader")
    raise AssertionError(f"the leadership of {name} did not move to {target}")


def node_of_a_client(cluster: NatsCluster) -> str:
    """A node with a client connection (an aviso instance's)."""
    for node in cluster.nodes:
        if node.monitor("connz")["num_connections"] > 0:
            return node.name
    raise AssertionError("no node has a client")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    with nats_cluster(tmp_path / "nats", size=3) as running:
        yield running


class Reader:
    """Reads a watch on a thread from before the burst, so that the server never finds
    this client too slow; counts notifications as they come (the check comes after)."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.expected: int | None = None
        """Set once the burst is over: how many notifications to read in all."""
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        count = 0
        deadline = time.monotonic() + WATCH_TIMEOUT
        try:
            while self.expected is None or count < self.expected:
                assert time.monotonic() < deadline, f"{count} notifications by the deadline"
                event = self.watch.next()
                assert event is not None, "the watch ended"
                assert event.name != "error", event.data
                if event.name == "live-notification" and "id" in event.data:
                    count += 1
        except BaseException as exc:  # reported by notifications()
            self.error = exc

    def notifications(self, expected: int) -> list[dict[str, Any]]:
        self.expected = expected
        self._thread.join(WATCH_TIMEOUT + 5)
        assert not self._thread.is_alive(), "the watch reader did not finish"
        if self.error is not None:
            raise self.error
        return self.watch.notifications()


def _replay_once_settled(http: httpx.Client, event_type: str) -> list[dict[str, Any]]:
    """The whole history. Right after an election a replay may fail to resolve its bounds
    (the stream-info request waits for the new leader): it reports
    ``stream_processing_failed``, and a client reconnects, as this does (bounded)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return replay(http, event_type, EVERYTHING, timeout=60, read_timeout=30)
        except AssertionError as failure:
            if "stream_processing_failed" not in str(failure) or time.monotonic() > deadline:
                raise


def test_killing_the_stream_leader_mid_burst_loses_and_duplicates_nothing(
    cluster: NatsCluster, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    event_type = unique("failover")
    stream = event_type.upper()
    config = document(
        cluster.url,
        jetstream={"replicas": 3, "timeout_seconds": 5, "reconnect_delay_ms": 100},
    )
    with ExitStack() as stack:
        instances: list[Aviso] = [
            stack.enter_context(aviso_serving(tmp_path, config)) for _ in range(2)
        ]
        watches = [
            stack.enter_context(
                watching(stack.enter_context(aviso.client()), event_type, EVERYTHING)
            )
            for aviso in instances
        ]
        target = node_of_a_client(cluster)
        poll(lambda: settled_leader(cluster, stream), CLUSTER_TIMEOUT, "a settled stream leader")
        move_leader(cluster, stream, target)
        readers = [Reader(watch) for watch in watches]

        values = [f"v{index:04d}" for index in range(TOTAL)]
        burst = asyncio.run(
            burst_with_a_kill(
                instances, event_type, values, lambda: cluster.node(target).stop(kill=True)
            )
        )

        assert not burst.failed, f"{len(burst.failed)} notifies never answered 200"
        figures = failover_figures(burst)
        for name, figure in figures.items():
            record_property(name, figure)
        print(f"\nfailover figures: {figures}")

        acknowledged = [*values, *burst.probes]
        delivered = [reader.notifications(len(acknowledged)) for reader in readers]
        for aviso in instances:
            with aviso.client() as http:
                stored = _replay_once_settled(http, event_type)
            found = [event["data"]["identifier"]["n"] for event in stored]
            assert len(found) == len(acknowledged), (
                f"{len(found)} stored, {len(set(found))} distinct"
            )
            assert sorted(found) == sorted(acknowledged)  # every one exactly once
        sequence_ids = [event["id"] for event in stored]
        for events in delivered:  # each exactly once, in sequence order
            assert [event["id"] for event in events] == sequence_ids
