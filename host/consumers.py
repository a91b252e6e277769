"""Runs the plugins' notification consumers: one task per consumer and event type, each
reading the stored notifications after the position the host keeps for it.

A task never buffers live records: the live subscription only wakes it, and every
notification is read from history by ``fetch_batch``. So a consumer slower than the notify
rate costs nothing but its lag, and the seam between history and live can neither lose nor
repeat a record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from aviso_host.cloudevents import CloudEventError, CloudEventRenderer
from aviso_host.config import ConfigError
from aviso_host.config.settings import Settings
from aviso_host.encoding import loads
from aviso_host.errors import log_failure
from aviso_host.identifiers import CatalogPlanner
from aviso_host.logs import log_event
from aviso_host.plugins import PluginRegistry
from aviso_host.schemas import EventSchema, SchemaCatalog
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import (
    CONSUMER_STARTS,
    MESSAGE_ID_METADATA,
    ConsumedNotification,
    ConsumerContext,
    NotificationConsumer,
    StartCursor,
    StorageBackend,
    StoredNotification,
)

BATCH_SIZE = 256
"""Notifications read per history page."""
RETRY_SECONDS = 1.0
"""Wait after a history page or a live subscription failed, before trying again."""


def stream_pattern(schema: EventSchema) -> TopicPattern:
    """Every topic of one event type."""
    return TopicPattern((schema.base, *(None for _ in schema.topic_fields)))


def consumed_notification(
    renderer: CloudEventRenderer, event_type: str, record: StoredNotification
) -> ConsumedNotification:
    """``record`` with the CloudEvent a watch delivers for it; raises ``CloudEventError`` or
    ``ValueError`` for a record that cannot be rendered."""
    cloudevent = renderer.render(record)
    data = loads(cloudevent)["data"]
    return ConsumedNotification(event_type, record, cloudevent, data["identifier"], data["payload"])


class CatalogPublisher:
    """``NotificationPublisher``: notify's validation (``CatalogPlanner``), then the backend."""

    def __init__(self, planner: CatalogPlanner, backend: StorageBackend) -> None:
        self._planner = planner
        self._backend = backend

    async def publish(
        self,
        event_type: str,
        identifier: Mapping[str, Any],
        payload: Any = None,
        message_id: str | None = None,
    ) -> StoredNotification:
        planned = self._planner.plan(event_type, identifier, payload)
        metadata = planned.metadata
        if message_id is not None:
            metadata = {**metadata, MESSAGE_ID_METADATA: message_id}
        return await self._backend.publish(planned.topic, planned.payload, metadata)


class Wakeup:
    """``LiveSink`` that only says something was stored (the record is read from history)."""

    __slots__ = ("ended", "event")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.ended = False

    def deliver(self, record: StoredNotification) -> None:
        self.event.set()

    def end(self, reason: str) -> None:
        self.ended = True
        self.event.set()


class ConsumerRunner:
    """Constructs, starts, feeds and closes every registered consumer."""

    def __init__(
        self,
        settings: Settings,
        registry: PluginRegistry,
        catalog: SchemaCatalog,
        backend: StorageBackend,
        renderer: CloudEventRenderer,
    ) -> None:
        self._catalog = catalog
        self._backend = backend
        self._renderer = renderer
        self.positions: dict[tuple[str, str], int] = {}
        """(consumer name, event type) -> the last sequence handled (process-local)."""
        self._tasks: list[asyncio.Task[None]] = []
        schemas = settings.document.get("notification_schema") or {}
        # A consumer that wants no event type (a rule nobody configured) is left idle.
        wanted = {
            name: (cls, event_types)
            for name, cls in sorted(registry.consumers.items())
            if (event_types := self._event_types(name, cls, schemas))
        }
        if wanted and type(backend).shared_between_processes:
            names = ", ".join(wanted)
            raise ConfigError(
                f"notification_backend.kind: notification consumers ({names}) need a backend "
                f"that is not shared between processes; '{settings.backend.kind}' is"
            )
        limits = settings.limits
        publisher = CatalogPublisher(
            CatalogPlanner(
                catalog,
                limits.max_identifier_value_bytes,
                limits.max_payload_bytes,
                limits.max_topic_bytes,
            ),
            backend,
        )
        self.consumers: list[NotificationConsumer] = [
            cls(ConsumerContext(publisher, event_types, schemas))
            for cls, event_types in wanted.values()
        ]

    def _event_types(
        self, name: str, cls: type[NotificationConsumer], schemas: Mapping[str, Any]
    ) -> tuple[str, ...]:
        if cls.start_at not in CONSUMER_STARTS:
            raise ConfigError(
                f"notification consumer '{name}': start_at must be one of "
                f"{sorted(CONSUMER_STARTS)}, not {cls.start_at!r}"
            )
        wanted = cls.wanted_event_types(schemas)
        if wanted is None:
            return tuple(self._catalog.event_types)
        unknown = sorted(set(wanted) - set(self._catalog.event_types))
        if unknown:
            raise ConfigError(
                f"notification_schema: notification consumer '{name}' reads event type "
                f"'{unknown[0]}', which is not configured"
            )
        return tuple(sorted(wanted))

    async def start(self) -> None:
        started: list[NotificationConsumer] = []
        try:
            for consumer in self.consumers:
                await consumer.start()
                started.append(consumer)
        except BaseException:
            for consumer in reversed(started):
                await consumer.close()
            raise
        for consumer in self.consumers:
            for event_type in consumer.context.event_types:
                schema = self._catalog.get(event_type)
                assert schema is not None
                self._tasks.append(asyncio.create_task(self._follow(consumer, schema)))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for consumer in reversed(self.consumers):
            try:
                await consumer.close()
            except Exception as exc:
                log_failure("consumer.close_failed", "consumer close failed", exc)

    async def _follow(self, consumer: NotificationConsumer, schema: EventSchema) -> None:
        """Subscribe first, then read: whatever is stored after the read found nothing has
        already set the wake-up."""
        pattern = stream_pattern(schema)
        while True:
            wakeup = Wakeup()
            try:
                subscription = await self._backend.subscribe(pattern, wakeup)
            except Exception as exc:
                log_failure("consumer.subscribe_failed", "live subscription failed", exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            try:
                await self._read(consumer, schema, pattern, wakeup)
            finally:
                await subscription.close()
            await asyncio.sleep(RETRY_SECONDS)  # the feed ended: the store may be down

    async def _read(
        self,
        consumer: NotificationConsumer,
        schema: EventSchema,
        pattern: TopicPattern,
        wakeup: Wakeup,
    ) -> None:
        """Until the live feed ends (then ``_follow`` subscribes again)."""
        key = (type(consumer).name, schema.event_type)
        while not wakeup.ended:
            wakeup.event.clear()
            try:
                position = self.positions.get(key)
                if position is None:
                    position = self.positions[key] = await self._initial(consumer, pattern)
                batch = await self._backend.fetch_batch(
                    pattern, StartCursor(from_sequence=position + 1), BATCH_SIZE
                )
            except Exception as exc:
                log_failure("consumer.read_failed", "history page failed", exc, topic=schema.base)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            for record in batch.messages:
                await self._consume(consumer, schema.event_type, record)
                self.positions[key] = record.sequence
            if batch.has_more and batch.next_sequence is not None:
                # Records examined without a match (a page cut at the backend's examination
                # bound) are passed over too.
                self.positions[key] = max(self.positions[key], batch.next_sequence - 1)
            if not batch.has_more:
                await wakeup.event.wait()

    async def _initial(self, consumer: NotificationConsumer, pattern: TopicPattern) -> int:
        if consumer.start_at == "beginning":
            return 0
        return await self._backend.history_bound(pattern) or 0

    async def _consume(
        self, consumer: NotificationConsumer, event_type: str, record: StoredNotification
    ) -> None:
        name = type(consumer).name
        try:
            notification = consumed_notification(self._renderer, event_type, record)
        except (CloudEventError, ValueError) as exc:
            log_event(
                "consumer.unreadable",
                f"notification passed over: {exc}",
                logging.WARNING,
                consumer=name,
                event_type=event_type,
                sequence=record.sequence,
            )
            return
        try:
            await consumer.consume(notification)
        except Exception as exc:
            log_failure(
                "consumer.failed",
                "consumer failed; notification passed over",
                exc,
                consumer=name,
                event_type=event_type,
                sequence=record.sequence,
            )
