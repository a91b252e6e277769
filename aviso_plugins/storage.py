"""Storage backends: store notifications, page history and fan live records out; and the
resources a backend's instances in every worker process share."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from aviso_plugins.state import ProcessLocalState, SharedState
from aviso_plugins.topics import TopicPattern

__all__ = [
    "ACTOR_METADATA",
    "MESSAGE_ID_METADATA",
    "BackendCapabilities",
    "BackendContext",
    "BackendMetrics",
    "Batch",
    "LiveSink",
    "MessageIdNotRetained",
    "MessageIdRefused",
    "MessageIdReused",
    "SharedResources",
    "StartCursor",
    "StorageBackend",
    "StoredNotification",
    "Subscription",
    "UnknownStream",
    "Writer",
    "notification_fingerprint",
    "publishing_writer",
    "stored_identifier",
]


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
    replayed: bool = False
    """Set by ``publish`` only: nothing was stored, because this very notification (same
    topic, payload and metadata) is the one already stored under its message id. The host
    answers the notify 200 with ``Idempotent-Replayed: true``."""


def stored_identifier(record: StoredNotification) -> dict[str, str]:
    """The canonical identifier stored with a notification (``metadata["identifier"]``:
    every field's canonical value by name); empty if it predates that."""
    raw = record.metadata.get("identifier")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


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


class BackendMetrics:
    """Where a backend reports what only it can see.

    The host passes a recorder that exports it (see ``docs/metrics.md``); this base records
    nothing, so a backend can always report. Operation counts and latencies are measured by
    the host around the backend's calls, whatever the backend reports.
    """

    def message_ids_evicted_early(self, reason: str, count: int = 1) -> None:
        """``count`` remembered message ids (``Idempotency-Key``) were forgotten before
        their duplicate window ended: ``writer_budget`` (the writer's own budget for the
        stream was full) or ``total_budget`` (all remembered ids were at their bound, and
        the writer holding the most gave up its oldest)."""


@dataclass(frozen=True, slots=True)
class BackendContext:
    """What the host hands a backend at construction."""

    options: Mapping[str, Any]
    """The backend's own section, ``notification_backend.<kind>``, as configured."""
    storage_policies: Mapping[str, Mapping[str, Any]]
    """``storage_policy`` blocks by topic base (only schemas that set one)."""
    metrics: BackendMetrics = field(default_factory=BackendMetrics)
    """Where to report backend-specific figures (records nothing unless the host exports
    them)."""


@dataclass(frozen=True, slots=True)
class Writer:
    """Who sent a notification, for what a backend budgets per writer (the message ids it
    remembers): the authenticated caller's username, else the client's address.

    Both ``None`` for a publish nobody can be named for (``publish`` called directly, e.g.
    by a sink); those share one budget.
    """

    username: str | None = None
    address: str | None = None


_NOBODY = Writer()
_PUBLISHING_WRITER: ContextVar[Writer | None] = ContextVar("aviso_publishing_writer", default=None)


def publishing_writer() -> Writer:
    """Inside ``StorageBackend.publish`` called through ``publish_from``: the writer it was
    called for; ``Writer()`` (nobody named) otherwise. Per task, so concurrent publishes
    each see their own."""
    return _PUBLISHING_WRITER.get() or _NOBODY


class MessageIdRefused(ValueError):
    """A message id seen on the stream within the duplicate window came back, and the
    notification cannot be confirmed as the one stored under it; nothing was stored.

    Raised (as one of its subclasses) by ``StorageBackend.publish``/``publish_from``; the
    host answers 422 with ``code``, naming the client's key.
    """

    code: ClassVar[str]
    """The error code the API answers (sinks reject the row with it)."""

    def __init__(self, message_id: str, message: str) -> None:
        super().__init__(message)
        self.message_id = message_id


class MessageIdReused(MessageIdRefused):
    """The message id was stored with a different notification (topic, payload or
    metadata)."""

    code: ClassVar[str] = "IDEMPOTENCY_KEY_REUSED"

    def __init__(self, message_id: str) -> None:
        super().__init__(
            message_id,
            f"Idempotency-Key '{message_id}' was already used for a different notification",
        )


class MessageIdNotRetained(MessageIdRefused):
    """The notification stored under the message id is no longer retained (replaced by a
    newer one on its topic, deleted, purged or expired), so it cannot be compared."""

    code: ClassVar[str] = "IDEMPOTENCY_KEY_NOT_RETAINED"

    def __init__(self, message_id: str) -> None:
        super().__init__(
            message_id,
            f"The notification stored under Idempotency-Key '{message_id}' is no longer "
            "retained, so this one cannot be confirmed as its re-send",
        )


class StorageBackend(ABC):
    """Stores notifications, pages history and fans live records out to subscribers."""

    kind: ClassVar[str]
    """The ``notification_backend.kind`` value that selects this backend."""

    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities()

    options_schema: ClassVar[Mapping[str, Any]] = {"type": "object"}
    """JSON Schema of ``notification_backend.<kind>``; checked whatever kind is selected.

    For the selected kind it applies even when the section is absent, ``"default"`` values
    are filled in and ``"writeOnly": true`` marks a secret (never shown or logged)."""

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Refuse unusable options at startup (and in ``aviso-server config check``), before
        any plugin is constructed: raise :class:`ConfigurationProblem` with the key path from
        the document root (``("notification_backend", kind, key)``). Runs only for the
        selected kind, on its section as it passed ``options_schema`` (defaults filled in),
        so rules that matter only once this backend is used live here. The default accepts
        everything."""

    shared_between_processes: ClassVar[bool] = False
    """Whether instances in several processes see one store (a server they all connect to).

    ``False`` (the default, e.g. in-memory): each process has a store of its own, so the host
    refuses ``aviso-server serve --workers N`` with more than one worker (each would have its
    own history) and ``aviso-server spark publish --sink backend`` (rows published by a Spark
    executor would never reach the server)."""

    def __init__(self, context: BackendContext) -> None:
        self.context = context
        self._process_local_state: dict[str, ProcessLocalState] = {}

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
        """Store durably, fan out, and return the stored record; raise on failure.

        With a message id (:data:`MESSAGE_ID_METADATA`) seen on the stream within the
        backend's duplicate window, a backend that de-duplicates stores nothing. It returns
        the stored record with ``replayed`` set only when that record is still retained and
        is this same notification (topic, payload and metadata, the message id and
        :data:`ACTOR_METADATA` aside); otherwise it raises :class:`MessageIdReused` (a
        different notification) or :class:`MessageIdNotRetained` (the record is gone). A
        2xx to a notify promises that its notification is the one stored under its key.
        """

    async def publish_from(
        self, writer: Writer, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> StoredNotification:
        """:meth:`publish` on behalf of ``writer``: what ``POST /api/v1/notification``
        calls. By default it calls :meth:`publish`, inside which :func:`publishing_writer`
        answers ``writer``: a backend that keeps something per writer (the message ids it
        remembers) reads it there, and subclasses overriding ``publish`` keep working."""
        token = _PUBLISHING_WRITER.set(writer)
        try:
            return await self.publish(topic, payload, metadata)
        finally:
            _PUBLISHING_WRITER.reset(token)

    @abstractmethod
    async def fetch_batch(self, pattern: TopicPattern, start: StartCursor, limit: int) -> Batch:
        """Return at most ``limit`` stored records matching ``pattern`` from ``start``."""

    @abstractmethod
    async def subscribe(self, pattern: TopicPattern, sink: LiveSink) -> Subscription:
        """Deliver every matching record stored after this call returns; raise on failure."""

    @abstractmethod
    async def wipe_stream(self, name: str) -> None:
        """Remove every message of one stream (topic base); the stream stays usable.

        Raise :class:`UnknownStream` when the backend holds no stream of that name.
        """

    @abstractmethod
    async def wipe_all(self) -> None:
        """Remove every stored message."""

    @abstractmethod
    async def delete_message(self, stream: str, sequence: int) -> bool:
        """Remove one message; ``False`` when it does not exist."""

    async def pruned_through(self, stream: str) -> int:
        """The highest sequence of ``stream`` removed from history (retention, limits,
        wipes, deletes), 0 when nothing was; used to tell a resuming client about a gap.

        The default (0) means the backend cannot tell, so no gap is ever reported.
        """
        return 0

    async def history_bound(self, pattern: TopicPattern) -> int | None:
        """``H``: the highest sequence allocated so far in the stream(s) ``pattern`` reads,
        0 when none was. Must not scan history.

        The host asks once per cursor stream, after the live subscription exists (watch) or
        at set-up (replay): the replay reads ``<= H``, live delivery starts ``> H``, so the
        seam between them neither loses nor repeats a record, and a replay's ``to_id`` is
        capped at ``H``. The default, ``None``, means the backend cannot tell: the replay
        then ends where the stored history ends and the seam is the last sequence it read.
        """
        return None

    async def first_sequence_after(self, pattern: TopicPattern, time_ns: int) -> int | None:
        """The first sequence stored strictly after ``time_ns`` (storage time, nanoseconds
        since the epoch) among the records ``pattern`` reads, ``None`` when none is.

        It resolves a replay's ``to_date`` (the replay ends just before it), so it must
        search, not scan history; ``time_ns`` may lie far outside what the store can
        represent (negative, or beyond 2262). A backend may answer for the whole stream
        instead of the pattern (an earlier sequence that ends the replay at the same
        records). The default reads a one-record history page from ``time_ns + 1``, which
        is as fast as :meth:`fetch_batch` positions a time cursor.
        """
        batch = await self.fetch_batch(pattern, StartCursor(from_time_ns=time_ns + 1), 1)
        return batch.messages[0].sequence if batch.messages else None

    async def ready(self) -> bool:
        """Whether the backend can serve requests now (``GET /ready``): its connection is up
        and its storage usable. Called for every readiness probe, so it must be cheap, answer
        within about a second and never read or write notifications.

        The default (``True``) suits a backend without a connection to lose.
        """
        return True

    async def shared_state(
        self, bucket: str, ttl_seconds: float | None = None
    ) -> SharedState | None:
        """The shared-state bucket named ``bucket`` (a :func:`~aviso_plugins.state.valid_key`
        segment), created on first use; every call with one name answers the same bucket,
        in every process that shares this backend's store. With ``ttl_seconds`` its entries
        expire that long after their last write (a bucket's TTL is fixed by its first use).

        The default suits a backend that is not :attr:`shared_between_processes`: buckets in
        this process's memory. A shared backend that keeps no shared state returns ``None``,
        and the features that need it (consumer positions, subscriptions) are refused at
        startup, naming the backend.
        """
        if type(self).shared_between_processes:
            return None
        buckets = self._process_local_state
        if bucket not in buckets:
            buckets[bucket] = ProcessLocalState(ttl_seconds)
        return buckets[bucket]

    async def shutdown(self) -> None:
        """Release connections; called once after the HTTP server stopped."""


class SharedResources(ABC):
    """What a backend's instances in every worker process share (e.g. a server they all
    connect to), run once by the process that supervises the workers: see the
    ``aviso_backend_shared_resources`` hook. ``aviso-server serve`` uses it with one process
    too, so a backend behaves alike whatever the number of workers.
    """

    @abstractmethod
    def start(self, lost: Callable[[str], None]) -> Mapping[str, str]:
        """Start (blocking; raise to fail startup with a clear message) before any worker
        starts, and return overrides of the backend's own options: option name -> text, applied
        to every worker's configuration as ``AVISOSERVER_NOTIFICATION_BACKEND__<KIND>__<NAME>``
        would be (so ``""`` reads as an empty string).

        Call ``lost(reason)`` (from any thread, once) when the resource is gone for good: the
        service then stops its workers and exits non-zero with ``reason`` on one line.
        """

    @abstractmethod
    def stop(self) -> None:
        """Release everything, once every worker has exited; must not raise."""


ACTOR_METADATA = "aviso_actor"
"""The metadata key carrying the authenticated publisher (``StorageBackend.publish``).

The host sets it on every notify by an authenticated caller, and never from anything the
client sent: the username as JSON string text (quotes included, ``"alice"``), so that
any character survives transport headers. Backends store and return it like any other
metadata; it is delivered as the ``publisher`` CloudEvent attribute. Absent for anonymous
publishes.
"""

MESSAGE_ID_METADATA = "Nats-Msg-Id"
"""The metadata key carrying a producer's message id (``StorageBackend.publish``).

JetStream de-duplicates on this header within its stream's duplicate window; backends
without de-duplication store it like any other metadata.
"""


class UnknownStream(LookupError):
    """A backend holds no stream of the name an admin operation gave (answered 404)."""


_NOT_COMPARED = frozenset((MESSAGE_ID_METADATA, ACTOR_METADATA))


def notification_fingerprint(topic: str, payload: str, metadata: Mapping[str, str]) -> bytes:
    """A 16-byte digest of what a notification says: its topic, its payload and its metadata
    without :data:`MESSAGE_ID_METADATA` and :data:`ACTOR_METADATA` (the same notification
    re-sent by another caller is the same notification). Equal digests, same notification:
    what ``StorageBackend.publish`` compares to tell a re-send (``replayed``) from a reused
    message id (:class:`MessageIdReused`)."""
    digest = hashlib.blake2b(digest_size=16)
    parts = [topic, payload]
    for key in sorted(metadata):
        if key not in _NOT_COMPARED:
            parts += (key, metadata[key])
    for part in parts:
        data = part.encode()
        # Length-prefixed, so that no two different part lists hash the same text.
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.digest()
