"""Fake external stores whose history reads fail on request (stream_processing_failed).

Subclasses of both built-in backends registered through a real plugin, so the host's own
replay-failure path runs against each real store. A pattern whose second token starts with
``failing-now`` fails at its first history page, one starting with ``failing-later`` after
its first page, one starting with ``failing-bound`` when its history bound is asked for,
and one starting with ``stalled-bound`` never answers that question; everything else
behaves like the backend it extends.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_builtins.backends.jetstream import JetStreamBackend
from aviso_plugins import hookimpl
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import Batch, StartCursor, StorageBackend

FAILURE = "history store unavailable"


class _FailingHistory:
    """Mixed in before a backend class."""

    _pages_served: set[TopicPattern]

    def _fail_now(self, pattern: TopicPattern) -> bool:
        token = pattern.tokens[1] if len(pattern.tokens) > 1 else None
        if not token:
            return False
        if token.startswith("failing-now"):
            return True
        if token.startswith("failing-later"):
            served = self.__dict__.setdefault("_pages_served", set())
            if pattern in served:
                return True
            served.add(pattern)
        return False

    async def history_bound(self, pattern: TopicPattern) -> int | None:
        token = (pattern.tokens[1] if len(pattern.tokens) > 1 else None) or ""
        if token.startswith("failing-bound"):
            raise ConnectionError(FAILURE)
        if token.startswith("stalled-bound"):
            await asyncio.Event().wait()
        return await super().history_bound(pattern)  # type: ignore[misc]

    async def fetch_batch(self, pattern: TopicPattern, start: StartCursor, limit: int) -> Batch:
        if self._fail_now(pattern):
            raise ConnectionError(FAILURE)
        return await super().fetch_batch(pattern, start, limit)  # type: ignore[misc]


class FailingInMemory(_FailingHistory, InMemoryBackend):
    kind: ClassVar[str] = "failing_in_memory"


class FailingJetStream(_FailingHistory, JetStreamBackend):
    kind: ClassVar[str] = "failing_jetstream"


class FailingHistoryPlugin:
    @hookimpl
    def aviso_storage_backends(self) -> list[type[StorageBackend]]:
        return [FailingInMemory, FailingJetStream]


def with_failing_history(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` (a backend variant) served by the failing subclass of its backend."""
    variant = copy.deepcopy(dict(document))
    section = variant["notification_backend"]
    kind = section.get("kind", "in_memory")
    section["kind"] = f"failing_{kind}"
    section[f"failing_{kind}"] = section.pop(kind, {})
    return variant
