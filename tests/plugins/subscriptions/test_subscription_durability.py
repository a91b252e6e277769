"""Subscriptions survive what kills processes: ``aviso-server serve --workers 2`` on a real
nats-server (and on a 3-node JetStream cluster), every worker killed with SIGKILL, a NATS
leader killed, a webhook-delivering worker killed mid-delivery.

A pulled subscription's consumer acknowledges 400 of 1,000 matching notifications and goes
away; after the kills it reconnects by name (through the supervisor's port: whichever worker
answers) and gets exactly notifications 401 to 1,000. A webhook receiver on 127.0.0.1 that
answers slowly is being delivered to when its delivering worker is killed: every notification
arrives, and only the one in flight (received, its 2xx never recorded) arrives twice.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.host.backends.jetstream_support import (
    Aviso,
    aviso_serving,
    document,
    notify_ok,
    poll,
    unique,
    with_jetstream,
)
from tests.host.test_workers import all_listening, workers_of
from tests.support.nats import NatsCluster, NatsServer, nats_cluster, nats_server

pytestmark = pytest.mark.heavy

SUBSCRIPTIONS = "/api/v1/subscriptions"
EVERYTHING = {"n": "*"}
TOTAL = 1_000
ACKNOWLEDGED = 400
START_TIMEOUT = 60.0
TAKEOVER_TIMEOUT = 60.0
"""A dead holder's lease expires (6 s) and the next attempt takes it (every 2 s): a bound
well above that for a loaded machine."""
ID_LINE = re.compile(r"^id: (\d+)$", re.MULTILINE)
STREAM_TIMEOUT = httpx.Timeout(30.0, read=30.0)


def config(nats_url: str, **jetstream: Any) -> dict[str, Any]:
    content = document(nats_url, jetstream={"max_reconnect_attempts": 0, **jetstream})
    content["subscriptions"] = {
        "webhook": {"allow_private_networks": True, "retry_schedule_seconds": [1, 1, 1, 1]}
    }
    return content


def workers_up(server: Aviso) -> None:
    poll(lambda: all_listening(server, 2), START_TIMEOUT, "both workers listening")


def kill_every_worker(server: Aviso) -> None:
    victims = workers_of(server)
    assert len(victims) == 2
    for worker in victims:
        worker.kill()
    for worker in victims:
        worker.wait(30)
    poll(
        lambda: (
            (all_listening(server, 2) or [None])[0] is not None
            and not {w.pid for w in workers_of(server)} & {v.pid for v in victims}
        ),
        START_TIMEOUT,
        "two new workers listening",
    )


def pull(http: httpx.Client, name: str, count: int) -> list[tuple[int, int]]:
    """(sequence, n) of the next ``count`` notifications of the subscription's events."""
    found: list[tuple[int, int]] = []
    url = f"{SUBSCRIPTIONS}/{name}/events"
    # A client reconnects while the stream cannot be opened yet (a new NATS leader elected).
    deadline = time.monotonic() + TAKEOVER_TIMEOUT
    while True:
        with http.stream("GET", url, timeout=STREAM_TIMEOUT) as response:
            if response.status_code == 200:
                break
            refused = response.read()
        assert b"SSE_STREAM_INITIALIZATION_FAILED" in refused, refused
        assert time.monotonic() < deadline, refused
        time.sleep(0.5)
    with http.stream("GET", url, timeout=STREAM_TIMEOUT) as response:
        assert response.status_code == 200, response.read()
        buffer = ""
        for chunk in response.iter_text():
            buffer += chunk
            *frames, buffer = buffer.split("\n\n")
            for frame in frames:
                match = ID_LINE.search(frame)
                if match is None:
                    continue
                data = json.loads(frame.split("data: ", 1)[1])
                found.append((int(match.group(1)), int(data["data"]["identifier"]["n"])))
                if len(found) == count:
                    return found
    raise AssertionError(f"the stream ended after {len(found)} notifications")


def acknowledge_400_then_resume(server: Aviso, event_type: str, kill: Any) -> None:
    """Subscribe, notify 1,000, pull and acknowledge 400, run ``kill``, then reconnect and
    expect exactly 401-1,000 (and nothing pending after acknowledging them)."""
    name = unique("goal")
    with server.client() as http:
        body = {"event_type": event_type, "identifier": EVERYTHING}
        assert http.put(f"{SUBSCRIPTIONS}/{name}", json=body).status_code == 201
        for n in range(1, TOTAL + 1):
            notify_ok(http, event_type, {"n": n})
        first = pull(http, name, ACKNOWLEDGED)
        assert [n for _, n in first] == list(range(1, ACKNOWLEDGED + 1))
        ack = http.post(f"{SUBSCRIPTIONS}/{name}/ack", json={"sequence": first[-1][0]})
        assert ack.status_code == 200, ack.text
        assert ack.json()["pending"] == TOTAL - ACKNOWLEDGED
    kill()
    with httpx.Client(base_url=server.url, timeout=30.0) as http:
        state = poll(
            lambda: _state(http, name), TAKEOVER_TIMEOUT, "the subscription readable again"
        )
        assert state is not None and state["acknowledged_sequence"] == first[-1][0]
        rest = pull(http, name, TOTAL - ACKNOWLEDGED)
        assert [n for _, n in rest] == list(range(ACKNOWLEDGED + 1, TOTAL + 1))
        ack = http.post(f"{SUBSCRIPTIONS}/{name}/ack", json={"sequence": rest[-1][0]})
        assert ack.status_code == 200, ack.text
        assert ack.json()["pending"] == 0


def _state(http: httpx.Client, name: str) -> dict[str, Any] | None:
    try:
        response = http.get(f"{SUBSCRIPTIONS}/{name}")
    except httpx.TransportError:
        return None
    return response.json() if response.status_code == 200 else None


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    with nats_server(tmp_path / "nats") as server:
        yield server


def test_a_consumer_resumes_at_401_after_every_worker_is_killed(
    tmp_path: Path, nats: NatsServer
) -> None:
    event_type = unique("goal")
    with aviso_serving(tmp_path, config(nats.url), "--workers", "2") as server:
        workers_up(server)
        acknowledge_400_then_resume(server, event_type, lambda: kill_every_worker(server))


def kv_leader(cluster: NatsCluster) -> str:
    async def leader(js: Any) -> str:
        info = await js.stream_info("KV_aviso_subscriptions")
        return str(info.cluster.leader)

    return with_jetstream(cluster.nodes[0].url, leader)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    with nats_cluster(tmp_path / "nats", size=3) as running:
        yield running


def test_a_consumer_resumes_at_401_after_the_nats_leader_is_killed(
    tmp_path: Path, cluster: NatsCluster
) -> None:
    event_type = unique("goal")
    content = config(cluster.url, replicas=3)
    with aviso_serving(tmp_path, content, "--workers", "2") as server:
        workers_up(server)

        def kill_the_leader() -> None:
            cluster.node(kv_leader(cluster)).stop(kill=True)

        acknowledge_400_then_resume(server, event_type, kill_the_leader)


class Receiver(ThreadingHTTPServer):
    """Records each webhook's ``webhook-id`` and the client port it came from, answering
    200 after a short pause (so that a delivery is in flight most of the time), and the
    client ports whose connections have ended."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[tuple[str, int]] = []
        self.closed: set[int] = set()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver
    protocol_version = "HTTP/1.1"  # kept alive: the delivering worker holds the connection

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        with self.server.lock:
            self.server.received.append((self.headers["webhook-id"], self.client_address[1]))
        time.sleep(0.05)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.lock:
                self.server.closed.add(self.client_address[1])

    def log_message(self, format: str, *args: Any) -> None:
        pass


def ports_towards(worker: psutil.Process, port: int) -> set[int]:
    """The local ports of the worker's connections to a loopback server on ``port``."""
    return {
        connection.laddr.port
        for connection in worker.net_connections(kind="tcp")
        if connection.laddr and connection.raddr and connection.raddr.port == port
    }


def worker_connected_from(server: Aviso, port: int) -> psutil.Process | None:
    for worker in workers_of(server):
        try:
            connections = worker.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        if any(connection.laddr and connection.laddr.port == port for connection in connections):
            return worker
    return None


def test_killing_the_delivering_worker_loses_nothing_and_repeats_only_what_was_in_flight(
    tmp_path: Path, nats: NatsServer
) -> None:
    event_type = unique("hook")
    count = 200
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        with aviso_serving(tmp_path, config(nats.url), "--workers", "2") as server:
            workers_up(server)
            with server.client() as http:
                body = {
                    "event_type": event_type,
                    "identifier": EVERYTHING,
                    "delivery": {"kind": "webhook", "url": receiver.url},
                }
                created = http.put(f"{SUBSCRIPTIONS}/{unique('hook')}", json=body)
                assert created.status_code == 201, created.text
                for n in range(1, count + 1):
                    notify_ok(http, event_type, {"n": n})
            poll(lambda: len(receiver.received) >= 50, 60, "50 webhooks received")
            with receiver.lock:
                _, port = receiver.received[-1]
            victim = worker_connected_from(server, port)
            assert victim is not None, "no worker holds the receiver's connection"
            victim_ports = ports_towards(victim, receiver.server_address[1])
            victim.kill()
            # What the victim had sent but not seen answered is only known once the receiver
            # has read each of its connections to the end: a request still in the socket
            # buffer at the kill is recorded after it.
            poll(
                lambda: victim_ports <= receiver.closed,
                60,
                "the killed worker's connections read to their end",
            )
            with receiver.lock:
                in_flight = {
                    [hook for hook, source in receiver.received if source == victim_port][-1]
                    for victim_port in victim_ports
                    if any(source == victim_port for _, source in receiver.received)
                }
            poll(
                lambda: len({hook for hook, _ in receiver.received}) >= count,
                TAKEOVER_TIMEOUT + 60,
                "every notification delivered",
            )
        ids = [hook for hook, _ in receiver.received]
        expected = {f"{event_type}@{sequence}" for sequence in range(1, count + 1)}
        assert set(ids) == expected
        repeated = {hook for hook in ids if ids.count(hook) > 1}
        assert repeated <= in_flight, (repeated, in_flight)
    finally:
        receiver.shutdown()
        receiver.server_close()
