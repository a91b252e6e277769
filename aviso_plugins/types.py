"""Base types plugin authors implement, and the value types the host exchanges with them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from aviso_plugins.topics import TopicPattern

# -- field handlers ----------------------------------------------------------------------


class InvalidValue(ValueError):
    """A client-supplied value was rejected; ``message`` is safe to show to the client.

    ``details`` is the deepest cause (for example the number parser's reason); it defaults
    to ``message`` when there is only one cause.
    """

    def __init__(self, message: str, details: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details if details is not None else message


ConstraintPredicate = Callable[[str], bool]
"""Tests one stored canonical value (never empty, never ``*``) against a constraint."""


class FieldHandler(ABC):
    """Validates and canonicalises one identifier field of one event type.

    A subclass is instantiated once per schema field at startup with the field's
    definition (the mapping under ``identifier.<field>`` in the configuration, explicit
    ``null`` values already removed). The host has already checked the definition against
    ``options`` (types, required keys, no unknown keys) before calling ``__init__``;
    ``__init__`` may raise ``ValueError`` for semantic problems (for example a range whose
    minimum exceeds its maximum), which fails startup naming the event type and field.
    """

    type_name: ClassVar[str]
    """The ``type:`` value that selects this handler, e.g. ``"IntHandler"``."""

    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    """Extra definition keys this type allows, each with the JSON Schema of its value."""

    required_options: ClassVar[frozenset[str]] = frozenset()
    """Extra definition keys that must be present."""

    operators: ClassVar[frozenset[str]] = frozenset()
    """Constraint operators accepted on watch/replay; empty means scalars only."""

    spatial: ClassVar[bool] = False
    """True when canonical values are polygons usable by the spatial filter."""

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        self.field = field
        self.definition = definition
        self.required: bool = definition["required"]

    @abstractmethod
    def canonicalise(self, text: str) -> str:
        """Return the canonical text of a client value or raise :class:`InvalidValue`."""

    def compile_constraint(self, operator: str, operand: Any) -> ConstraintPredicate:
        """Turn ``{operator: operand}`` into a predicate or raise :class:`InvalidValue`.

        Only called with an operator listed in ``operators``.
        """
        raise InvalidValue(
            f"Field '{self.field}' does not support constraint filters; expected scalar value"
        )

    def polygon(self, canonical: str) -> Sequence[tuple[float, float]]:
        """Return the ``(lat, lon)`` vertices of a canonical value (spatial handlers only)."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """The public schema view of this field (``GET /api/v1/schema``).

        Every option is shown, unset ones as ``null``; ``description`` only when configured.
        """
        view: dict[str, Any] = {"type": self.type_name, "required": self.required}
        for name in self.options:
            if name != "description":
                view[name] = self.definition.get(name)
        if "description" in self.definition:
            view["description"] = self.definition["description"]
        return view


# -- storage -----------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class StoredNotification:
    """One stored notification as a backend returns it.

    ``rendered`` is a cache owned by the host: the CloudEvent JSON is built once per record
    and shared by every stream that delivers it, so backends should hand the same object
    to every live subscriber.
    """

    sequence: int
    topic: str
    """The encoded wire subject (tokens percent-encoded, joined by ``.``)."""
    payload: str
    """Canonical compact JSON text of the payload, ``null`` when there was none."""
    time_ns: int
    """Storage time, nanoseconds since the Unix epoch (UTC)."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    rendered: bytes | None = None


@dataclass(frozen=True, slots=True)
class StartCursor:
    """Where history starts: ``sequence >= from_sequence`` or ``time >= from_time_ns``.

    Both ``None`` means the oldest retained message.
    """

    from_sequence: int | None = None
    from_time_ns: int | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    """One page of history, ascending by sequence."""

    messages: Sequence[StoredNotification]
    has_more: bool
    """Whether another call may return more messages."""
    next_sequence: int | None
    """The cursor for the next call; ``None`` when nothing was examined."""

    @property
    def last_sequence(self) -> int | None:
        return self.messages[-1].sequence if self.messages else None


@dataclass(frozen=True, slots=True)
class BackendCapabilities:
    """Which ``storage_policy`` keys a backend honours; unsupported keys fail startup."""

    retention_time: bool = False
    max_messages: bool = False
    max_size: bool = False
    allow_duplicates: bool = False
    compression: bool = False


class LiveSink(Protocol):
    """Receives a live subscription's records; implemented by the host."""

    def deliver(self, record: StoredNotification) -> None:
        """Accept one record; never blocks (the host bounds and polices its own queue)."""

    def end(self, reason: str) -> None:
        """The feed ended for good (for example the connection to the store was lost)."""


class Subscription(Protocol):
    async def close(self) -> None:
        """Stop delivering; idempotent."""


@dataclass(frozen=True, slots=True)
class BackendContext:
    """What the host hands a backend at construction."""

    options: Mapping[str, Any]
    """The backend's own section, ``notification_backend.<kind>``, as configured."""
    storage_policies: Mapping[str, Mapping[str, Any]]
    """``storage_policy`` blocks by topic base (only schemas that set one)."""


class StorageBackend(ABC):
    """Stores notifications, pages history and fans live records out to subscribers."""

    kind: ClassVar[str]
    """The ``notification_backend.kind`` value that selects this backend."""

    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities()

    options_schema: ClassVar[Mapping[str, Any]] = {"type": "object"}
    """JSON Schema of ``notification_backend.<kind>``; checked whatever kind is selected."""

    def __init__(self, context: BackendContext) -> None:
        self.context = context

    @property
    def live_buffer_size(self) -> int:
        """Records a live subscriber may fall behind before the host gives up on it."""
        return 1024

    async def start(self) -> None:
        """Connect; raise to fail startup with a clear message."""

    @abstractmethod
    async def publish(
        self, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> StoredNotification:
        """Store durably, fan out, and return the stored record; raise on failure."""

    @abstractmethod
    async def fetch_batch(self, pattern: TopicPattern, start: StartCursor, limit: int) -> Batch:
        """Return at most ``limit`` stored records matching ``pattern`` from ``start``."""

    @abstractmethod
    async def subscribe(self, pattern: TopicPattern, sink: LiveSink) -> Subscription:
        """Deliver every matching record stored after this call returns; raise on failure."""

    @abstractmethod
    async def wipe_stream(self, name: str) -> None:
        """Remove every message of one stream (topic base); the stream stays usable."""

    @abstractmethod
    async def wipe_all(self) -> None:
        """Remove every stored message."""

    @abstractmethod
    async def delete_message(self, stream: str, sequence: int) -> bool:
        """Remove one message; ``False`` when it does not exist."""

    async def shutdown(self) -> None:
        """Release connections; called once after the HTTP server stopped."""


# -- authentication and authorisation -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated user."""

    username: str
    realm: str
    roles: frozenset[str]


class AuthError(Exception):
    """Authentication failed; ``status`` is 401, 403 or 503 and ``message`` client-safe."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class AuthProvider(ABC):
    """Resolves the caller of a request from its headers (``auth.mode`` selects one)."""

    mode: ClassVar[str]

    def __init__(self, auth_options: Mapping[str, Any]) -> None:
        self.options = auth_options

    @abstractmethod
    async def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        """Return the caller, ``None`` when no credentials were sent, or raise AuthError."""


class StreamAuthoriser(ABC):
    """An extra read check a stream opts into through ``auth.plugins`` (e.g. ``ecpds``)."""

    name: ClassVar[str]

    @abstractmethod
    async def authorise(
        self, caller: Caller, event_type: str, identifier: Mapping[str, str]
    ) -> None:
        """Return when the caller may read; raise AuthError otherwise."""


class Sink(ABC):
    """Publishes validated notifications for a producer (e.g. a Spark job) somewhere."""

    name: ClassVar[str]

    @abstractmethod
    async def publish(self, event_type: str, identifier: Mapping[str, Any], payload: Any) -> None:
        """Publish one notification; raise on failure."""
