"""Base types plugin authors implement, and the value types the host exchanges with them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
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

VALUE_KINDS = frozenset({"text", "integer", "float", "date", "time", "enum", "polygon", "point"})
"""The value kinds the schema API names (``FieldHandler.value_kind``): how a client such as
the browser console should ask for a value. A client treats a kind it does not know as text."""


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
    """True when values are coordinates: the handler implements ``canonicalise_value`` and
    receives raw JSON values (arrays included) instead of scalar text."""

    point_cloud: ClassVar[bool] = False
    """True (with ``spatial``) when canonical values are point clouds, stored on notify and
    matched against a subscriber's ``polygon``; otherwise a spatial value is a polygon."""

    value_kind: ClassVar[str | None] = None
    """The kind of value, one of ``VALUE_KINDS``, published with ``operators`` by the schema
    API. ``None`` derives it: ``point`` (a list of ``[lat, lon]`` points) for a point-cloud
    handler, ``polygon`` for another spatial one, ``text`` otherwise."""

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

    def canonicalise_value(self, value: Any, max_vertices: int | None) -> str:
        """Spatial handlers only: the canonical text of a raw JSON value, or raise
        :class:`InvalidValue`. ``max_vertices`` is the service's polygon vertex limit."""
        raise NotImplementedError

    def polygon(self, canonical: str) -> Sequence[tuple[float, float]]:
        """Return the ``(lat, lon)`` vertices of a canonical value (spatial handlers only)."""
        raise NotImplementedError

    @classmethod
    def kind(cls) -> str:
        """``value_kind``, or the kind derived when the handler declares none."""
        if cls.value_kind is not None:
            return cls.value_kind
        if cls.point_cloud:
            return "point"
        return "polygon" if cls.spatial else "text"

    def describe(self) -> dict[str, Any]:
        """The public schema view of this field (``GET /api/v1/schema``).

        Every option is shown, unset ones as ``null``; ``description`` only when configured;
        then ``value_kind`` and the sorted constraint ``operators`` (reserved names: an
        option of either name is not shown).
        """
        view: dict[str, Any] = {"type": self.type_name, "required": self.required}
        for name in self.options:
            if name != "description":
                view[name] = self.definition.get(name)
        if "description" in self.definition:
            view["description"] = self.definition["description"]
        view["value_kind"] = self.kind()
        view["operators"] = sorted(self.operators)
        return view

    def example_value(self) -> Any:
        """A value of this field that ``canonicalise`` (or, for spatial handlers,
        ``canonicalise_value``) accepts, as a client would send it in JSON: the request
        examples of the API description (``/api-docs/openapi.json``) are built from it.

        ``None`` (the default) leaves the host to find one by trying a few common values.
        """
        return None


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
    replayed: bool = False
    """Set by ``publish`` only: nothing was stored, because this very notification (same
    topic, payload and metadata) is the one already stored under its message id. The host
    answers the notify 200 with ``Idempotent-Replayed: true``."""


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

    shared_between_processes: ClassVar[bool] = False
    """Whether instances in several processes see one store (a server they all connect to).

    ``False`` (the default, e.g. in-memory): each process has a store of its own, so the host
    refuses ``aviso-server serve --workers N`` with more than one worker (each would have its
    own history) and ``aviso-server spark publish --sink backend`` (rows published by a Spark
    executor would never reach the server)."""

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


# -- authentication and authorisation -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated user, as a provider resolved it.

    ``realm`` and ``roles`` drive every decision (admin, stream roles): a caller without a
    realm matches no realm-role map. ``attributes`` are carried for plugins, unused by the
    host.
    """

    username: str
    realm: str | None = None
    roles: frozenset[str] = frozenset()
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False)
    expires_at: float | None = None
    """When the credential expires (seconds since the epoch, a JWT's ``exp``): streams it
    opened are closed then. ``None``: it does not expire."""


class UnknownStream(LookupError):
    """A backend holds no stream of the name an admin operation gave (answered 404)."""


class AuthError(Exception):
    """Authentication or authorisation refused; the host answers with the auth error body.

    ``status`` is 401, 403, 503 (no verdict could be reached) or 500 (an aviso-side
    defect); ``message`` is shown to the client, so it must never carry a secret or an
    upstream service's own error text.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class MalformedCredentials(AuthError):
    """The credentials themselves are unusable, e.g. a malformed header (always 401).

    The host answers 401 with ``message`` on admin paths and treats the request as
    anonymous everywhere else, so providers must raise this, not a plain
    :class:`AuthError`, for header defects.
    """

    def __init__(self, message: str) -> None:
        super().__init__(401, message)


class RequestHeaders(Mapping[str, str]):
    """A request's header fields, read-only: names case-insensitive, values as sent.

    Values are the bytes decoded as latin-1, so nothing is lost (non-ASCII bytes show as
    characters above U+007E). As a mapping, a name gives its *first* field; use
    :meth:`get_list` for every field of a repeated name.
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: Sequence[tuple[str, str]]) -> None:
        self._fields = tuple((name.lower(), value) for name, value in fields)

    @classmethod
    def from_raw(cls, raw: Sequence[tuple[bytes, bytes]]) -> RequestHeaders:
        """From ASGI header pairs (``scope["headers"]``)."""
        return cls([(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw])

    def __getitem__(self, name: str) -> str:
        wanted = name.lower()
        for field_name, value in self._fields:
            if field_name == wanted:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(name for name, _ in self._fields))

    def __len__(self) -> int:
        return len({name for name, _ in self._fields})

    def get_list(self, name: str) -> list[str]:
        """Every value of ``name``, in the order sent."""
        wanted = name.lower()
        return [value for field_name, value in self._fields if field_name == wanted]

    def __repr__(self) -> str:  # values may be credentials: never shown
        return f"RequestHeaders({sorted(self)})"


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """What an :class:`AuthProvider` sees of one request: read-only, no body.

    ``path`` is the path as the router sees it (below any mount prefix, percent-decoded);
    ``client`` is the peer address of the connection (``None`` when the server does not
    know it). Behind a proxy the peer is the proxy: trusting a forwarded header such as
    ``X-Forwarded-For`` or a client-certificate header is the provider's decision.
    """

    method: str
    path: str
    headers: RequestHeaders
    client: str | None = None

    @property
    def authorization(self) -> str | None:
        """The first ``Authorization`` header, ``None`` when there is none."""
        return self.headers.get("authorization")

    @property
    def cookies(self) -> Mapping[str, str]:
        """The ``Cookie`` header(s) as name -> value (the first of a repeated name wins)."""
        cookies: dict[str, str] = {}
        for header in self.headers.get_list("cookie"):
            for pair in header.split(";"):
                name, equals, value = pair.strip().partition("=")
                if equals and name:
                    cookies.setdefault(name, value.strip().strip('"'))
        return cookies


class AuthProvider(ABC):
    """Resolves the caller of a request from what it sent (an :class:`AuthRequest`).

    ``auth.mode`` selects one provider when ``auth.enabled`` is true. The host constructs it
    once with ``options``: the validated ``auth`` section with every default applied, keys
    ``enabled``, ``mode``, ``auth_o_tron_url``, ``jwt_secret``, ``timeout_ms``,
    ``admin_roles`` (realm -> tuple of roles) and ``mode_options`` (the mode's own section
    ``auth.<mode>``, checked against ``options_schema`` with its ``default`` values filled
    in, whether or not the section is present). Any exception ``__init__`` raises fails
    startup (and ``aviso-server config check``) with one line naming the plugin and the key.
    """

    mode: ClassVar[str]
    """The ``auth.mode`` value that selects this provider."""

    challenges: ClassVar[tuple[str, ...]] = ("Bearer",)
    """``WWW-Authenticate`` values sent, one header field each and in order, with every 401."""

    options_schema: ClassVar[Mapping[str, Any] | None] = None
    """JSON Schema of the provider's own section ``auth.<mode>``; ``None`` forbids one.

    ``"default"`` values are filled in; a property marked ``"writeOnly": true`` is a secret,
    never shown by ``config check`` nor written to logs or error messages."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options

    async def start(self) -> None:
        """Acquire resources (HTTP clients) on the serving event loop."""

    async def close(self) -> None:
        """Release what ``start`` acquired; called once after the HTTP server stopped."""

    @abstractmethod
    async def authenticate(self, request: AuthRequest) -> Caller | None:
        """Resolve one request's caller from its method, path, headers and client address.

        Return ``None`` for an anonymous request, raise :class:`MalformedCredentials` for
        unusable credentials and :class:`AuthError` when they are refused or cannot be
        checked.

        Providers written for aviso-py 0.x declared ``authenticate(self, authorization)``
        and received only the ``Authorization`` header value: the host still calls those
        that way (it recognises a first parameter named ``authorization`` or annotated as
        text) and logs a deprecation warning at startup.
        """


class AuthoriserMetrics:
    """Where an authoriser reports what only it can see: cache lookups, upstream fetches and
    its own detailed decision outcomes.

    The host passes a recorder that exports them (see ``docs/metrics.md``); this base
    records nothing, so an authoriser can always report. Decisions and their latency are
    measured by the host around every ``authorise``/``reauthorise`` call, whatever the
    authoriser reports.
    """

    def decision(self, outcome: str) -> None:
        """One evaluation ended with ``outcome`` (one of ``decision_outcomes``), in the
        authoriser's own words (``deny_destination``, not just "deny")."""

    def cache_lookup(self, hit: bool) -> None:
        """A lookup was served from the cache (``hit``) or had to wait for a fetch."""

    def fetch(self, outcome: str) -> None:
        """This evaluation performed one upstream fetch, with the merged ``outcome``."""

    def cache_size(self, size: int) -> None:
        """The cache now holds ``size`` entries."""


class ConfigurationProblem(ValueError):
    """A configuration rule an authoriser's :meth:`StreamAuthoriser.check_configuration`
    found broken: raised it stops startup, returned it is a startup warning.

    ``path`` is the key path from the document root (``("ecpds", "servers", 0)``); the host
    prints ``ecpds.servers[0]: <message>``.
    """

    def __init__(self, path: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.path = tuple(path)
        self.message = message


@dataclass(frozen=True, slots=True)
class AuthoriserConfiguration:
    """What :meth:`StreamAuthoriser.check_configuration` may look at."""

    options: Mapping[str, Any]
    """The authoriser's section, shape-checked, with the schema's top-level defaults."""
    configured: bool
    """Whether the document has the section at all."""
    streams: tuple[str, ...]
    """Event types whose ``auth.plugins`` list this authoriser, in configuration order."""
    schemas: Mapping[str, Mapping[str, Any]]
    """The whole ``notification_schema`` section, shape-checked."""
    field_handlers: Mapping[str, type[FieldHandler]]
    """Registered field handler classes by ``type`` name."""


class StreamAuthoriser(ABC):
    """An extra read check a stream opts into through ``auth.plugins`` (e.g. ``ecpds``).

    Constructed once, only when some stream lists ``name``, with ``options`` (the top-level
    configuration section named ``name``, checked against ``options_schema``, its top-level
    ``default`` values filled in; ``{}`` when the class declares no schema) and ``metrics``
    to report to (a recorder of nothing when the host passes none).
    """

    name: ClassVar[str]
    """The name streams list in ``auth.plugins``, and of the top-level section it claims."""

    options_schema: ClassVar[Mapping[str, Any] | None] = None
    """JSON Schema (Draft 2020-12) of the top-level section ``name``, which the authoriser
    then owns; ``"default"`` of a top-level property fills in an absent key. ``None``: no
    section is claimed."""

    decision_outcomes: ClassVar[tuple[str, ...]] = ()
    """The outcomes reported through ``metrics.decision``, exported at 0 from startup."""

    fetch_outcomes: ClassVar[tuple[str, ...]] = ()
    """The outcomes reported through ``metrics.fetch``, exported at 0 from startup."""

    dedicated_metrics: ClassVar[bool] = False
    """Also export ``aviso_<name>_access_decisions_total{outcome}``,
    ``aviso_<name>_fetch_total{outcome}``, ``aviso_<name>_cache_hits_total``,
    ``aviso_<name>_cache_misses_total`` and ``aviso_<name>_cache_size`` (the names the
    specification pins for ``ecpds``), beside the generic ``aviso_authoriser_*`` families."""

    def __init__(
        self, options: Mapping[str, Any], metrics: AuthoriserMetrics | None = None
    ) -> None:
        self.options = options
        self.metrics = metrics or AuthoriserMetrics()

    @classmethod
    def check_configuration(
        cls, configuration: AuthoriserConfiguration
    ) -> Sequence[ConfigurationProblem]:
        """Rules beyond the section's shape, across sections (e.g. a key that must name a
        declared identifier field). Called at startup and by ``aviso-server config check``
        only when some stream lists the authoriser, after the host's stream and auth rules.
        Raise :class:`ConfigurationProblem` to refuse; return the ones that are warnings."""
        return ()

    async def start(self) -> None:
        """Acquire resources (HTTP clients) on the serving event loop."""

    async def close(self) -> None:
        """Release what ``start`` acquired; called once after the HTTP server stopped."""

    @property
    def recheck_seconds(self) -> float:
        """How often a stream this authoriser admitted is checked again while open (0: never)."""
        return 0.0

    async def reauthorise(
        self, caller: Caller, event_type: str, identifier: Mapping[str, str]
    ) -> None:
        """Check an open stream again: a 403 :class:`AuthError` ends it; any other failure
        leaves it open until the next check. By default the same as :meth:`authorise`."""
        await self.authorise(caller, event_type, identifier)

    @abstractmethod
    async def authorise(
        self, caller: Caller, event_type: str, identifier: Mapping[str, str]
    ) -> None:
        """Return when ``caller`` may read; raise :class:`AuthError` otherwise.

        Runs on watch/replay only, after identifier validation, never for admins.
        ``identifier`` holds the canonical value of every field the request named
        (wildcards included as ``*``; constraint objects as their compact JSON text).
        """


# -- sinks (producers) ----------------------------------------------------------------------

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
    already_stored: bool = False
    """Published, and the store already held this very notification under its message id
    (an earlier run's, or an earlier attempt's): nothing was stored again."""


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


# -- notification consumers -----------------------------------------------------------------


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


# -- subscription delivery kinds ------------------------------------------------------------


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
