"""Notification consumers on JetStream: several instances of one deployment (real servers on
one real nats-server) run each consumer once, from a position kept in JetStream, and one
takes over when the active one stops."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import ClassVar

from aviso_plugins import hookimpl
from aviso_plugins.testing import AvisoClient, serve
from aviso_plugins.types import ConsumedNotification, NotificationConsumer
from tests.host.backends.jetstream_support import unique
from tests.support.nats import NatsServer

WAIT = 30.0


class Tally(NotificationConsumer):
    """Records which instance consumed which notification, and its start/close calls."""

    name = "tally"
    seen: ClassVar[list[tuple[int, int]]] = []
    calls: ClassVar[list[tuple[int, str]]] = []

    async def start(self) -> None:
        Tally.calls.append((id(self), "start"))

    async def close(self) -> None:
        Tally.calls.append((id(self), "close"))

    async def consume(self, notification: ConsumedNotification) -> None:
        Tally.seen.append((id(self), notification.record.sequence))


class TallyPlugin:
    @hookimpl
    def aviso_notification_consumers(self) -> list[type[NotificationConsumer]]:
        return [Tally]


def config(nats: NatsServer, base: str) -> str:
    return f"""
notification_backend: {{kind: jetstream, jetstream: {{nats_url: '{nats.url}'}}}}
notification_schema:
  {base}:
    topic: {{base: {base}, key_order: [n]}}
    identifier:
      n: {{type: IntHandler, required: true}}
"""


def consumer_of(aviso: AvisoClient) -> int:
    assert aviso.app is not None
    return id(aviso.app.state.service.consumers.consumers[0])


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def notify(aviso: AvisoClient, base: str, numbers: range) -> None:
    for number in numbers:
        assert aviso.notify(base, {"n": number}).is_success


def test_instances_run_a_consumer_once_and_another_takes_over_from_its_position(
    module_nats: NatsServer,
) -> None:
    Tally.seen.clear()
    Tally.calls.clear()
    base = unique("cons")
    document = config(module_nats, base)
    with ExitStack() as first, ExitStack() as second:
        one = first.enter_context(serve(document, plugins=[TallyPlugin()]))
        two = second.enter_context(serve(document, plugins=[TallyPlugin()]))
        notify(one, base, range(10))
        notify(two, base, range(10, 20))
        wait_for(lambda: len(Tally.seen) >= 20)
        active = {instance for instance, _ in Tally.seen}
        assert len(active) == 1, "the consumer ran in both instances"
        (holder,) = active
        assert [sequence for _, sequence in Tally.seen] == list(range(1, 21))
        # The active instance stops (its lease given back); the other takes over.
        stopping, staying = (first, two) if consumer_of(one) == holder else (second, one)
        stopping.close()
        notify(staying, base, range(20, 30))
        wait_for(lambda: len(Tally.seen) >= 30)
        assert [sequence for _, sequence in Tally.seen] == list(range(1, 31))
        assert {instance for instance, _ in Tally.seen[20:]} == {consumer_of(staying)}
    assert (holder, "start") in Tally.calls and (holder, "close") in Tally.calls
    assert Tally.calls.count((holder, "start")) == 1


def test_a_restarted_deployment_resumes_after_the_stored_position(
    module_nats: NatsServer,
) -> None:
    Tally.seen.clear()
    base = unique("cons")
    document = config(module_nats, base)
    with serve(document, plugins=[TallyPlugin()]) as aviso:
        notify(aviso, base, range(5))
        wait_for(lambda: len(Tally.seen) >= 5)
    with serve(document) as without_consumers:  # stored while no instance runs it
        notify(without_consumers, base, range(5, 8))
    with serve(document, plugins=[TallyPlugin()]) as aviso:
        notify(aviso, base, range(8, 10))
        wait_for(lambda: len(Tally.seen) >= 10)
    assert [sequence for _, sequence in Tally.seen] == list(range(1, 11))
