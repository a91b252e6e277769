"""Delivery kinds: push a subscription's notifications somewhere (a webhook, a queue)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aviso_plugins.consumers import ConsumedNotification

__all__ = [
    "DeliveryAttempt",
    "DeliveryKind",
    "DeliveryResult",
    "PreparedDelivery",
]


@dataclass(frozen=True, slots=True)
class PreparedDelivery:
    """A subscription's delivery as :meth:`DeliveryKind.prepare` accepted it."""

    stored: Mapping[str, Any]
    """What the host keeps with the subscription (JSON values; secrets included)."""
    shown: Mapping[str, Any]
    """What the answer to the creating request shows, once (a generated secret included)."""


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    """One notification to push to one subscription."""

    subscription: str
    """The subscription's name."""
    owner: str | None
    """The username that created it (``None`` with auth off)."""
    delivery: Mapping[str, Any]
    """:attr:`PreparedDelivery.stored` of the subscription."""
    notification: ConsumedNotification
    attempt: int
    """1 for the first attempt, then 2, 3, ..."""


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """How one attempt went: ``delivered``, or ``retry`` (a transient failure), or
    ``gone`` (the receiver asked for the subscription to stop; it is disabled)."""

    outcome: str
    error: str | None = None
    """Why it was not delivered, in words safe to show to the subscription's owner."""


class DeliveryKind(ABC):
    """Pushes a subscription's notifications somewhere (a webhook, a queue, a chat).

    Selected by ``delivery.kind`` in a subscription's definition; a subscription without a
    ``delivery`` is pulled over Server-Sent Events and needs no delivery kind. Constructed
    once at startup with ``options`` (the configuration section ``subscriptions.<kind>``,
    checked against ``options_schema`` with its defaults filled in).
    """

    kind: ClassVar[str]
    """The ``delivery.kind`` value that selects this delivery."""

    options_schema: ClassVar[Mapping[str, Any]] = {"type": "object"}
    """JSON Schema of the configuration section ``subscriptions.<kind>``."""

    delivery_schema: ClassVar[Mapping[str, Any]] = {"type": "object"}
    """JSON Schema of a subscription's ``delivery`` object (``kind`` included), checked
    before :meth:`prepare`; a violation is answered 400."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options

    async def start(self) -> None:
        """Acquire resources (HTTP clients) on the serving event loop."""

    async def close(self) -> None:
        """Release what ``start`` acquired."""

    @abstractmethod
    async def prepare(self, delivery: Mapping[str, Any]) -> PreparedDelivery:
        """Check a new subscription's delivery beyond its schema (a URL it may not reach)
        and complete it (a generated secret); raise :class:`InvalidValue` to refuse it
        with a 400 whose message is shown to the client."""

    @property
    def retry_delays(self) -> Sequence[float]:
        """Seconds to wait before each retry of a notification answered ``retry``; once
        they are used up it is dead-lettered. By default none: dead-lettered at once."""
        return ()

    def public_view(self, stored: Mapping[str, Any]) -> Mapping[str, Any]:
        """The delivery as listings show it: secrets left out. By default ``kind`` only."""
        return {"kind": stored.get("kind", self.kind)}

    @abstractmethod
    async def deliver(self, attempt: DeliveryAttempt) -> DeliveryResult:
        """Push one notification; never raise for a receiver's failure (answer
        ``retry`` or ``gone``). The host calls it in sequence order per subscription,
        one notification at a time per subscription."""
