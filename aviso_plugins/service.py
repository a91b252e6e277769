"""What the running service offers a plugin that serves API routes or runs for the server's
lifetime: the object the hooks ``aviso_api_routes``, ``aviso_startup`` and ``aviso_shutdown``
receive (one per service, the same object in each of its hooks).

Through it a plugin reads the configuration, reaches the storage backend, answers with
aviso's error object, validates and admits stream requests exactly as ``/api/v1/watch``
does, opens event streams with the watch's frames, heartbeats, backpressure, re-authorisation
and shutdown, and registers its own Prometheus metrics, without importing the host.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from aviso_plugins.auth import Caller
from aviso_plugins.consumers import ConsumedNotification
from aviso_plugins.deliveries import DeliveryKind
from aviso_plugins.state import SharedState
from aviso_plugins.storage import StorageBackend, StoredNotification
from aviso_plugins.topics import TopicPattern

if TYPE_CHECKING:
    # Annotations only: discovering plugins (``aviso-server --help``) imports this module.
    from prometheus_client import CollectorRegistry
    from starlette.requests import Request
    from starlette.types import ASGIApp

    from aviso_plugins.openapi import OpenApiSources

__all__ = [
    "AVISO_LOGGER",
    "ECHO_LIMIT",
    "AdmittedStream",
    "ApiRefusal",
    "Handler",
    "OpenedStream",
    "ServiceAccess",
    "StreamControl",
    "StreamRequest",
    "StreamSelection",
    "Summary",
    "SummaryLimitReached",
    "TypeLayout",
    "Wakeup",
    "echoed",
    "log_event",
    "log_failure",
]

AVISO_LOGGER = "aviso"
"""The logger whose records the host writes as structured lines (``logging.format``)."""

Handler = Callable[["Request"], Awaitable["ASGIApp"]]
"""An API endpoint: the request in, the ASGI app answering it out."""


ECHO_LIMIT = 200
"""Characters of client input a message or log line may repeat (:func:`echoed`)."""


def echoed(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` (which may repeat client input) cut to ``limit`` characters, with a marker
    saying how much was left out, so a huge input never makes a huge answer or log line."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def log_event(
    event_name: str,
    message: str,
    level: int = logging.INFO,
    exc_info: BaseException | None = None,
    **fields: Any,
) -> None:
    """Log a named event as the host does: ``event_name`` and ``fields`` become top-level
    keys of the JSON line, beside the request id of the request being served."""
    logging.getLogger(AVISO_LOGGER).log(
        level, message, exc_info=exc_info, extra={"fields": {"event_name": event_name, **fields}}
    )


def log_failure(event_name: str, message: str, exc: BaseException, **log_fields: Any) -> None:
    """Log an internal failure once, at error level, with the exception's text and
    traceback (configured secrets are masked in every line)."""
    log_event(
        event_name,
        f"{message}: {type(exc).__name__}: {exc}",
        logging.ERROR,
        exc_info=exc,
        **log_fields,
    )


class Wakeup:
    """A live sink (``StorageBackend.subscribe``) that only says something was stored: the
    record is read from history, so a slow reader never holds a queue."""

    __slots__ = ("ended", "event")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.ended = False
        """The subscription ended (the backend's connection lost): subscribe again."""

    def deliver(self, record: StoredNotification) -> None:
        self.event.set()

    def end(self, reason: str) -> None:
        self.ended = True
        self.event.set()


class ApiRefusal(Exception):
    """A request refused with the aviso error object (``code``, ``error``, ``message``,
    ``details``, ``request_id``), raised from an endpoint wrapped by
    :meth:`ServiceAccess.api_endpoint`, and raised by the service's own checks."""

    def __init__(
        self,
        status: int,
        code: str,
        error: str,
        message: str,
        *,
        details: str | None = None,
        extra: Mapping[str, Any] | None = None,
        with_details: bool = True,
        event_name: str = "api.request.validation.failed",
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.error = error
        self.message = message
        self.details = details if details is not None else message
        self.extra = dict(extra or {})
        self.with_details = with_details
        self.event_name = event_name
        """What the refusal is logged as (at warning level; 5xx at error level)."""
        # Extra response header fields; a name may repeat (``WWW-Authenticate``).
        self.headers = tuple(headers)


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """A watch's body, as :meth:`ServiceAccess.read_stream_request` parsed it."""

    event_type: str
    identifier: dict[str, Any]
    from_id: str | None = None
    from_date: str | None = None
    payload: Any = None
    """``None`` when absent or JSON null."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """The members the endpoint allowed beyond a watch's, as sent (absent or null left out)."""
    to_id: str | None = None
    to_date: str | None = None
    """A replay's end, which every other endpoint refuses."""


class StreamSelection(Protocol):
    """Which stored notifications a stream request selects."""

    @property
    def pattern(self) -> TopicPattern:
        """What the backend matches (``fetch_batch``, ``subscribe``)."""
        ...

    async def select(self, records: Sequence[StoredNotification]) -> list[StoredNotification]:
        """The records of a batch the request's identifier accepts, in order."""
        ...


@dataclass(frozen=True, slots=True)
class AdmittedStream:
    """A stream request that passed every check a watch passes."""

    selection: StreamSelection
    from_sequence: int | None
    """The request's ``from_id``, parsed."""
    from_time_ns: int | None
    """The request's ``from_date``, as a storage time."""


class StreamControl(Protocol):
    """An open event stream, as its plugin may end it."""

    @property
    def stop_reason(self) -> str | None:
        """Why it is ending; ``None`` while it runs."""
        ...

    def stop(self, reason: str) -> None:
        """End it with the control event ``reason`` (``end_of_stream``)."""
        ...


@dataclass(frozen=True, slots=True)
class TypeLayout:
    """An event type's identifier fields, as its schema declares them."""

    event_type: str
    fields: tuple[str, ...]
    """Every identifier field, in declaration order."""
    topic_fields: tuple[str, ...]
    """The fields whose values follow the base in the topic, in order: field ``i`` is the
    topic's token ``i + 1``."""


class Summary(Protocol):
    """What a summary stream (:meth:`ServiceAccess.summary_stream`) writes in place of the
    notifications it selects: its state once history is taken in (a snapshot), then again
    at most once per debounce window in which it changed (an update)."""

    @property
    def event(self) -> str:
        """The SSE event name of the snapshot and the updates."""
        ...

    def add(self, record: StoredNotification) -> bool:
        """Take in one selected notification (history first, then live, in sequence order);
        ``True`` when what :meth:`render` writes changed. Raises
        :class:`SummaryLimitReached` instead of growing past the summary's limit; any other
        exception is logged and ends the stream without a summary, as a failed history read
        ends a watch (``stream_processing_failed``, then ``end_of_stream``)."""
        ...

    def render(self, members: Mapping[str, Any]) -> bytes:
        """The event's data: compact JSON on one line, with ``members`` (``type``:
        ``snapshot`` or ``update``, ``topic``, ``timestamp``, ``request_id``) among its own.
        A render that raises, or gives anything but bytes without a line break (nor an
        :attr:`event` with one), ends the stream as a failed :meth:`add` does."""
        ...


class SummaryLimitReached(Exception):
    """Raised by :meth:`Summary.add`: taking the notification in would pass the summary's
    limit. The stream writes no further summary: an ``error`` event (``code``, ``message``,
    ``details``' members, ``topic``, ``request_id``), then ``connection-closing`` with reason
    ``code`` and message ``closing`` (reconnecting would fail the same way: clients do not
    reconnect on such a reason)."""

    def __init__(
        self, code: str, message: str, closing: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.closing = closing
        self.details = dict(details or {})


@dataclass(frozen=True, slots=True)
class OpenedStream:
    """An event stream ready to answer its request."""

    app: ASGIApp
    """Answers the request (an error answer when the stream could not be opened)."""
    control: StreamControl | None
    """Ends it; ``None`` when ``app`` is an error answer."""


class ServiceAccess(Protocol):
    """The running service, as plugins see it (implemented by the host)."""

    @property
    def backend(self) -> StorageBackend:
        """The configured storage backend (started before ``aviso_startup``)."""
        ...

    @property
    def backend_kind(self) -> str:
        """``notification_backend.kind``."""
        ...

    @property
    def auth_enabled(self) -> bool:
        """Whether requests are authenticated (``auth.enabled``)."""
        ...

    @property
    def keeps_shared_state(self) -> bool:
        """Whether the backend can keep shared state (:meth:`StorageBackend.shared_state`)."""
        ...

    @property
    def max_json_depth(self) -> int:
        """``limits.max_json_depth``: refuse request bodies nested deeper."""
        ...

    @property
    def replay_batch_size(self) -> int:
        """``watch.replay_batch_size``: how many records to read per history page."""
        ...

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """Where the plugin registers its Prometheus collectors (served on ``/metrics``,
        summed over workers as the host's own)."""
        ...

    @property
    def delivery_kinds(self) -> Mapping[str, type[DeliveryKind]]:
        """The delivery kinds the plugins provide (``aviso_delivery_kinds``), by kind."""
        ...

    def section(self, name: str) -> Mapping[str, Any]:
        """The top-level configuration section ``name``: validated, with every default
        filled in, when the host declares it; as written otherwise (``{}`` when absent)."""
        ...

    def options(self, section: str, name: str, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        """The options ``<section>.<name>`` (a delivery kind's ``subscriptions.<kind>``) with
        every default of ``schema`` filled in (checked against it when loaded)."""
        ...

    async def leases(self) -> SharedState:
        """The shared-state bucket of leases (see :mod:`aviso_plugins.leases`)."""
        ...

    def api_endpoint(self, handler: Handler) -> Handler:
        """``handler`` answering as the API does: the service started first, an
        :class:`ApiRefusal` turned into the aviso error object (and logged), any other
        exception into the generic 500 (logged, its text never shown)."""
        ...

    def stream_endpoint(self, handler: Handler) -> ASGIApp:
        """:meth:`api_endpoint` for a route that answers with an event stream, as an ASGI app
        for a Starlette ``Route`` (the request stays suspended while its stream lives)."""
        ...

    def caller(self, request: Request) -> Caller | None:
        """Who the request authenticated as; ``None`` when anonymous or auth is off."""
        ...

    def request_id(self, request: Request) -> str:
        """The request's id (``X-Request-ID``)."""
        ...

    def authentication_required(self, message: str) -> ApiRefusal:
        """The 401 the auth provider answers an anonymous request with (its challenges)."""
        ...

    def json_response(self, document: Any, status: int = 200) -> ASGIApp:
        """``document`` as aviso writes JSON (compact, keys sorted)."""
        ...

    def validation_error(self, endpoint: str, message: str) -> ApiRefusal:
        """The 400 a request of ``endpoint`` (``"watch"``, ``"subscription"``) gets for an
        invalid member, with that endpoint's code and label."""
        ...

    def parse_error(self, endpoint: str, code: str, message: str) -> ApiRefusal:
        """The 400 of ``code`` a request of ``endpoint`` gets for a body it cannot read."""
        ...

    def missing_member(self, endpoint: str, name: str) -> ApiRefusal:
        """The 400 ``INVALID_REQUEST_SHAPE`` a request of ``endpoint`` gets without its
        required member ``name``, in the words of a watch's."""
        ...

    def invalid_type(self, endpoint: str, value: Any, expected: str) -> ApiRefusal:
        """The 400 ``INVALID_REQUEST_SHAPE`` for a member whose JSON ``value`` is not of the
        ``expected`` kind (``"a sequence"``, ``"an integer"``), in the words of a watch's."""
        ...

    async def read_stream_request(
        self, request: Request, endpoint: str, extra_fields: tuple[str, ...] = ()
    ) -> StreamRequest:
        """Read and parse a watch's body (``extra_fields``: members allowed beyond a watch's),
        refused with ``endpoint``'s errors as the watch refuses it."""
        ...

    async def admit(
        self, caller: Caller | None, body: StreamRequest, endpoint: str
    ) -> AdmittedStream:
        """A watch's checks, in order: event type, the stream's roles, identifier, start
        point, topic size, the stream's authorisers; raises :class:`ApiRefusal`."""
        ...

    async def event_stream(
        self,
        request: Request,
        caller: Caller | None,
        body: StreamRequest,
        *,
        endpoint: str,
        route: str,
        start_sequence: int,
        on_delivered: Callable[[StreamControl], Callable[[int], Awaitable[None]]],
    ) -> OpenedStream:
        """A watch of ``body`` from ``start_sequence``: history, then live, in a watch's
        frames with ``id: <sequence>`` on each notification, re-authorised as a watch.
        ``on_delivered(control)`` gives what is awaited with the highest sequence of each
        write before it is sent. ``route`` labels its metrics. Admission refusals raise."""
        ...

    async def summary_stream(
        self,
        request: Request,
        body: StreamRequest,
        *,
        endpoint: str,
        route: str,
        summarise: Callable[[TypeLayout | None], Summary],
        debounce_ms: int,
    ) -> ASGIApp:
        """A watch of ``body`` whose notifications are taken into a :class:`Summary`: every
        notification retained (from ``from_id`` / ``from_date`` when given), then live.

        Admitted as a watch (:meth:`admit`), with ``summarise`` run after the request's own
        checks and before the stream's authorisers: it gets the event type's layout
        (``None`` for a schema-less request) and returns the summary, or raises
        :class:`~aviso_plugins.fields.InvalidValue` to refuse the request with
        ``endpoint``'s validation error. The stream keeps a watch's heartbeats, maximum
        duration, backpressure, re-authorisation and shutdown; a failed live subscription
        ends it with ``end_of_stream`` after the snapshot. ``route`` labels its metrics."""
        ...

    def consumed_notification(
        self, event_type: str, record: StoredNotification
    ) -> ConsumedNotification:
        """``record`` with the CloudEvent a watch delivers for it; ``ValueError`` when it
        cannot be rendered."""
        ...

    def openapi_sources(self) -> OpenApiSources:
        """What the API description states of this service: its version, event schemas,
        limits and endpoints' refusals, and every plugin's part of the document (what the
        built-in plugin ``openapi`` builds the document from)."""
        ...
