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
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, NoReturn

import msgspec

from aviso_host.cloudevents import CloudEventError, CloudEventRenderer
from aviso_host.config import ConfigError
from aviso_host.config.settings import Settings
from aviso_host.encoding import loads
from aviso_host.errors import log_failure
from aviso_host.identifiers import CatalogPlanner
from aviso_host.logs import log_event
from aviso_host.metrics import Metrics
from aviso_host.plugins import PluginRegistry
from aviso_host.schemas import EventSchema, SchemaCatalog
from aviso_plugins.leases import DEFAULT_LEASE_SECONDS, Lease, LeaseKeeper, holder_id
from aviso_plugins.service import Wakeup
from aviso_plugins.state import DeferredState, SharedState, key_segment
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import (
    CONSUMER_STARTS,
    MESSAGE_ID_METADATA,
    ConsumedNotification,
    ConsumedPage,
    ConsumerContext,
    ConsumerHistory,
    ConsumerMetrics,
    NotificationConsumer,
    StartCursor,
    StorageBackend,
    StoredNotification,
)

POSITIONS_BUCKET = "consumer_positions"
"""The shared-state bucket of consumers' positions: ``<name>.<event type>`` (key segments)."""
LEASES_BUCKET = "leases"
"""The host's lease bucket (TTL ``DEFAULT_LEASE_SECONDS``)."""
BATCH_SIZE = 256
"""Notifications read per history page."""
RETRY_SECONDS = 1.0
"""Wait after a history page, a checkpoint or a live subscription failed, before trying
again."""
GATHER_SECONDS = 0.02
"""Wait after a wake-up before reading a page, so that a burst of notifies is read as one
page (one history read, one checkpoint and one position write) instead of one each."""


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


class SchemaRecordReader:
    """``RecordReader`` of one event type's records. The identifier is read from the stored
    identifier where the CloudEvent splices it in unchanged (written by this service, no
    spatial field), a tenth of the cost of rendering and parsing the CloudEvent; anything
    else is read from the CloudEvent itself."""

    __slots__ = ("_renderer", "_spliced")

    def __init__(self, renderer: CloudEventRenderer, schema: EventSchema) -> None:
        self._renderer = renderer
        self._spliced = not schema.spatial_keys

    def cloudevent(self, record: StoredNotification) -> bytes:
        return self._renderer.render(record)

    def _data(self, record: StoredNotification) -> Any:
        return loads(self._renderer.render(record))["data"]

    def identifier(self, record: StoredNotification) -> Mapping[str, Any]:
        stored = record.metadata.get("identifier") if self._spliced else None
        if stored:
            identifier = loads(stored)
            if isinstance(identifier, dict):
                return identifier
        found: Mapping[str, Any] = self._data(record)["identifier"]
        return found

    def payload(self, record: StoredNotification) -> Any:
        return self._data(record)["payload"]

    def fields_reader(
        self, names: tuple[str, ...]
    ) -> Callable[[StoredNotification], tuple[Any, ...] | None]:
        """Reads the values of ``names`` from a record (``None``: it lacks one); raises
        like :meth:`identifier`. Where the stored identifier is spliced in unchanged, only
        these fields are decoded from it (each must be text, as this service writes them:
        anything else is read from the identifier as a whole)."""

        def whole(record: StoredNotification) -> tuple[Any, ...] | None:
            identifier = self.identifier(record)
            try:
                return tuple(identifier[name] for name in names)
            except KeyError:
                return None

        if not self._spliced:
            return whole
        decode = _fields_decoder(names)
        astuple, unset = msgspec.structs.astuple, msgspec.UNSET

        def spliced(record: StoredNotification) -> tuple[Any, ...] | None:
            stored = record.metadata.get("identifier")
            if stored:
                try:
                    values = astuple(decode(stored))
                except msgspec.MsgspecError:
                    return whole(record)
                return None if unset in values else values
            return whole(record)

        return spliced


_FIELD_DECODERS: dict[tuple[str, ...], Callable[[str], Any]] = {}


def _fields_decoder(names: tuple[str, ...]) -> Callable[[str], Any]:
    """Decodes the text fields ``names`` of an identifier's JSON object (missing ones
    ``UNSET``), skipping the others."""
    decode = _FIELD_DECODERS.get(names)
    if decode is None:
        attributes = [f"f{index}" for index in range(len(names))]
        struct = msgspec.defstruct(
            "IdentifierFields",
            [(attribute, str | msgspec.UnsetType, msgspec.UNSET) for attribute in attributes],
            rename=dict(zip(attributes, names, strict=True)),
            frozen=True,
        )
        decode = _FIELD_DECODERS[names] = msgspec.json.Decoder(struct).decode
    return decode


class StoredPage(ConsumedPage):
    """``ConsumedPage`` over one history page of records, each read when asked for; a
    record that cannot be read is logged (``consumer.unreadable``) and passed over."""

    __slots__ = ("_consumer", "_reader", "_records")

    def __init__(
        self,
        consumer: str,
        event_type: str,
        records: Sequence[StoredNotification],
        reader: SchemaRecordReader,
    ) -> None:
        super().__init__(event_type, ())
        self._consumer = consumer
        self._records = records
        self._reader = reader

    def __len__(self) -> int:
        return len(self._records)

    def notifications(self) -> Iterator[ConsumedNotification]:
        reader, event_type = self._reader, self.event_type
        for record in self._records:
            try:
                # Read here, so that a record that cannot be read is passed over as such.
                identifier = reader.identifier(record)
            except (CloudEventError, ValueError) as exc:
                self._unreadable(record, exc)
                continue
            yield ConsumedNotification.read_lazily(event_type, record, reader, identifier)

    def fields(self, names: Sequence[str]) -> list[tuple[StoredNotification, tuple[Any, ...]]]:
        read = self._reader.fields_reader(tuple(names))
        found = []
        for record in self._records:
            try:
                values = read(record)
            except (CloudEventError, ValueError) as exc:
                self._unreadable(record, exc)
                continue
            if values is not None:
                found.append((record, values))
        return found

    def failed(self, record: StoredNotification, exc: Exception) -> None:
        log_failure(
            "consumer.failed",
            "consumer failed; notification passed over",
            exc,
            consumer=self._consumer,
            event_type=self.event_type,
            sequence=record.sequence,
        )

    def _unreadable(self, record: StoredNotification, exc: Exception) -> None:
        log_event(
            "consumer.unreadable",
            f"notification passed over: {exc}",
            logging.WARNING,
            consumer=self._consumer,
            event_type=self.event_type,
            sequence=record.sequence,
        )


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


class ExportedConsumerMetrics(ConsumerMetrics):
    """``ConsumerMetrics`` counted in ``aviso_consumer_events_total``."""

    def __init__(self, metrics: Metrics | None, consumer: str) -> None:
        self._counter = None if metrics is None else metrics.consumer_events
        self._consumer = consumer

    def count(self, event: str, amount: int = 1) -> None:
        if self._counter is not None:
            self._counter.labels(self._consumer, event).inc(amount)


class BackendHistory(ConsumerHistory):
    """``ConsumerHistory`` answered by the backend, per event type's stream."""

    def __init__(self, backend: StorageBackend, catalog: SchemaCatalog) -> None:
        self._backend = backend
        self._catalog = catalog

    async def pruned_through(self, event_type: str) -> int:
        schema = self._catalog.get(event_type)
        return 0 if schema is None else await self._backend.pruned_through(schema.base)


def keeps_shared_state(backend: StorageBackend) -> bool:
    """Whether ``backend`` can keep shared state, as far as its class tells: one shared
    between processes keeps none unless it implements :meth:`StorageBackend.shared_state`
    (checked at construction, before anything starts)."""
    cls = type(backend)
    return not cls.shared_between_processes or cls.shared_state is not StorageBackend.shared_state


class PositionLost(RuntimeError):
    """Another holder wrote the position: this process no longer holds the consumer."""


class Position:
    """Where one consumer stands in one event type, kept in shared state and written with a
    compare-and-set over the revision this holder last wrote (a holder that lost the lease
    cannot move it)."""

    __slots__ = ("_key", "_revision", "_state", "value")

    def __init__(self, state: SharedState, key: str) -> None:
        self._state = state
        self._key = key
        self._revision: int | None = None
        self.value: int | None = None

    async def load(self) -> int | None:
        entry = await self._state.get(self._key)
        if entry is None:
            self._revision = self.value = None
        else:
            self._revision, self.value = entry.revision, int(entry.value)
        return self.value

    async def store(self, sequence: int) -> None:
        value = str(sequence).encode()
        if self._revision is None:
            revision = await self._state.create(self._key, value)
        else:
            revision = await self._state.update(self._key, value, self._revision)
        if revision is None:
            raise PositionLost(self._key)
        self._revision, self.value = revision, sequence


class ConsumerRunner:
    """Constructs every registered consumer; runs each where it holds the consumer's lease
    (once per deployment), from positions kept in the backend's shared state."""

    def __init__(
        self,
        settings: Settings,
        registry: PluginRegistry,
        catalog: SchemaCatalog,
        backend: StorageBackend,
        renderer: CloudEventRenderer,
        metrics: Metrics | None = None,
    ) -> None:
        self._catalog = catalog
        self._backend = backend
        self._renderer = renderer
        self._kind = settings.backend.kind
        self._holder = holder_id()
        self._tasks: dict[str, list[asyncio.Task[None]]] = {}
        self._keepers: list[LeaseKeeper] = []
        schemas = settings.document.get("notification_schema") or {}
        # A consumer that wants no event type (a rule nobody configured) is left idle.
        wanted = {
            name: (cls, event_types)
            for name, cls in sorted(registry.consumers.items())
            if (event_types := self._event_types(name, cls, schemas))
        }
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
        if wanted and not keeps_shared_state(backend):
            self._refuse(", ".join(wanted))
        self.consumers: list[NotificationConsumer] = []
        for name, (cls, event_types) in wanted.items():
            bucket = f"consumer_{key_segment(name)}"
            state = DeferredState(partial(backend.shared_state, bucket))
            context = ConsumerContext(
                publisher,
                event_types,
                state,
                schemas,
                ExportedConsumerMetrics(metrics, name),
                BackendHistory(backend, catalog),
            )
            self.consumers.append(cls(context))

    def _refuse(self, names: str) -> NoReturn:
        raise ConfigError(
            f"notification_backend.kind: notification consumers ({names}) need a backend "
            f"that keeps shared state; '{self._kind}' keeps none"
        )

    def _event_types(
        self, name: str, cls: type[NotificationConsumer], schemas: Mapping[str, Any]
    ) -> tuple[str, ...]:
        if cls.start_at not in CONSUMER_STARTS:
            raise ConfigError(
                f"notification consumer '{name}': start_at must be one of "
                f"{sorted(CONSUMER_STARTS)}, not {cls.start_at!r}"
            )
        if (
            cls.consume is NotificationConsumer.consume
            and cls.consume_page is NotificationConsumer.consume_page
        ):
            raise ConfigError(
                f"notification consumer '{name}' implements neither consume nor consume_page"
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
        """Take each consumer's lease where it is free (starting the consumer: one that
        raises fails the startup), then keep taking and renewing them in the background."""
        if not self.consumers:
            return
        positions = await self._backend.shared_state(POSITIONS_BUCKET)
        leases = await self._backend.shared_state(LEASES_BUCKET, DEFAULT_LEASE_SECONDS)
        if positions is None or leases is None:
            self._refuse(", ".join(type(consumer).name for consumer in self.consumers))
        keepers = [
            LeaseKeeper(
                Lease(
                    leases,
                    f"consumer.{key_segment(type(consumer).name)}",
                    self._holder,
                    DEFAULT_LEASE_SECONDS,
                ),
                partial(self._activate, consumer, positions),
                partial(self._deactivate, consumer),
            )
            for consumer in self.consumers
        ]
        try:
            for keeper in keepers:
                self._keepers.append(keeper)
                await keeper.try_take()
        except BaseException:
            await self.close()
            raise
        for keeper in keepers:
            keeper.start()

    async def close(self) -> None:
        """Stop every consumer this process runs and give its lease back."""
        keepers, self._keepers = self._keepers, []
        for keeper in reversed(keepers):
            await keeper.stop()

    async def _activate(self, consumer: NotificationConsumer, positions: SharedState) -> None:
        name = type(consumer).name
        await consumer.start()
        log_event("consumer.active", "this process runs the consumer", consumer=name)
        tasks = self._tasks[name] = []
        for event_type in consumer.context.event_types:
            schema = self._catalog.get(event_type)
            assert schema is not None
            position = Position(positions, f"{key_segment(name)}.{key_segment(event_type)}")
            tasks.append(asyncio.create_task(self._follow(consumer, schema, position)))

    async def _deactivate(self, consumer: NotificationConsumer) -> None:
        name = type(consumer).name
        tasks = self._tasks.pop(name, [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await consumer.close()
        except Exception as exc:
            log_failure("consumer.close_failed", "consumer close failed", exc, consumer=name)
        log_event("consumer.inactive", "this process stopped running the consumer", consumer=name)

    async def _follow(
        self, consumer: NotificationConsumer, schema: EventSchema, position: Position
    ) -> None:
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
                await self._read(consumer, schema, pattern, wakeup, position)
            except PositionLost:
                log_event(
                    "consumer.position_lost",
                    "another process moved the consumer's position: this one stops",
                    logging.WARNING,
                    consumer=type(consumer).name,
                    event_type=schema.event_type,
                )
                return
            finally:
                await subscription.close()
            await asyncio.sleep(RETRY_SECONDS)  # the feed ended: the store may be down

    async def _read(
        self,
        consumer: NotificationConsumer,
        schema: EventSchema,
        pattern: TopicPattern,
        wakeup: Wakeup,
        position: Position,
    ) -> None:
        """Until the live feed ends (then ``_follow`` subscribes again)."""
        reader = SchemaRecordReader(self._renderer, schema)
        while not wakeup.ended:
            wakeup.event.clear()
            try:
                current = position.value
                if current is None:
                    current = await position.load()
                if current is None:
                    current = await self._initial(consumer, pattern)
                batch = await self._backend.fetch_batch(
                    pattern, StartCursor(from_sequence=current + 1), BATCH_SIZE
                )
            except Exception as exc:
                log_failure("consumer.read_failed", "history page failed", exc, topic=schema.base)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            if batch.messages:
                await self._consume(consumer, schema.event_type, reader, batch.messages)
                await self._checkpoint(consumer, schema.event_type)
                # Once per page, not per notification: a crash hands the page over again.
                await self._store(position, batch.messages[-1].sequence)
            if batch.has_more and batch.next_sequence is not None:
                # Records examined without a match (a page cut at the backend's examination
                # bound) are passed over too.
                passed = batch.next_sequence - 1
                if passed > (position.value or 0):
                    await self._store(position, passed)
            elif not batch.messages and position.value is None:
                await self._store(position, current)  # where a new consumer starts
            if not batch.has_more:
                await wakeup.event.wait()
                await asyncio.sleep(GATHER_SECONDS)

    @staticmethod
    async def _checkpoint(consumer: NotificationConsumer, event_type: str) -> None:
        """The consumer's checkpoint, until it returns (its page is not passed over while
        what it consumed may not survive a restart)."""
        while True:
            try:
                await consumer.checkpoint()
                return
            except Exception as exc:
                log_failure(
                    "consumer.checkpoint_failed",
                    "consumer checkpoint failed; tried again",
                    exc,
                    consumer=type(consumer).name,
                    event_type=event_type,
                )
                await asyncio.sleep(RETRY_SECONDS)

    @staticmethod
    async def _store(position: Position, sequence: int) -> None:
        """Write the position, until it is written or lost (a store that cannot be reached
        now is tried again: the notification is not handed over twice for that)."""
        while True:
            try:
                await position.store(sequence)
                return
            except PositionLost:
                raise
            except Exception as exc:
                log_failure("consumer.position_failed", "position not written", exc)
                await asyncio.sleep(RETRY_SECONDS)

    async def _initial(self, consumer: NotificationConsumer, pattern: TopicPattern) -> int:
        if consumer.start_at == "beginning":
            return 0
        return await self._backend.history_bound(pattern) or 0

    @staticmethod
    async def _consume(
        consumer: NotificationConsumer,
        event_type: str,
        reader: SchemaRecordReader,
        records: Sequence[StoredNotification],
    ) -> None:
        name = type(consumer).name
        try:
            await consumer.consume_page(StoredPage(name, event_type, records, reader))
        except Exception as exc:
            log_failure(
                "consumer.failed",
                "consumer failed; the rest of its page passed over",
                exc,
                consumer=name,
                event_type=event_type,
                sequence=records[0].sequence,
            )
