"""Notification consumers: read the stored notifications from a position the host keeps."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from aviso_plugins.storage import StoredNotification

__all__ = [
    "CONSUMER_STARTS",
    "ConsumedNotification",
    "ConsumerContext",
    "NotificationConsumer",
    "NotificationPublisher",
]


@dataclass(frozen=True, slots=True)
class ConsumedNotification:
    """One stored notification handed to a :class:`NotificationConsumer`."""

    event_type: str
    record: StoredNotification
    """The record as the backend stored it (``sequence`` counts within its event type)."""
    cloudevent: bytes
    """The CloudEvent JSON a watch delivers for it, byte for byte."""
    identifier: Mapping[str, Any]
    """``data.identifier`` of that CloudEvent: every field the notification named."""
    payload: Any
    """``data.payload`` of that CloudEvent (``None`` when it had none)."""


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


@dataclass(frozen=True, slots=True)
class ConsumerContext:
    """What the host hands a consumer at construction."""

    publisher: NotificationPublisher
    event_types: tuple[str, ...]
    """The event types this consumer is fed: its ``event_types``, or every configured one."""


CONSUMER_STARTS = frozenset({"end", "beginning"})
"""Where a consumer without a stored position starts (:attr:`NotificationConsumer.start_at`)."""


class NotificationConsumer(ABC):
    """Reads the stored notifications from a position the host keeps for it.

    For each configured event type the host calls :meth:`consume` once per stored
    notification, in sequence order, one call at a time per event type, and moves the
    consumer's position past a notification when :meth:`consume` returns. Delivery is at
    least once: a notification whose :meth:`consume` was interrupted (a restart) is handed
    over again, so a consumer that publishes passes a ``message_id`` derived from what it
    consumed. A :meth:`consume` that raises is logged (``consumer.failed``) and its
    notification passed over: retrying, dead letters and backoff are the consumer's own.
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

    def __init__(self, context: ConsumerContext) -> None:
        self.context = context

    async def start(self) -> None:
        """Acquire resources on the serving event loop, before the first :meth:`consume`."""

    async def close(self) -> None:
        """Release what ``start`` acquired; no :meth:`consume` runs during or after it."""

    @abstractmethod
    async def consume(self, notification: ConsumedNotification) -> None:
        """Handle one notification; return when it is handled (the position moves on)."""
