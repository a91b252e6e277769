"""Sinks: publish notifications for a producer (e.g. a Spark job) somewhere."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from aviso_plugins.storage import StorageBackend

__all__ = [
    "Notification",
    "NotificationPlanner",
    "PlannedNotification",
    "Sink",
    "SinkContext",
    "SinkOutcome",
    "SinkRejected",
    "SinkUnavailable",
]


@dataclass(frozen=True, slots=True)
class PlannedNotification:
    """A validated notification, ready for ``StorageBackend.publish``."""

    topic: str
    payload: str
    """Canonical compact JSON text of the payload."""
    metadata: dict[str, str]
    """Always holds ``identifier``: the canonical identifier as compact JSON text."""


class NotificationPlanner(Protocol):
    """The host's notify validation and topic building, handed to sinks by their caller.

    Plugins cannot import the host; an application (the Spark data source) builds a
    planner from its configuration and passes it in :class:`SinkContext`.
    """

    def plan(
        self, event_type: str, identifier: Mapping[str, Any], payload: Any
    ) -> PlannedNotification:
        """Validate and canonicalise exactly like ``POST /api/v1/notification``;
        raise :class:`SinkRejected` (code and message as the API would answer)."""


@dataclass(frozen=True, slots=True)
class Notification:
    """One notification a producer wants published."""

    event_type: str
    identifier: Mapping[str, Any]
    payload: Any
    message_id: str | None = None
    """Deterministic id of this notification; sinks pass it on so a re-send is dropped."""
    planned: PlannedNotification | None = None
    """The result of ``SinkContext.planner.plan`` for this notification, when the producer
    already validated it (the Spark writer does, once per row). A sink that publishes to a
    store uses it as is instead of validating again; a sink that forwards elsewhere (``http``)
    ignores it, since the receiver validates."""


@dataclass(frozen=True, slots=True)
class SinkContext:
    """What the caller of a sink hands it at construction."""

    options: Mapping[str, Any]
    """The sink's own options (they usually come from Spark ``.option(...)``): text, except
    where the sink's ``options_schema`` types a key, defaults filled in."""
    planner: NotificationPlanner | None = None
    """Host validation; required by sinks that bypass the HTTP API."""
    backend_factory: Callable[[], StorageBackend] | None = None
    """Builds the configured (not yet started) storage backend, for the ``backend`` sink."""


@dataclass(frozen=True, slots=True)
class SinkOutcome:
    """How one notification fared: published (``error`` is ``None``) or rejected."""

    retries: int = 0
    """Attempts beyond the first that a transient failure cost."""
    error: SinkRejected | None = None


class SinkRejected(Exception):
    """This notification can never be published as it is (retrying cannot help).

    ``code`` is the API's error code (e.g. ``INVALID_NOTIFICATION_REQUEST``); ``message``
    is the human-readable reason.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class SinkUnavailable(RuntimeError):
    """Publishing failed for a reason that may pass (server or store down) and the sink's
    own retries are exhausted; the caller should fail the task so it is retried later."""


class Sink(ABC):
    """Publishes notifications for a producer (e.g. a Spark job) somewhere.

    Constructed with a :class:`SinkContext`; ``__init__`` raises ``ValueError`` for
    unusable options. The caller runs ``start``, any number of ``publish_batch`` calls and
    ``close`` on one event loop.
    """

    name: ClassVar[str]
    """The sink name producers select, e.g. ``"http"``."""

    options_schema: ClassVar[Mapping[str, Any]] = {"type": "object"}
    """JSON Schema of the sink's options, applied before construction: text is converted
    where it asks for an integer, number or boolean, ``"default"`` values are filled in and
    ``"writeOnly": true`` marks a secret (masked in error messages). Keys it does not type
    stay text."""

    def __init__(self, context: SinkContext) -> None:
        self.context = context

    async def start(self) -> None:
        """Acquire connections."""

    async def close(self) -> None:
        """Release what ``start`` acquired."""

    @abstractmethod
    async def publish_batch(self, notifications: Sequence[Notification]) -> list[SinkOutcome]:
        """Publish every notification; return one outcome each, in order.

        A notification that can never succeed gets an outcome with ``error`` set; a
        transient failure is retried inside the sink and, once retries are exhausted,
        raised as :class:`SinkUnavailable` for the whole batch (the caller re-sends it;
        message ids make the re-send harmless).
        """
