"""Webhook push at scale on one server: 100 subscriptions, each with an endpoint of its own
on a real receiver on 127.0.0.1, and 100 notifications matching all of them.

97 endpoints fail some first and second attempts (503s, 500s, connections closed without an
answer); one answers 410 Gone; one hangs until the test releases it. Every healthy endpoint
gets every notification, in sequence order, each attempt signed as the Standard Webhooks
specification says (checked with the ``standardwebhooks`` package), each retry no earlier
than its schedule; the 410 endpoint's subscription is disabled after one request; and the
hanging endpoint holds up none of the others: they all finish while it still hangs.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from standardwebhooks import Webhook as Verifier

from aviso_plugins.testing import AvisoClient, serve
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.loopback import Handler
from tests.support.loopback import serve as serve_loopback

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]

SUBSCRIPTIONS = "/api/v1/subscriptions"
ENDPOINTS = 100
NOTIFICATIONS = 100
GONE = ENDPOINTS - 2
"""The endpoint that answers 410 Gone."""
HANGING = ENDPOINTS - 1
"""The endpoint that never answers until the test releases it."""
SCHEDULE = [1, 2]
"""Three attempts: the first, one after 1 s, one 2 s after that."""
WAIT = 120.0
"""Seconds the test waits for the deliveries (a bound, never a margin)."""
HANG = 3 * WAIT
"""Bound on the hanging endpoint's hold: past the test's own timeout, so that it is still
hanging when the test looks however long a loaded machine took (the test releases it)."""
EARLY = 0.01
"""How early a timer may fire (the event loop counts whole milliseconds)."""
CONFIG = with_changes(
    API_EXAMPLE,
    watch_endpoint={"replay_batch_delay_ms": 0},
    subscriptions={
        "max_per_user": ENDPOINTS,
        "webhook": {
            "allow_private_networks": True,
            "retry_schedule_seconds": SCHEDULE,
            "timeout_seconds": 300,
        },
    },
)
CLOSE = 0
"""A scripted answer: the connection closed without a response."""


def failures(endpoint: int, level: int) -> list[int]:
    """The answers before the 200 that endpoint ``endpoint`` gives notification ``level``."""
    if (endpoint + level) % 25 == 3:
        return [CLOSE, 500]
    if (endpoint + level) % 10 == 0:
        return [503]
    return []


class Receiver:
    """Records every attempt (arrival time, headers, body) per endpoint."""

    def __init__(self) -> None:
        self.attempts: dict[int, list[tuple[float, dict[str, str], bytes]]] = defaultdict(list)
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.hanging = threading.Event()
        self.healthy_done = threading.Event()
        self.delivered: dict[int, int] = defaultdict(int)
        self.url = ""


class ScaleHandler(Handler):
    def do_POST(self) -> None:
        receiver: Receiver = self.server.owner  # type: ignore[attr-defined]
        arrived = time.monotonic()
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = {name.lower(): value for name, value in self.headers.items()}
        endpoint = int(self.path.rsplit("/", 1)[1])
        with receiver.lock:
            attempts = receiver.attempts[endpoint]
            attempts.append((arrived, headers, body))
            earlier = sum(1 for _, h, _ in attempts if h["webhook-id"] == headers["webhook-id"])
        if endpoint == HANGING:
            receiver.hanging.set()
            receiver.release.wait(HANG)
            self.reply(200)
            return
        if endpoint == GONE:
            self.reply(410)
            return
        level = json.loads(body)["data"]["payload"]["level"]
        script = failures(endpoint, level)
        if earlier <= len(script):
            status = script[earlier - 1]
            if status == CLOSE:
                self.close_connection = True
                return
            self.reply(status)
            return
        self.reply(200)
        with receiver.lock:
            receiver.delivered[endpoint] += 1
            if sum(receiver.delivered.values()) == (ENDPOINTS - 2) * NOTIFICATIONS:
                receiver.healthy_done.set()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    owner = Receiver()
    with serve_loopback(ScaleHandler, owner) as url:
        owner.url = url
        try:
            yield owner
        finally:
            owner.release.set()


def _state(aviso: AvisoClient, name: str) -> dict[str, Any]:
    state: dict[str, Any] = aviso.get(f"{SUBSCRIPTIONS}/{name}").json()
    return state


def _state_when(aviso: AvisoClient, name: str, delivered: int) -> dict[str, Any]:
    """The state once ``delivered`` notifications are counted (the receiver counts its 200
    before the server has read it), read again until ``WAIT`` seconds have passed."""
    deadline = time.monotonic() + WAIT
    while True:
        state = _state(aviso, name)
        if state["deliveries"]["delivered"] == delivered or time.monotonic() > deadline:
            assert state["deliveries"]["delivered"] == delivered, state
            return state
        time.sleep(0.01)


def test_a_hundred_endpoints_get_a_hundred_notifications_each(receiver: Receiver) -> None:
    with serve(CONFIG) as aviso:
        secrets = {}
        for endpoint in range(ENDPOINTS):
            body = {
                "event_type": "river_gauge",
                "identifier": {"basin": "rhine"},
                "delivery": {"kind": "webhook", "url": f"{receiver.url}/e/{endpoint}"},
            }
            created = aviso.put(f"{SUBSCRIPTIONS}/s{endpoint}", json=body)
            assert created.status_code == 201, created.text
            secrets[endpoint] = created.json()["delivery"]["secret"]
        for level in range(NOTIFICATIONS):
            identifier = {"basin": "rhine", "date": "20260402", "level": level % 11}
            response = aviso.notify("river_gauge", identifier, {"level": level})
            assert response.status_code == 200, response.text

        assert receiver.healthy_done.wait(WAIT), dict(receiver.delivered)
        assert receiver.hanging.is_set()
        # Every other endpoint finished while the hanging one still held its first request.
        assert len(receiver.attempts[HANGING]) == 1
        assert _state(aviso, f"s{HANGING}")["deliveries"]["delivered"] == 0

        for endpoint in range(ENDPOINTS - 2):
            levels = []
            arrivals: dict[int, list[float]] = defaultdict(list)
            for arrived, headers, body in receiver.attempts[endpoint]:
                Verifier(secrets[endpoint]).verify(body, headers)
                assert headers["content-type"] == "application/cloudevents+json"
                level = json.loads(body)["data"]["payload"]["level"]
                assert headers["webhook-id"] == f"river_gauge@{json.loads(body)['sequence']}"
                levels.append(level)
                arrivals[level].append(arrived)
            # In sequence order, each notification tried until its 200 and never again.
            in_turn = [level for i, level in enumerate(levels) if i == 0 or levels[i - 1] != level]
            assert in_turn == list(range(NOTIFICATIONS)), endpoint
            for level, times in arrivals.items():
                assert len(times) == len(failures(endpoint, level)) + 1, (endpoint, level)
                for retry, delay in enumerate(SCHEDULE[: len(times) - 1], start=1):
                    waited = times[retry] - times[retry - 1]
                    assert waited >= delay - EARLY, (endpoint, level, retry, waited)

        gone = _state(aviso, f"s{GONE}")["deliveries"]
        assert gone["status"] == "disabled"
        assert len(receiver.attempts[GONE]) == 1

        assert len(aviso.get(SUBSCRIPTIONS).json()["subscriptions"]) == ENDPOINTS
        for endpoint in range(ENDPOINTS - 2):
            state = _state_when(aviso, f"s{endpoint}", NOTIFICATIONS)
            assert state["deliveries"]["dead_lettered"] == 0
            assert state["pending"] == 0
        receiver.release.set()
