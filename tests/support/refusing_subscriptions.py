"""A fake external store whose live subscriptions cannot be created.

An in-memory subclass registered through a real plugin, so the host's own subscription
error path is exercised, not a mocked one.
"""

from __future__ import annotations

from typing import ClassVar

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_plugins import hookimpl
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import LiveSink, StorageBackend, Subscription


class RefusingSubscriptionsBackend(InMemoryBackend):
    """Stores and replays like the in-memory backend; every live subscription is refused."""

    kind: ClassVar[str] = "refusing_subscriptions"

    async def subscribe(self, pattern: TopicPattern, sink: LiveSink) -> Subscription:
        raise ConnectionError("connection refused")


class RefusingSubscriptionsPlugin:
    @hookimpl
    def aviso_storage_backends(self) -> list[type[StorageBackend]]:
        return [RefusingSubscriptionsBackend]
