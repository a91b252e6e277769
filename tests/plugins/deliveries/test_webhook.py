"""The built-in ``webhook`` delivery kind on a real server, pushing to a real receiver on
127.0.0.1 (``allow_private_networks`` set): signed as the Standard Webhooks specification
says (checked with the ``standardwebhooks`` package), retried on its schedule, dead-lettered
and redriven, disabled by a 410, a hanging receiver holding up no other subscription; and,
with the default configuration, every non-public address refused."""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from standardwebhooks import Webhook as Verifier

import aviso_builtins.deliveries.webhook as webhook_module
from aviso_builtins.deliveries.webhook import Webhook, refused_address
from aviso_plugins.testing import AvisoClient, serve
from aviso_plugins.types import (
    ConsumedNotification,
    DeliveryAttempt,
    DeliveryResult,
    StoredNotification,
)
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.loopback import Handler
from tests.support.loopback import serve as serve_loopback

SUBSCRIPTIONS = "/api/v1/subscriptions"
RHINE = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}}
BASE = with_changes(API_EXAMPLE, watch_endpoint={"replay_batch_delay_ms": 0})
CONFIG = with_changes(
    BASE,
    subscriptions={
        "webhook": {
            "allow_private_networks": True,
            "retry_schedule_seconds": [1, 1],
            "timeout_seconds": 5,
        }
    },
)
WAIT = 15.0
"""Seconds a test waits for a request it expects (a bound, never a margin)."""
HANG = 0
"""A scripted status that never answers (until the test ends)."""
ENDLESS = 1
"""A scripted answer: 200 announcing 100 MB, 64 KiB of it sent, the rest never."""


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """Answers each path's requests with its script in turn (the last status repeating)."""

    def __init__(self) -> None:
        self.requests: queue.Queue[Received] = queue.Queue()
        self.scripts: dict[str, list[int]] = {}
        self.release = threading.Event()
        self.url = ""

    def next(self, path: str | None = None) -> Received:
        """The next request (to ``path``, others passed over), within ``WAIT``."""
        for _ in range(100):
            received = self.requests.get(timeout=WAIT)
            if path is None or received.path == path:
                return received
        raise AssertionError(f"no request to {path}")


class ReceiverHandler(Handler):
    def do_POST(self) -> None:
        receiver: Receiver = self.server.owner  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers["Content-Length"]))
        script = receiver.scripts.setdefault(self.path, [200])
        status = script.pop(0) if len(script) > 1 else script[0]
        headers = {name.lower(): value for name, value in self.headers.items()}
        receiver.requests.put(Received(self.path, headers, body))
        if status == HANG:
            receiver.release.wait(60)
            status = 200
        if status == ENDLESS:
            self.send_response(200)
            self.send_header("Content-Length", str(100_000_000))
            self.end_headers()
            self.wfile.write(b" " * 65536)
            self.wfile.flush()
            receiver.release.wait(60)
            return
        self.reply(status, b'{"ok": true}')


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    owner = Receiver()
    with serve_loopback(ReceiverHandler, owner) as url:
        owner.url = url
        try:
            yield owner
        finally:
            owner.release.set()


@pytest.fixture
def aviso() -> Iterator[AvisoClient]:
    with serve(CONFIG) as client:
        yield client


def _subscribe(aviso: AvisoClient, name: str, url: str, **delivery: Any) -> dict[str, Any]:
    body = {**RHINE, "delivery": {"kind": "webhook", "url": url, **delivery}}
    response = aviso.put(f"{SUBSCRIPTIONS}/{name}", json=body)
    assert response.status_code == 201, response.text
    state: dict[str, Any] = response.json()
    return state


def _notify(aviso: AvisoClient, level: int) -> None:
    identifier = {"basin": "rhine", "date": "20260402", "level": level}
    response = aviso.notify("river_gauge", identifier, {"level": level})
    assert response.status_code == 200, response.text


def _state_when(aviso: AvisoClient, name: str, done: Any) -> dict[str, Any]:
    """The subscription's state once ``done(state)`` holds, read again until ``WAIT``
    seconds have passed (a state announces no change: it is polled)."""
    deadline = time.monotonic() + WAIT
    while True:
        state: dict[str, Any] = aviso.get(f"{SUBSCRIPTIONS}/{name}").json()
        if done(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} never reached the expected state: {state}")
        time.sleep(0.01)


def test_delivered_signed_with_the_cloudevent_a_watch_delivers(
    aviso: AvisoClient, receiver: Receiver
) -> None:
    created = _subscribe(aviso, "hook", f"{receiver.url}/hook")
    secret = created["delivery"]["secret"]
    assert secret.startswith("whsec_")
    assert created["delivery"]["url"] == f"{receiver.url}/hook"
    shown = aviso.get(f"{SUBSCRIPTIONS}/hook").json()["delivery"]
    assert shown == {"kind": "webhook", "url": f"{receiver.url}/hook"}
    assert secret not in aviso.get(SUBSCRIPTIONS).text
    _notify(aviso, 1)
    _notify(aviso, 2)
    first, second = receiver.next(), receiver.next()
    replayed = [e.data for e in aviso.replay("river_gauge", {"basin": "rhine"}).events]
    notifications = [event for event in replayed if "specversion" in event]
    for received, cloudevent in zip((first, second), notifications, strict=True):
        assert received.headers["content-type"] == "application/cloudevents+json"
        assert json.loads(received.body) == cloudevent
        assert received.headers["webhook-id"] == f"river_gauge@{cloudevent['sequence']}"
        Verifier(secret).verify(received.body, received.headers)
    state = _state_when(aviso, "hook", lambda s: s["deliveries"]["delivered"] == 2)
    assert state["acknowledged_sequence"] == notifications[-1]["sequence"]
    assert state["pending"] == 0 and state["deliveries"]["last_error"] is None
    samples = aviso.metrics_registry.get_sample_value(
        "aviso_webhook_deliveries_total", {"kind": "webhook", "outcome": "delivered"}
    )
    assert samples == 2


def test_a_given_secret_signs_and_is_never_shown(aviso: AvisoClient, receiver: Receiver) -> None:
    secret = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY="
    created = _subscribe(aviso, "given", f"{receiver.url}/given", secret=secret)
    assert created["delivery"] == {"kind": "webhook", "url": f"{receiver.url}/given"}
    _notify(aviso, 1)
    received = receiver.next()
    Verifier(secret).verify(received.body, received.headers)
    for bad in ("whsec_short", "nope_" + "A" * 40, "whsec_" + "A" * 120):
        body = {**RHINE, "delivery": {"kind": "webhook", "url": receiver.url, "secret": bad}}
        refused = aviso.put(f"{SUBSCRIPTIONS}/bad", json=body)
        assert refused.status_code == 400 and bad not in refused.text


def test_retried_on_the_schedule_then_delivered(aviso: AvisoClient, receiver: Receiver) -> None:
    receiver.scripts["/flaky"] = [500, 503, 200]
    _subscribe(aviso, "flaky", f"{receiver.url}/flaky")
    _notify(aviso, 1)
    attempts = [receiver.next() for _ in range(3)]
    assert len({attempt.headers["webhook-id"] for attempt in attempts}) == 1
    assert len({attempt.body for attempt in attempts}) == 1
    state = _state_when(aviso, "flaky", lambda s: s["deliveries"]["delivered"] == 1)
    assert state["deliveries"]["dead_lettered"] == 0
    assert state["deliveries"]["last_error"]["error"] == "the receiver answered 503"
    assert state["deliveries"]["last_error"]["attempt"] == 2


def test_dead_lettered_after_the_last_attempt_then_redriven(
    aviso: AvisoClient, receiver: Receiver
) -> None:
    receiver.scripts["/dead"] = [302]
    _subscribe(aviso, "dead", f"{receiver.url}/dead")
    _notify(aviso, 1)
    attempts = [receiver.next() for _ in range(3)]
    state = _state_when(aviso, "dead", lambda s: s["deliveries"]["dead_lettered"] == 1)
    assert state["deliveries"]["last_error"]["error"] == "the receiver answered 302 (not followed)"
    assert state["deliveries"]["retrying"] == 0
    assert state["pending"] == 0  # the cursor moved past it
    letters = aviso.get(f"{SUBSCRIPTIONS}/dead/dead-letters").json()["dead_letters"]
    sequence = int(attempts[0].headers["webhook-id"].split("@")[1])
    assert [(letter["sequence"], letter["attempts"]) for letter in letters] == [(sequence, 3)]
    receiver.scripts["/dead"] = [200]
    redriven = aviso.post(f"{SUBSCRIPTIONS}/dead/dead-letters/redrive")
    assert redriven.json()["redriven"] == 1
    again = receiver.next()
    assert again.headers["webhook-id"] == attempts[0].headers["webhook-id"]
    assert again.body == attempts[0].body
    _state_when(aviso, "dead", lambda s: s["deliveries"]["delivered"] == 1)
    assert aviso.get(f"{SUBSCRIPTIONS}/dead/dead-letters").json()["dead_letters"] == []


def test_410_disables_the_subscription(aviso: AvisoClient, receiver: Receiver) -> None:
    receiver.scripts["/gone"] = [410]
    _subscribe(aviso, "gone", f"{receiver.url}/gone")
    _notify(aviso, 1)
    receiver.next()
    state = _state_when(aviso, "gone", lambda s: s["deliveries"]["status"] == "disabled")
    assert state["deliveries"]["last_error"]["error"] == "the receiver answered 410 Gone"
    assert state["acknowledged_sequence"] is None and state["pending"] == 1
    # Nothing more is sent to it: the next request the receiver sees is another's.
    _notify(aviso, 2)
    _subscribe(aviso, "after", f"{receiver.url}/after")
    _notify(aviso, 3)
    assert receiver.next().path == "/after"


def test_caught_up_subscriptions_sharing_a_feed_are_each_woken_by_every_notification(
    aviso: AvisoClient, receiver: Receiver
) -> None:
    # Each notification is sent once both have delivered the one before, so caught up:
    # the next wakes them through the live feed they share, whether or not their delivery
    # has ended meanwhile.
    _subscribe(aviso, "first", f"{receiver.url}/first")
    _subscribe(aviso, "second", f"{receiver.url}/second")
    for level in range(1, 6):
        _notify(aviso, level)
        received = sorted((receiver.next(), receiver.next()), key=lambda r: r.path)
        assert [r.path for r in received] == ["/first", "/second"]  # in either order
        for request in received:
            assert json.loads(request.body)["data"]["payload"]["level"] == level
        for name in ("first", "second"):
            _state_when(aviso, name, lambda s, n=level: s["deliveries"]["delivered"] == n)
    assert receiver.requests.empty()


def test_a_hanging_receiver_does_not_delay_another_subscription(
    aviso: AvisoClient, receiver: Receiver
) -> None:
    receiver.scripts["/hang"] = [HANG]
    _subscribe(aviso, "hangs", f"{receiver.url}/hang")
    _notify(aviso, 1)
    assert receiver.next().path == "/hang"
    _subscribe(aviso, "healthy", f"{receiver.url}/healthy")
    for level in (2, 3, 4):
        _notify(aviso, level)
    healthy = [receiver.next("/healthy") for _ in range(3)]
    assert [json.loads(r.body)["data"]["payload"]["level"] for r in healthy] == [2, 3, 4]
    assert aviso.get(f"{SUBSCRIPTIONS}/hangs").json()["deliveries"]["delivered"] == 0


def test_timeouts_and_refused_connections_are_retried_and_answers_read_to_a_bound(
    receiver: Receiver,
) -> None:
    quick = {"allow_private_networks": True, "retry_schedule_seconds": [1], "timeout_seconds": 1}
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{unused.getsockname()[1]}/"  # bound, never listening
        with serve(with_changes(BASE, subscriptions={"webhook": quick})) as aviso:
            receiver.scripts["/slow"] = [HANG]
            receiver.scripts["/endless"] = [ENDLESS]
            _subscribe(aviso, "slow", f"{receiver.url}/slow")
            _subscribe(aviso, "closed", closed)
            _subscribe(aviso, "endless", f"{receiver.url}/endless")
            _notify(aviso, 1)
            # Each attempt on its own: two to the hanging receiver, one to the endless one.
            paths = sorted(receiver.next().path for _ in range(3))
            assert paths == ["/endless", "/slow", "/slow"]
            slow = _state_when(aviso, "slow", lambda s: s["deliveries"]["dead_lettered"] == 1)
            assert slow["deliveries"]["last_error"]["error"] == "no answer within 1 s"
            gone = _state_when(aviso, "closed", lambda s: s["deliveries"]["dead_lettered"] == 1)
            assert gone["deliveries"]["last_error"]["error"] == "the request failed (ConnectError)"
            assert gone["deliveries"]["last_error"]["attempt"] == 2
            endless = _state_when(aviso, "endless", lambda s: s["deliveries"]["delivered"] == 1)
            assert endless["deliveries"]["last_error"] is None


NON_PUBLIC = [
    "http://127.0.0.1:9/x",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.1.2.3/",
    "http://[::1]:8080/",
    "http://0.0.0.0/",
    "http://localhost:9/",
    "https://192.168.1.1/",
    "http://[::ffff:127.0.0.1]/",
]


def test_non_public_addresses_are_refused_by_default() -> None:
    with serve(BASE) as aviso:
        for url in NON_PUBLIC:
            body = {**RHINE, "delivery": {"kind": "webhook", "url": url}}
            response = aviso.put(f"{SUBSCRIPTIONS}/ssrf", json=body)
            assert response.status_code == 400, (url, response.text)
            refused = response.json()
            assert refused["code"] == "INVALID_SUBSCRIPTION_REQUEST"
            assert "non-public address" in refused["message"], refused
        for url in ("ftp://example.org/", "http://user:pw@example.org/", "/relative"):
            body = {**RHINE, "delivery": {"kind": "webhook", "url": url}}
            assert aviso.put(f"{SUBSCRIPTIONS}/ssrf", json=body).status_code == 400
        assert aviso.get(SUBSCRIPTIONS).json()["subscriptions"] == []


def test_allowed_hosts_exempts_a_named_host(receiver: Receiver) -> None:
    config = with_changes(BASE, subscriptions={"webhook": {"allowed_hosts": ["127.0.0.1"]}})
    with serve(config) as aviso:
        _subscribe(aviso, "allowed", f"{receiver.url}/allowed")
        body = {**RHINE, "delivery": {"kind": "webhook", "url": "http://localhost:9/"}}
        assert aviso.put(f"{SUBSCRIPTIONS}/other", json=body).status_code == 400
        _notify(aviso, 1)
        assert receiver.next().path == "/allowed"


def _deliver_directly(url: str) -> DeliveryResult:
    """One attempt of a ``webhook`` kind with the default address rules, outside a server."""
    options = {
        "timeout_seconds": 5,
        "retry_schedule_seconds": [],
        "allowed_hosts": [],
        "allow_private_networks": False,
    }
    record = StoredNotification(sequence=7, topic="gauge.rhine", payload="null", time_ns=0)
    notification = ConsumedNotification("river_gauge", record, b"{}", {}, None)
    delivery = {"kind": "webhook", "url": url, "secret": "whsec_" + "A" * 44}

    async def attempt() -> DeliveryResult:
        kind = Webhook(options)
        await kind.start()
        try:
            return await kind.deliver(DeliveryAttempt("s", None, delivery, notification, 1))
        finally:
            await kind.close()

    return asyncio.run(attempt())


def test_every_attempt_checks_the_address_again(receiver: Receiver) -> None:
    """A subscription accepted while its name resolved to a public address, delivered after
    it came to resolve to loopback, is refused at the attempt: nothing is sent."""
    result = _deliver_directly(f"{receiver.url}/rebound")
    assert result.outcome == "retry" and "non-public address" in (result.error or "")
    assert receiver.requests.empty()


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("127.0.0.1", True),
        ("169.254.169.254", True),
        ("10.0.0.1", True),
        ("172.16.0.1", True),
        ("192.168.0.1", True),
        ("100.64.0.1", True),
        ("0.0.0.0", True),
        ("224.0.0.1", True),
        ("::1", True),
        ("::", True),
        ("fe80::1%1", True),
        ("fd00::1", True),
        ("::ffff:127.0.0.1", True),
        ("::ffff:10.0.0.1", True),
        ("8.8.8.8", False),
        ("2001:4860:4860::8888", False),
        ("::ffff:8.8.8.8", False),
    ],
)
def test_address_rule(address: str, refused: bool) -> None:
    assert refused_address(address) is refused


def test_an_attempt_connects_to_the_address_it_checked(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name is resolved once per attempt and the connection made to that address, the
    name kept in ``Host`` (loopback counted as public here, the only address a test has)."""
    monkeypatch.setattr(webhook_module, "refused_address", lambda address: False)
    url = receiver.url.replace("127.0.0.1", "localhost") + "/pinned"
    assert _deliver_directly(url).outcome == "delivered"
    received = receiver.next()
    assert received.path == "/pinned"
    assert received.headers["host"] == url.removeprefix("http://").removesuffix("/pinned")
