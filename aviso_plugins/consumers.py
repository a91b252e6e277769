"""Notification consumers: read the stored notifications from a position the host keeps."""

from __future__ import annotations

import logging
from abc import ABC
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from aviso_plugins.state import SharedState
from aviso_plugins.storage import StoredNotification

__all__ = [
    "CONSUMER_STARTS",
    "ConsumedNotification",
    "ConsumedPage",
    "ConsumerContext",
    "ConsumerHistory",
    "ConsumerMetrics",
    "NotificationConsumer",
    "NotificationPublisher",
    "RecordReader",
]


class RecordReader(Protocol):
    """How a record's CloudEvent and data are read when a consumer first asks for them;
    implemented by the host. Each method raises ``ValueError`` for a record that cannot be
    shown as a CloudEvent."""

    def cloudevent(self, record: StoredNotification) -> bytes:
        """The CloudEvent JSON a watch delivers for ``record``, byte for byte."""
        ...

    def identifier(self, record: StoredNotification) -> Mapping[str, Any]:
        """``data.identifier`` of that CloudEvent."""
        ...

    def payload(self, record: StoredNotification) -> Any:
        """``data.payload`` of that CloudEvent."""
        ...


_UNREAD: Any = object()


class ConsumedNotification:
    """One stored notification handed to a :class:`NotificationConsumer`.

    Built with every part given (``ConsumedNotification(event_type, record, cloudevent,
    identifier, payload)``), or by the host with :meth:`read_lazily`: then each part is read
    from the record the first time it is asked for, so a consumer that needs only the
    identifier pays neither for the CloudEvent's rendering nor for the payload's parsing.
    Reading a part may raise ``ValueError`` (a record another writer stored that cannot be
    shown as a CloudEvent): the host logs it as the consumer's failure on that notification.
    """

    __slots__ = ("_cloudevent", "_identifier", "_payload", "_reader", "event_type", "record")

    event_type: str
    record: StoredNotification
    """The record as the backend stored it (``sequence`` counts within its event type)."""

    def __init__(
        self,
        event_type: str,
        record: StoredNotification,
        cloudevent: bytes,
        identifier: Mapping[str, Any],
        payload: Any,
    ) -> None:
        self.event_type = event_type
        self.record = record
        self._cloudevent: bytes | None = cloudevent
        self._identifier: Mapping[str, Any] | None = identifier
        self._payload = payload
        self._reader: RecordReader | None = None

    @classmethod
    def read_lazily(
        cls,
        event_type: str,
        record: StoredNotification,
        reader: RecordReader,
        identifier: Mapping[str, Any] | None = None,
    ) -> ConsumedNotification:
        """``record``, each part read by ``reader`` when first asked for (``identifier``:
        already read by ``reader``)."""
        # Not through __init__: the host builds one per notification consumed.
        notification = object.__new__(cls)
        notification.event_type = event_type
        notification.record = record
        notification._cloudevent = None
        notification._identifier = identifier
        notification._payload = _UNREAD
        notification._reader = reader
        return notification

    @property
    def cloudevent(self) -> bytes:
        """The CloudEvent JSON a watch delivers for it, byte for byte."""
        if self._cloudevent is None:
            assert self._reader is not None
            self._cloudevent = self._reader.cloudevent(self.record)
        return self._cloudevent

    @property
    def identifier(self) -> Mapping[str, Any]:
        """``data.identifier`` of that CloudEvent: every field the notification named."""
        if self._identifier is None:
            assert self._reader is not None
            self._identifier = self._reader.identifier(self.record)
        return self._identifier

    @property
    def payload(self) -> Any:
        """``data.payload`` of that CloudEvent (``None`` when it had none)."""
        if self._payload is _UNREAD:
            assert self._reader is not None
            self._payload = self._reader.payload(self.record)
        return self._payload


class ConsumedPage:
    """One page of stored notifications of one event type, in sequence order, handed to
    :meth:`NotificationConsumer.consume_page`.

    Built from notifications (``ConsumedPage(event_type, notifications)``, what a test
    does), or by the host over the stored records, where :meth:`fields` reads only the named
    identifier fields from each record: no identifier built, no CloudEvent rendered, one
    call for the page.
    """

    __slots__ = ("_notifications", "event_type")

    def __init__(self, event_type: str, notifications: Sequence[ConsumedNotification]) -> None:
        self.event_type = event_type
        self._notifications = notifications

    def __len__(self) -> int:
        """How many notifications the page holds, readable or not."""
        return len(self._notifications)

    def notifications(self) -> Iterator[ConsumedNotification]:
        """Each notification of the page whose identifier can be read (one that cannot is
        passed over and logged by the host as ``consumer.unreadable``)."""
        return iter(self._notifications)

    def fields(self, names: Sequence[str]) -> list[tuple[StoredNotification, tuple[Any, ...]]]:
        """Each readable notification whose identifier names every one of ``names``: its
        record and the values of ``names``, in that order (as ``identifier`` holds them:
        the text the API shows for each)."""
        found = []
        for notification in self.notifications():
            identifier = notification.identifier
            try:
                values = tuple(identifier[name] for name in names)
            except KeyError:
                continue
            found.append((notification.record, values))
        return found

    def failed(self, record: StoredNotification, exc: Exception) -> None:
        """Report that the consumer could not handle ``record`` and passed it over: the host
        logs it as ``consumer.failed`` (with the consumer, event type and sequence), as it
        logs a :meth:`NotificationConsumer.consume` that raised."""
        _logger.error(
            "consumer failed; notification passed over: %s",
            type(exc).__name__,
            extra={"event": "consumer.failed", "sequence": record.sequence},
        )


_logger = logging.getLogger("aviso.consumers")


class NotificationPublisher(Protocol):
    """Publishes notifications on a consumer's behalf; implemented by the host."""

    async def publish(
        self,
        event_type: str,
        identifier: Mapping[str, Any],
        payload: Any = None,
        message_id: str | None = None,
    ) -> StoredNotification:
        """Validate and store exactly as ``POST /api/v1/notification`` does, and return the
        stored record. Raise :class:`SinkRejected` (with the API's error code) for a
        notification the API would refuse; any other exception is a storage failure.
        ``message_id`` is passed to the backend as :data:`MESSAGE_ID_METADATA`."""
        ...


class ConsumerMetrics:
    """Where a consumer counts what only it can see (a group closed early, a record passed
    over): the host exports each as ``aviso_consumer_events_total{consumer, event}``. This
    base counts nothing, so a consumer can always report."""

    def count(self, event: str, amount: int = 1) -> None:
        """``amount`` more ``event``s (a short, fixed name: never a user's or a record's)."""


class ConsumerHistory:
    """What a consumer may ask of the stored history; the host answers from the backend.
    This base knows nothing, so a consumer built without the host can still ask."""

    async def pruned_through(self, event_type: str) -> int:
        """The highest sequence of ``event_type`` removed from history (retention, limits,
        deletes, wipes): every notification up to it is gone. 0 when none was, or when the
        backend cannot tell."""
        return 0


@dataclass(frozen=True, slots=True)
class ConsumerContext:
    """What the host hands a consumer at construction."""

    publisher: NotificationPublisher
    event_types: tuple[str, ...]
    """The event types this consumer is fed (:meth:`NotificationConsumer.wanted_event_types`)."""
    state: SharedState
    """The consumer's own shared-state bucket (named after its ``name``, no TTL), which every
    worker and instance sees alike: what it keeps beside its position, and the claims only
    one writer may win (:meth:`SharedState.create`)."""
    schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Every ``notification_schema`` entry as configured, derived event types included, by
    event type: where a consumer reads its plugin's schema keys (see ``SchemaKey``)."""
    metrics: ConsumerMetrics = field(default_factory=ConsumerMetrics)
    """Where the consumer counts its own events (exported by the host)."""
    history: ConsumerHistory = field(default_factory=ConsumerHistory)
    """What the consumer may ask of the stored history (what is no longer retained)."""


CONSUMER_STARTS = frozenset({"end", "beginning"})
"""Where a consumer without a stored position starts (:attr:`NotificationConsumer.start_at`)."""


class NotificationConsumer(ABC):
    """Reads the stored notifications from a position the host keeps for it.

    For each configured event type the host calls :meth:`consume_page` once per page of
    stored notifications (up to 256: what was stored since the last page, read about 20 ms
    after the first of them), in sequence order, one call at a time per event type, then
    :meth:`checkpoint`, and moves the consumer's position past the page once both returned.
    By default :meth:`consume_page` calls :meth:`consume` once per notification: a consumer
    implements either (one that implements neither fails startup). Delivery is at least
    once: the notifications of a page that was interrupted (a restart, a worker killed) are
    handed over again, so a consumer that publishes passes a ``message_id`` derived from
    what it consumed. A :meth:`consume` that raises is logged (``consumer.failed``) and its
    notification passed over: retrying, dead letters and backoff are the consumer's own.

    A consumer runs once per deployment: every worker and instance constructs it, but only
    the one holding its lease (see :mod:`aviso_plugins.leases`) is *active*. :meth:`start`
    is called when this process takes the lease and :meth:`close` when it stops holding it
    (its renewal failed, or shutdown), so a consumer may be started and closed several times
    in its life; :meth:`consume` is called only between the two. Timers and anything else
    only one process should run belong between :meth:`start` and :meth:`close`. Positions
    and :attr:`ConsumerContext.state` live in the backend's shared state.
    """

    name: ClassVar[str]
    """Names the consumer's position: two plugins cannot claim one name, and renaming a
    consumer starts it afresh (from :attr:`start_at`)."""

    event_types: ClassVar[frozenset[str] | None] = None
    """The event types to consume; ``None``: every configured one (those of
    ``notification_schema``). An event type not configured fails startup."""

    start_at: ClassVar[str] = "end"
    """Where a consumer without a stored position starts: ``"end"`` (notifications stored
    from its first start on) or ``"beginning"`` (the oldest retained)."""

    @classmethod
    def wanted_event_types(cls, schemas: Mapping[str, Mapping[str, Any]]) -> frozenset[str] | None:
        """The event types to consume, chosen when the configuration is known (``schemas``:
        as :attr:`ConsumerContext.schemas`); by default :attr:`event_types`. An empty set
        leaves the consumer idle."""
        return cls.event_types

    def __init__(self, context: ConsumerContext) -> None:
        self.context = context

    async def start(self) -> None:
        """This process became the active one: acquire resources on the serving event loop,
        before the first :meth:`consume`. Raising gives the lease back (logged; tried again
        later), except at startup, where it fails the startup."""

    async def close(self) -> None:
        """This process stopped being the active one (or shuts down): release what
        :meth:`start` acquired and stop timers; no :meth:`consume` runs during or after it,
        until the next :meth:`start`."""

    async def consume(self, notification: ConsumedNotification) -> None:
        """Handle one notification; return when it is handled (the position moves past it
        with its page)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither consume method")

    async def consume_page(self, page: ConsumedPage) -> None:
        """Handle one page of notifications; return when each is handled (the position then
        moves past the page). What a consumer that handles many notifications cheaply
        implements: one call per page instead of one per notification, and
        :meth:`ConsumedPage.fields` reads only the identifier fields it needs. A
        notification it cannot handle is reported with :meth:`ConsumedPage.failed` and
        passed over; a call that raises is logged (``consumer.failed``) and the rest of its
        page passed over. By default, :meth:`consume` for each notification, one that raises
        reported with :meth:`ConsumedPage.failed`."""
        for notification in page.notifications():
            try:
                await self.consume(notification)
            except Exception as exc:
                page.failed(notification.record, exc)

    async def checkpoint(self) -> None:
        """Called once per page, after :meth:`consume` returned for each of its
        notifications and before the host moves the position past them: write what a
        restart needs to carry on from that position (a consumer that keeps its work in
        memory writes it here once per page, not once per notification). Until it returns
        the position stays where it was: one that raises is logged
        (``consumer.checkpoint_failed``) and called again a second later, as long as this
        process is the active one. By default it writes nothing."""
