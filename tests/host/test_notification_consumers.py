"""Notification consumers: a plugin reads every stored notification in order from a position
the host keeps, and publishes notifications of its own, on a real server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, ClassVar

import pytest

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_plugins import hookimpl
from aviso_plugins.testing import ConfigError, PluginError, build_app, serve
from aviso_plugins.types import (
    ConsumedNotification,
    NotificationConsumer,
    SinkRejected,
    StorageBackend,
)

CONFIG = """
notification_backend: {kind: in_memory, in_memory: {max_history_per_topic: 10}}
notification_schema:
  step:
    topic: {base: step, key_order: [run, member]}
    identifier:
      run: {type: StringHandler, required: true}
      member: {type: IntHandler, required: true}
  echo:
    topic: {base: echo, key_order: [run, member]}
    identifier:
      run: {type: StringHandler, required: true}
      member: {type: IntHandler, required: false}
"""


class Echo(NotificationConsumer):
    """Publishes an ``echo`` for each ``step``; ``boom`` payloads make it fail."""

    name = "echo"
    event_types: ClassVar[frozenset[str] | None] = frozenset({"step"})
    seen: ClassVar[list[tuple[str, int, Any]]] = []
    refused: ClassVar[list[str]] = []

    async def consume(self, notification: ConsumedNotification) -> None:
        Echo.seen.append(
            (notification.event_type, notification.record.sequence, notification.payload)
        )
        if notification.payload == "boom":
            raise RuntimeError("boom")
        cloudevent = json.loads(notification.cloudevent)
        assert cloudevent["data"]["identifier"] == notification.identifier
        await self.context.publisher.publish(
            "echo",
            notification.identifier,
            {"of": notification.record.sequence},
            message_id=f"echo-{notification.record.sequence}",
        )
        try:
            await self.context.publisher.publish("echo", {"run": "x"}, None)
        except SinkRejected as exc:
            Echo.refused.append(exc.code)


class EchoPlugin:
    @hookimpl
    def aviso_notification_consumers(self) -> list[type[NotificationConsumer]]:
        return [Echo]


def test_a_consumer_sees_every_notification_in_order_and_publishes() -> None:
    Echo.seen.clear()
    Echo.refused.clear()
    with serve(CONFIG, plugins=[EchoPlugin()]) as aviso:
        with aviso.watch("echo", {"run": "*"}) as echoes:
            for member, payload in ((1, "a"), (2, "boom"), (3, "c")):
                assert aviso.notify("step", {"run": "r1", "member": member}, payload).is_success
            first = echoes.until("live-notification")
            second = echoes.until("live-notification")
        assert first.data["data"]["payload"] == {"of": 1}
        assert second.data["data"]["payload"] == {"of": 3}
        assert first.data["data"]["identifier"] == {"member": "1", "run": "r1"}
    # One call per notification, in order, the failing one passed over and never retried.
    assert Echo.seen == [("step", 1, "a"), ("step", 2, "boom"), ("step", 3, "c")]
    # The publisher validates as notify does (a required field is missing).
    assert Echo.refused == ["INVALID_NOTIFICATION_REQUEST", "INVALID_NOTIFICATION_REQUEST"]


class Slow(NotificationConsumer):
    """Holds each notification until released: notifications stored meanwhile wait in
    history, not in a buffer, and are handed over in order afterwards."""

    name = "slow"
    event_types: ClassVar[frozenset[str] | None] = frozenset({"step"})
    start_at = "beginning"
    seen: ClassVar[list[int]] = []
    release: ClassVar[threading.Event] = threading.Event()

    async def consume(self, notification: ConsumedNotification) -> None:
        Slow.seen.append(notification.record.sequence)
        if notification.payload == "hold":
            assert await asyncio.to_thread(Slow.release.wait, 10)
        await self.context.publisher.publish(
            "echo", notification.identifier, notification.record.sequence
        )


class SlowPlugin:
    @hookimpl
    def aviso_notification_consumers(self) -> list[type[NotificationConsumer]]:
        return [Slow]


def test_a_slow_consumer_catches_up_from_history() -> None:
    Slow.seen.clear()
    Slow.release.clear()
    with serve(CONFIG, plugins=[SlowPlugin()]) as aviso:
        assert aviso.notify("step", {"run": "r", "member": 0}, "hold").is_success
        for member in range(1, 40):
            assert aviso.notify("step", {"run": "r", "member": member}).is_success
        with aviso.watch("echo", {"run": "r"}) as echoes:
            Slow.release.set()
            payloads = [echoes.until("live-notification").data["data"]["payload"]]
            while payloads[-1] != 40:
                payloads.append(echoes.until("live-notification").data["data"]["payload"])
        assert payloads == list(range(1, 41))
    assert Slow.seen == list(range(1, 41))


def test_two_consumers_of_one_name_are_refused() -> None:
    class Other(Echo):
        pass

    class OtherPlugin:
        @hookimpl
        def aviso_notification_consumers(self) -> list[type[NotificationConsumer]]:
            return [Other]

    with pytest.raises(PluginError, match="both provide name 'echo'"):
        build_app(CONFIG, plugins=[EchoPlugin(), OtherPlugin()])


def test_a_consumer_of_an_unconfigured_event_type_fails_startup() -> None:
    class Lost(Echo):
        name = "lost"
        event_types: ClassVar[frozenset[str] | None] = frozenset({"nowhere"})

    class LostPlugin:
        @hookimpl
        def aviso_notification_consumers(self) -> list[type[NotificationConsumer]]:
            return [Lost]

    with pytest.raises(ConfigError, match="'lost' reads event type 'nowhere'"):
        build_app(CONFIG, plugins=[LostPlugin()])


class Stateless(InMemoryBackend):
    """A store shared between processes (as far as the host knows) that keeps no shared
    state: consumers' positions and leases have nowhere to live."""

    kind: ClassVar[str] = "stateless"
    shared_between_processes: ClassVar[bool] = True


class StatelessPlugin:
    @hookimpl
    def aviso_storage_backends(self) -> list[type[StorageBackend]]:
        return [Stateless]


def test_consumers_are_refused_on_a_shared_backend_that_keeps_no_shared_state() -> None:
    config = CONFIG.replace(
        "kind: in_memory, in_memory: {max_history_per_topic: 10}",
        "kind: stateless, stateless: {max_history_per_topic: 10}",
    )
    refused = r"consumers \(echo\) need a backend that keeps shared"
    with pytest.raises(ConfigError, match=refused):
        build_app(config, plugins=[EchoPlugin(), StatelessPlugin()])


def test_a_consumer_keeps_its_state_in_a_bucket_of_its_own() -> None:
    class Claims(NotificationConsumer):
        name = "claims"
        won: ClassVar[list[int | None]] = []

        async def consume(self, notification: ConsumedNotification) -> None:
            state = self.context.state
            Claims.won.append(await state.create("once", b"x"))

    class ClaimsPlugin:
        @hookimpl
        def aviso_notification_consumers(self) -> list[type[NotificationConsumer]]:
            return [Claims]

    with serve(CONFIG, plugins=[ClaimsPlugin()]) as aviso:
        for member in (1, 2):
            assert aviso.notify("step", {"run": "r", "member": member}).is_success
        deadline = time.monotonic() + 30
        while len(Claims.won) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert Claims.won[0] is not None and Claims.won[1] is None


def test_a_checkpoint_follows_each_page_and_a_failed_one_is_called_again() -> None:
    """What a page's ``consume()`` calls counted is handed to ``checkpoint()`` before the
    position moves; one that raises is called again (the page is not consumed twice)."""

    class Counting(NotificationConsumer):
        name = "counting"
        event_types: ClassVar[frozenset[str] | None] = frozenset({"step"})
        consumed: ClassVar[list[int]] = []
        checkpoints: ClassVar[list[tuple[int, ...]]] = []
        failures: ClassVar[list[int]] = [1]

        async def consume(self, notification: ConsumedNotification) -> None:
            # Read lazily, as a watch delivers it.
            cloudevent = json.loads(notification.cloudevent)
            assert cloudevent["data"]["payload"] == notification.payload
            assert cloudevent["data"]["identifier"] == notification.identifier
            Counting.consumed.append(notification.record.sequence)

        async def checkpoint(self) -> None:
            Counting.checkpoints.append(tuple(Counting.consumed))
            if Counting.failures:
                Counting.failures.pop()
                raise ConnectionError("the store did not answer")

    class CountingPlugin:
        @hookimpl
        def aviso_notification_consumers(self) -> list[type[NotificationConsumer]]:
            return [Counting]

    with serve(CONFIG, plugins=[CountingPlugin()]) as aviso:
        for member in (1, 2, 3):
            assert aviso.notify("step", {"run": "r", "member": member}, {"n": member}).is_success
        deadline = time.monotonic() + 30
        while len(Counting.checkpoints) < 2 or Counting.checkpoints[-1] != (1, 2, 3):
            assert time.monotonic() < deadline, Counting.checkpoints
            time.sleep(0.05)
    assert Counting.consumed == [1, 2, 3]
    assert Counting.checkpoints[0] == Counting.checkpoints[1]  # the failed one, again
