"""Push subscriptions on a real server, through a delivery kind of the test's own: accepted
through ``prepare``, a generated secret shown once, deliveries in sequence order from the
cursor, retries on the kind's schedule, dead letters and their redrive, ``gone`` disabling,
and one hanging receiver never holding up another subscription."""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pytest
from prometheus_client import generate_latest

from aviso_plugins import hookimpl
from aviso_plugins.testing import AvisoClient, serve
from aviso_plugins.types import (
    DeliveryAttempt,
    DeliveryKind,
    DeliveryResult,
    InvalidValue,
    PreparedDelivery,
)
from tests.support.configs import API_EXAMPLE, with_changes

SUBSCRIPTIONS = "/api/v1/subscriptions"
RHINE = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}}
CONFIG = with_changes(API_EXAMPLE, watch_endpoint={"replay_batch_delay_ms": 0})
WAIT = 10.0
METRIC = "aviso_webhook_deliveries_total"
"""Seconds a test waits for an attempt it expects (a bound, never a margin)."""


class Recorder(DeliveryKind):
    """Answers each attempt as the subscription's ``answers`` say, in turn (the last one
    repeating); ``hang`` never answers. Each attempt is reported on ``attempts``."""

    kind = "recorder"
    delivery_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "required": ["kind", "answers"],
        "additionalProperties": False,
        "properties": {
            "kind": {"const": "recorder"},
            "answers": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "token": {"type": "string"},
        },
    }
    attempts: ClassVar[queue.Queue[tuple[str, int, int]]] = queue.Queue()
    answers: ClassVar[dict[str, list[str]]] = {}
    """Subscription name -> the answers still to give (a test may replace them)."""

    @property
    def retry_delays(self) -> tuple[float, ...]:
        return (0.0, 0.0)

    async def prepare(self, delivery: Mapping[str, Any]) -> PreparedDelivery:
        if "refuse" in delivery["answers"]:
            raise InvalidValue("this recorder refuses to record")
        stored = {"token": "generated-token", **delivery}
        return PreparedDelivery(stored=stored, shown=stored)

    def public_view(self, stored: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"kind": "recorder", "answers": stored["answers"]}

    async def deliver(self, attempt: DeliveryAttempt) -> DeliveryResult:
        name = attempt.subscription
        answers = Recorder.answers.setdefault(name, list(attempt.delivery["answers"]))
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        Recorder.attempts.put((name, attempt.notification.record.sequence, attempt.attempt))
        if answer == "hang":
            await asyncio.Event().wait()
        if answer == "ok":
            return DeliveryResult("delivered")
        return DeliveryResult(answer, f"answered {answer}")


class RecorderPlugin:
    @hookimpl
    def aviso_delivery_kinds(self) -> list[type[DeliveryKind]]:
        return [Recorder]


NOTIFIED: list[int] = []


@pytest.fixture
def aviso() -> Iterator[AvisoClient]:
    NOTIFIED.clear()
    Recorder.answers.clear()
    while not Recorder.attempts.empty():
        Recorder.attempts.get_nowait()
    with serve(CONFIG, plugins=[RecorderPlugin()]) as client:
        yield client


def _notify(aviso: AvisoClient, level: int, basin: str = "rhine") -> int:
    """Notify; return its sequence (the stream's count of notifications, each test's server
    being fresh)."""
    identifier = {"basin": basin, "date": "20260402", "level": level}
    response = aviso.notify("river_gauge", identifier, {"level": level})
    assert response.status_code == 200, response.text
    NOTIFIED.append(level)
    return len(NOTIFIED)


def _subscribe(aviso: AvisoClient, name: str, answers: list[str]) -> dict[str, Any]:
    body = {**RHINE, "delivery": {"kind": "recorder", "answers": answers}}
    response = aviso.put(f"{SUBSCRIPTIONS}/{name}", json=body)
    assert response.status_code == 201, response.text
    state: dict[str, Any] = response.json()
    return state


def _attempts(count: int) -> list[tuple[str, int, int]]:
    return [Recorder.attempts.get(timeout=WAIT) for _ in range(count)]


def _state(aviso: AvisoClient, name: str) -> dict[str, Any]:
    response = aviso.get(f"{SUBSCRIPTIONS}/{name}")
    assert response.status_code == 200, response.text
    state: dict[str, Any] = response.json()
    return state


def _state_when(aviso: AvisoClient, name: str, done: Any) -> dict[str, Any]:
    """The state once ``done(state)`` holds, read again until ``WAIT`` seconds have passed
    (a state announces no change: it is polled)."""
    deadline = time.monotonic() + WAIT
    while True:
        state = _state(aviso, name)
        if done(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} never reached the expected state: {state}")
        time.sleep(0.01)


def _settled(aviso: AvisoClient, name: str, sequence: int) -> dict[str, Any]:
    """The state once the cursor reached ``sequence``."""
    return _state_when(aviso, name, lambda s: (s["acknowledged_sequence"] or 0) >= sequence)


def _disabled(aviso: AvisoClient, name: str) -> dict[str, Any]:
    return _state_when(aviso, name, lambda s: s["deliveries"]["status"] == "disabled")


def test_a_push_subscription_is_delivered_in_order_and_its_secret_shown_once(
    aviso: AvisoClient,
) -> None:
    for outcome in ("delivered", "retry", "gone", "dead_lettered"):
        labels = {"kind": "recorder", "outcome": outcome}
        assert aviso.metrics_registry.get_sample_value(METRIC, labels) == 0
    created = _subscribe(aviso, "push", ["ok"])
    shown = {"kind": "recorder", "answers": ["ok"], "token": "generated-token"}
    assert created["delivery"] == shown
    assert created["deliveries"] == {
        "status": "active",
        "delivered": 0,
        "retrying": 0,
        "dead_lettered": 0,
        "last_error": None,
    }
    again = aviso.put(
        f"{SUBSCRIPTIONS}/push", json={**RHINE, "delivery": {"kind": "recorder", "answers": ["ok"]}}
    )
    assert again.status_code == 200 and "token" not in again.json()["delivery"]
    _notify(aviso, 1, basin="elbe")  # not matched: never attempted
    sequences = [_notify(aviso, level) for level in (2, 3, 4)]
    assert _attempts(3) == [("push", sequence, 1) for sequence in sequences]
    state = _settled(aviso, "push", sequences[-1])
    assert state["delivery"] == {"kind": "recorder", "answers": ["ok"]}
    assert state["deliveries"]["delivered"] == 3 and state["pending"] == 0
    listed = aviso.get(SUBSCRIPTIONS).json()["subscriptions"]
    assert listed[0]["delivery"] == {"kind": "recorder", "answers": ["ok"]}
    assert "generated-token" not in aviso.get(SUBSCRIPTIONS).text
    delivered = aviso.metrics_registry.get_sample_value(
        METRIC, {"kind": "recorder", "outcome": "delivered"}
    )
    assert delivered == 3
    latency = aviso.metrics_registry.get_sample_value(
        "aviso_webhook_delivery_latency_seconds_count", {"kind": "recorder"}
    )
    assert latency == 3


def test_retries_then_a_dead_letter_then_its_redrive(aviso: AvisoClient) -> None:
    _subscribe(aviso, "flaky", ["retry", "ok"])
    first = _notify(aviso, 1)
    assert _attempts(2) == [("flaky", first, 1), ("flaky", first, 2)]
    Recorder.answers["flaky"] = ["retry"]
    second = _notify(aviso, 2)
    third = _notify(aviso, 3)
    # Three attempts each (the schedule's two delays), in sequence order.
    assert _attempts(6) == [("flaky", seq, n) for seq in (second, third) for n in (1, 2, 3)]
    state = _settled(aviso, "flaky", third)
    assert state["deliveries"]["delivered"] == 1
    assert state["deliveries"]["dead_lettered"] == 2
    assert state["deliveries"]["retrying"] == 0
    assert state["deliveries"]["last_error"]["error"] == "answered retry"
    assert state["deliveries"]["last_error"]["sequence"] == third
    letters = aviso.get(f"{SUBSCRIPTIONS}/flaky/dead-letters").json()
    assert [(d["sequence"], d["attempts"]) for d in letters["dead_letters"]] == [
        (second, 3),
        (third, 3),
    ]
    assert letters["dropped"] == 0
    Recorder.answers["flaky"] = ["ok"]
    redriven = aviso.post(f"{SUBSCRIPTIONS}/flaky/dead-letters/redrive")
    assert redriven.status_code == 200 and redriven.json()["redriven"] == 2
    assert _attempts(2) == [("flaky", second, 1), ("flaky", third, 1)]
    assert aviso.get(f"{SUBSCRIPTIONS}/flaky/dead-letters").json()["dead_letters"] == []
    fourth = _notify(aviso, 4)
    assert _attempts(1) == [("flaky", fourth, 1)]
    assert _settled(aviso, "flaky", fourth)["deliveries"]["delivered"] == 4


def test_gone_disables_the_subscription(aviso: AvisoClient) -> None:
    _subscribe(aviso, "gone", ["gone"])
    first = _notify(aviso, 1)
    assert _attempts(1) == [("gone", first, 1)]
    state = _disabled(aviso, "gone")
    assert state["deliveries"]["last_error"]["error"] == "answered gone"
    assert state["acknowledged_sequence"] is None and state["pending"] == 1
    # A later notification is never attempted: the next attempt seen is another's.
    _notify(aviso, 2)
    _subscribe(aviso, "after", ["ok"])
    third = _notify(aviso, 3)
    assert _attempts(1) == [("after", third, 1)]


def test_a_hanging_receiver_does_not_hold_up_another_subscription(aviso: AvisoClient) -> None:
    _subscribe(aviso, "hangs", ["hang"])
    first = _notify(aviso, 1)
    assert _attempts(1) == [("hangs", first, 1)]
    _subscribe(aviso, "healthy", ["ok"])
    later = [_notify(aviso, level) for level in (2, 3, 4)]
    assert _attempts(3) == [("healthy", sequence, 1) for sequence in later]
    assert _state(aviso, "hangs")["acknowledged_sequence"] is None
    assert aviso.delete(f"{SUBSCRIPTIONS}/hangs").status_code == 204


def test_deliveries_that_cannot_be_accepted(aviso: AvisoClient) -> None:
    url = f"{SUBSCRIPTIONS}/x"
    for delivery in ("webhook", {"kind": "telegraph"}, {"answers": ["ok"]}):
        response = aviso.put(url, json={**RHINE, "delivery": delivery})
        assert response.status_code == 400, response.text
        assert response.json()["code"] == "UNSUPPORTED_DELIVERY"
        assert "'recorder'" in response.json()["message"]
    bad = {"kind": "recorder", "answers": [], "token": "s3cr3t"}
    response = aviso.put(url, json={**RHINE, "delivery": bad})
    assert response.status_code == 400 and "s3cr3t" not in response.text
    assert response.json()["code"] == "INVALID_SUBSCRIPTION_REQUEST"
    assert response.json()["message"].startswith("delivery: 'answers' breaks")
    refused = {"kind": "recorder", "answers": ["refuse"]}
    response = aviso.put(url, json={**RHINE, "delivery": refused})
    assert response.status_code == 400
    assert response.json()["message"] == "delivery: this recorder refuses to record"
    assert aviso.get(url).status_code == 404


def test_a_pulled_subscription_has_no_dead_letters(aviso: AvisoClient) -> None:
    assert aviso.put(f"{SUBSCRIPTIONS}/pull", json=RHINE).status_code == 201
    assert aviso.get(f"{SUBSCRIPTIONS}/pull").json()["deliveries"] is None
    letters = aviso.get(f"{SUBSCRIPTIONS}/pull/dead-letters").json()
    assert letters["dead_letters"] == [] and letters["dropped"] == 0
    assert aviso.post(f"{SUBSCRIPTIONS}/pull/dead-letters/redrive").json()["redriven"] == 0
    assert aviso.get(f"{SUBSCRIPTIONS}/nobody/dead-letters").status_code == 404


def test_a_dead_letter_redriven_to_a_gone_receiver_stays_a_dead_letter(
    aviso: AvisoClient,
) -> None:
    _subscribe(aviso, "fading", ["retry"])
    first = _notify(aviso, 1)
    assert _attempts(3) == [("fading", first, n) for n in (1, 2, 3)]
    _settled(aviso, "fading", first)
    Recorder.answers["fading"] = ["gone"]
    assert aviso.post(f"{SUBSCRIPTIONS}/fading/dead-letters/redrive").json()["redriven"] == 1
    assert _attempts(1) == [("fading", first, 1)]
    _disabled(aviso, "fading")
    letters = aviso.get(f"{SUBSCRIPTIONS}/fading/dead-letters").json()["dead_letters"]
    assert [letter["sequence"] for letter in letters] == [first]
    # Disabled: a redrive delivers nothing and keeps them.
    assert aviso.post(f"{SUBSCRIPTIONS}/fading/dead-letters/redrive").json()["redriven"] == 0
    letters = aviso.get(f"{SUBSCRIPTIONS}/fading/dead-letters").json()["dead_letters"]
    assert [letter["sequence"] for letter in letters] == [first]


def test_subscriptions_held_and_the_largest_lag_are_exported_without_names(
    aviso: AvisoClient,
) -> None:
    registry = aviso.metrics_registry
    held, lag = "aviso_subscriptions", "aviso_subscription_max_lag_seconds"
    for kind, status in (("pull", "active"), ("recorder", "active"), ("recorder", "disabled")):
        assert registry.get_sample_value(held, {"kind": kind, "status": status}) == 0
    assert registry.get_sample_value(lag, {"kind": "recorder"}) == 0
    assert aviso.put(f"{SUBSCRIPTIONS}/pulled-one", json=RHINE).status_code == 201
    _subscribe(aviso, "stuck-one", ["hang"])
    _subscribe(aviso, "gone-one", ["gone"])
    first = _notify(aviso, 1)
    assert sorted(_attempts(2)) == [("gone-one", first, 1), ("stuck-one", first, 1)]
    _disabled(aviso, "gone-one")
    assert registry.get_sample_value(held, {"kind": "pull", "status": "active"}) == 1
    assert registry.get_sample_value(held, {"kind": "recorder", "status": "active"}) == 1
    assert registry.get_sample_value(held, {"kind": "recorder", "status": "disabled"}) == 1
    # The hanging attempt holds the notification: its age is the largest lag.
    assert (registry.get_sample_value(lag, {"kind": "recorder"}) or 0) > 0
    exposition = generate_latest(registry).decode()
    assert not any(name in exposition for name in ("pulled-one", "stuck-one", "gone-one"))
    assert aviso.delete(f"{SUBSCRIPTIONS}/stuck-one").status_code == 204
    assert registry.get_sample_value(lag, {"kind": "recorder"}) == 0
    assert registry.get_sample_value(held, {"kind": "recorder", "status": "active"}) == 0
