"""Typed, immutable settings: the configuration after loading and validation.

Each section of the configuration document is declared here once, as a frozen dataclass
(:mod:`aviso_plugins.shapes`): its JSON Schema (validation, text conversion, "did you
mean"), its defaults and its typed value all come from the declaration. Handlers receive only
the part they need; nothing re-reads the raw document after startup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema
from pydantic.json_schema import SkipJsonSchema

from aviso_plugins.shapes import shape

LOG_LEVELS = ("trace", "debug", "info", "warn", "error")

Count = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
AboveZero = Annotated[int, Field(gt=0)]
"""Positive, refused as "must be greater than 0" (``Positive`` names its minimum of 1)."""
Seconds = Annotated[float, Field(gt=0)]
Port = Annotated[int, Field(ge=0, le=65535)]
RoleMap = Mapping[str, tuple[str, ...]]
"""Realm -> role names."""


def _log_level(level: Any) -> str:
    text = level.lower() if isinstance(level, str) else ""
    return text if text in LOG_LEVELS else "info"


def _log_format(value: Any) -> str:
    return "text" if value == "text" else "json"


@shape()
@dataclass(frozen=True, slots=True)
class HomepageSettings:
    """``application.homepage``: the links the landing page shows (absolute http(s) URLs)."""

    client_documentation_url: str = "https://pyaviso.readthedocs.io/"
    client_repository_url: str = "https://github.com/ecmwf/pyaviso"
    server_documentation_url: str = "https://sites.ecmwf.int/docs/aviso-server/"
    server_repository_url: str = "https://github.com/ecmwf/aviso-server"


DEFAULT_HOMEPAGE_URLS: Mapping[str, str] = {
    item.name: item.default for item in fields(HomepageSettings) if isinstance(item.default, str)
}


@shape()
@dataclass(frozen=True, slots=True)
class ApplicationSettings:
    host: str
    port: Port
    base_url: str = "http://localhost"
    static_files_path: str = "/app/static"
    homepage: HomepageSettings = HomepageSettings()
    workers: Annotated[int, Field(ge=1)] | Annotated[str, Field(pattern="^auto$")] = 1
    """Worker processes ``aviso-server serve`` runs, or ``"auto"``: one per usable core."""


@shape()
@dataclass(frozen=True, slots=True)
class LoggingSettings:
    # Unconstrained: an unusable level means info, never a failure.
    level: Annotated[str, BeforeValidator(_log_level), WithJsonSchema({})] = "info"
    """One of trace, debug, info, warn, error (lower case); anything else became info."""
    # Any value is accepted (aviso-server files carry others): it warns and keeps JSON.
    format: Annotated[str, BeforeValidator(_log_format), WithJsonSchema({})] = "json"
    """``text``: one readable line per record; ``json`` (anything else became it): JSON lines."""


@shape(closed=True)
@dataclass(frozen=True, slots=True)
class AuthSettings:
    enabled: bool = False
    mode: str = "direct"
    """``direct``, ``trusted_proxy`` or a mode an installed plugin provides."""
    auth_o_tron_url: str = ""
    jwt_secret: str = ""
    admin_roles: RoleMap = field(default_factory=dict)
    timeout_ms: Count = 5000
    mode_options: SkipJsonSchema[Mapping[str, Any]] = field(default_factory=dict)
    """The selected mode's own section ``auth.<mode>`` (plugin modes only), ``{}`` if absent."""


@shape()
@dataclass(frozen=True, slots=True)
class MetricsSettings:
    enabled: bool = False
    host: str = "127.0.0.1"
    port: Port | None = None


@dataclass(frozen=True, slots=True)
class BackendSettings:
    kind: str
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Every ``notification_backend.<kind>`` mapping as configured (types coerced)."""

    @property
    def options(self) -> Mapping[str, Any]:
        """The selected backend's own section."""
        return self.sections.get(self.kind, {})


@shape()
@dataclass(frozen=True, slots=True)
class WatchSettings:
    """``watch_endpoint``."""

    # A zero in these stalls or spins the streaming loops instead of meaning anything useful.
    sse_heartbeat_interval_sec: AboveZero = 30
    connection_max_duration_sec: AboveZero = 3600
    replay_batch_size: AboveZero = 100
    max_historical_notifications: Count = 10000
    replay_batch_delay_ms: Count = 100
    concurrent_notification_processing: AboveZero = 15
    max_queue_bytes: AboveZero = 1_048_576
    """Bytes of live notifications a stream may hold for a client that reads too slowly."""
    on_backpressure: Literal["disconnect", "drop"] = "disconnect"
    """``disconnect`` (close with ``slow_consumer`` and the resume point) or ``drop``."""
    bulk_readers: tuple[str, ...] = ()
    """Users whose replays are not paced, matched by name in every realm (``*``: every
    caller, anonymous included: anyone reaching the server reads at the backend's speed)."""
    bulk_replay_batch_size: AboveZero = 1000
    """Notifications per replay page for a bulk reader (``replay_batch_size`` if larger)."""


@shape(closed=True)
@dataclass(frozen=True, slots=True)
class LimitSettings:
    """The ``limits`` section: what one request or connection may cost (docs/guarantees.md).

    Every limit is enforced before the backend is touched and answered with a documented
    error, the same on every backend.
    """

    max_body_bytes: Positive = 262_144
    """Request body (chunked bodies included); over it: 413."""
    max_json_depth: Positive = 64
    """Nesting of arrays/objects in a request body or a JWT payload; over it: 400."""
    max_header_bytes: Positive = 65_536
    """All request header lines together; over it the connection gets 431."""
    header_timeout_seconds: Seconds = 10.0
    """Time a client has to send its whole request head once it sent the first byte."""
    body_timeout_seconds: Seconds = 30.0
    """Time a client has to send its whole request body once its head is complete; over
    it: 408 (or the connection closed when the request was answered already)."""
    idle_timeout_seconds: Seconds = 5.0
    """Time an open connection may sit without starting a request (new, or between
    keep-alive requests: uvicorn's own keep-alive default, which clients already meet)."""
    max_connections: Positive = 10_000
    """Concurrent client connections; beyond it new requests are answered 503 (``GET
    /health`` and ``/ready`` excepted)."""
    max_connections_per_client: Count = 0
    """Concurrent connections from one client address; beyond it new requests are answered
    429 (``GET /health`` and ``/ready`` excepted). 0: no such limit (the default: behind
    a reverse proxy every client has the proxy's address)."""
    max_identifier_value_bytes: Positive = 1_024
    """UTF-8 bytes of one identifier value (notify, watch, replay filters)."""
    max_payload_bytes: Positive = 262_144
    """Serialised JSON bytes of a notification's payload."""
    max_topic_bytes: Positive = 3_072
    """Bytes of a notification's encoded topic or a stream's topic pattern: the JetStream
    subject, which must fit nats-server's protocol line (4 KiB by default)."""
    max_polygon_vertices: Positive = 10_000
    """Vertices of one polygon (stored or filter)."""
    max_aggregate_groups: Positive = 1_000
    """Distinct groups one aggregate stream may count."""
    # Above the largest debounce_ms allowed, every aggregate would be refused.
    min_aggregate_debounce_ms: Annotated[int, Field(ge=0, le=60_000)] = 100
    """Smallest ``debounce_ms`` an aggregate request may ask for."""


@shape()
@dataclass(frozen=True, slots=True)
class TopicSettings:
    base: str
    key_order: tuple[str, ...]


@shape(closed=True)
@dataclass(frozen=True, slots=True)
class StreamAuthSettings:
    required: bool
    read_roles: RoleMap | None = None
    write_roles: RoleMap | None = None
    plugins: tuple[str, ...] = ()


@shape(closed=True)
@dataclass(frozen=True, slots=True)
class PayloadBlock:
    required: bool


@shape()
@dataclass(frozen=True, slots=True)
class StoragePolicy:
    """Per-stream storage; a backend declares one capability flag per key it honours."""

    retention_time: str | None = None
    max_messages: int | None = None
    max_size: str | None = None
    allow_duplicates: bool | None = None
    compression: bool | None = None


@shape()
@dataclass(frozen=True, slots=True)
class EventSchemaBlock:
    """A ``notification_schema.<event type>`` entry as written (its ``identifier`` field
    definitions are the field handlers' to declare)."""

    identifier: Mapping[str, Any]
    topic: TopicSettings | None = None
    endpoint: TopicSettings | None = None
    payload: PayloadBlock | None = None
    auth: StreamAuthSettings | None = None
    max_historical_notifications: Positive | None = None
    storage_policy: StoragePolicy | None = None


@dataclass(frozen=True, slots=True)
class SchemaSettings:
    """One ``notification_schema`` entry."""

    event_type: str
    identifier: Mapping[str, Mapping[str, Any]]
    """Field name -> definition, explicit nulls removed, in configuration order."""
    topic: TopicSettings | None = None
    payload_required: bool | None = None
    """``None`` when the schema has no ``payload`` block (payload optional)."""
    auth: StreamAuthSettings | None = None
    storage_policy: Mapping[str, Any] | None = None
    max_historical_notifications: int | None = None
    """Overrides ``watch_endpoint.max_historical_notifications`` for this event type."""


@dataclass(frozen=True, slots=True)
class Settings:
    application: ApplicationSettings
    backend: BackendSettings
    logging: LoggingSettings = LoggingSettings()
    auth: AuthSettings = AuthSettings()
    metrics: MetricsSettings = MetricsSettings()
    watch: WatchSettings = WatchSettings()
    limits: LimitSettings = LimitSettings()
    schemas: Mapping[str, SchemaSettings] = field(default_factory=dict)
    schemas_configured: bool = False
    """False when ``notification_schema`` is absent (the schema endpoint says so)."""
    strict: bool = False
    """Effective ``notification_schema_strict``."""
    authorisers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Stream authoriser name -> the options it is constructed with (its top-level section
    over its schema's defaults), for every registered authoriser."""
    document: Mapping[str, Any] = field(default_factory=dict)
    """The effective configuration document (explicit nulls dropped, text converted), for
    ``aviso-server config check`` (redact before use)."""
    warnings: tuple[str, ...] = ()
    """Problems that do not stop startup; logged once logging is configured."""
    unknown: tuple[str, ...] = ()
    """The warnings about keys and ``AVISOSERVER_*`` variables nobody reads (also in
    ``warnings``): errors under ``aviso-server config check --strict``."""
    secret_paths: frozenset[tuple[str | int, ...]] = frozenset()
    """Key paths of ``document`` that plugin options schemas mark ``writeOnly`` (secret)."""
    plugin_sections: frozenset[tuple[str | int, ...]] = frozenset()
    """Key paths of the sections plugins own (``auth.<mode>``...): named by plugins, so their
    keys are not redacted for sounding secret (``api_keys``)."""
    secrets: frozenset[str] = frozenset()
    """The text of every secret value, masked wherever free text is written (logs, errors)."""
    files: tuple[str, ...] = ()
    """The configuration files read, in merge order (``load_settings``; none: environment
    alone, or a document built in code)."""

    def watch_for(self, event_type: str, user: str | None = None) -> WatchSettings:
        """The watch settings of ``user``'s streams of ``event_type``: its schema's replay
        cap applied, and no replay pacing for a bulk reader."""
        watch = self.watch
        readers = watch.bulk_readers
        if readers and ("*" in readers or (user is not None and user in readers)):
            size = max(watch.replay_batch_size, watch.bulk_replay_batch_size)
            watch = replace(watch, replay_batch_delay_ms=0, replay_batch_size=size)
        schema = self.schemas.get(event_type)
        if schema is None or schema.max_historical_notifications is None:
            return watch
        return replace(watch, max_historical_notifications=schema.max_historical_notifications)


SECTIONS: Mapping[str, type[Any]] = {
    "application": ApplicationSettings,
    "logging": LoggingSettings,
    "auth": AuthSettings,
    "metrics": MetricsSettings,
    "watch_endpoint": WatchSettings,
    "limits": LimitSettings,
}
"""The host's own top-level sections and their declarations (the backend, the schemas and
the sections plugins own are composed from the loaded plugins)."""
