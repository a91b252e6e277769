"""Prometheus metrics of one service, and their listener (docs/metrics.md).

The routes, the stream and the auth steps each record through one call into this module;
the backend is instrumented once, here, not in each backend plugin. Under ``serve
--workers`` every gauge says how the workers' values aggregate (``multiprocess_mode``),
which one process ignores.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter as Tally
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from functools import partial, wraps
from typing import Any, Final, Protocol, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from aviso_host.errors import UNKNOWN_EVENT_TYPE_CODE, ApiError
from aviso_host.request_id import RequestIdMiddleware
from aviso_plugins._shared.idempotency import EVICTION_REASONS
from aviso_plugins.types import (
    AuthError,
    AuthoriserMetrics,
    BackendMetrics,
    StorageBackend,
    StreamAuthoriser,
)

HTTP_METHODS = frozenset(
    ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE")
)
UNMATCHED_ROUTE = "unmatched"
ERROR_ROUTE = "error"
WATCH_ROUTE = "/api/v1/watch"
REPLAY_ROUTE = "/api/v1/replay"
SSE_ROUTES = (WATCH_ROUTE, REPLAY_ROUTE)

GENERIC_LABEL = "generic"
UNKNOWN_LABEL = "unknown"
NOTIFY_SUCCESS, NOTIFY_ERROR, NOTIFY_REJECTED = "success", "error", "rejected"

BACKEND_OPERATIONS = {
    # operation label -> StorageBackend method; subscriptions are not measured. Notify
    # publishes through ``publish_from`` (whose default calls ``publish``).
    "publish": "publish_from",
    "get_batch": "fetch_batch",
    "wipe_stream": "wipe_stream",
    "wipe_all": "wipe_all",
    "delete_message": "delete_message",
}
AUTH_MODES = ("direct", "trusted_proxy")
AUTH_OUTCOMES = {401: "unauthorized", 403: "forbidden", 503: "service_unavailable"}
AUTHORISER_DECISIONS = ("allow", "deny", "unauthenticated", "unavailable", "error", "admin_bypass")
"""What the host records per stream authoriser call (``aviso_authoriser_decisions_total``)."""
_DECISION_BY_STATUS = {401: "unauthenticated", 403: "deny", 503: "unavailable"}

REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
CONNECTION_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400)

# How a gauge of several worker processes (``serve --workers``) is aggregated; counters and
# histograms are always summed. ``live``: a worker's values leave the sum when it exits.
SUMMED: Final = "livesum"
"""Open streams, requests in flight, cache entries: the service's figure is the workers' sum."""
SAME_IN_EVERY_WORKER: Final = "livemax"
"""Build information: every worker reports the same series."""

_Result = TypeVar("_Result")


def _families(
    registry: CollectorRegistry,
) -> tuple[partial[Counter], partial[Gauge], partial[Histogram]]:
    """Constructors of ``registry``'s counters, summed gauges and request-timed histograms."""
    return (
        partial(Counter, registry=registry),
        partial(Gauge, registry=registry, multiprocess_mode=SUMMED),
        partial(Histogram, registry=registry, buckets=REQUEST_BUCKETS),
    )


class _WithoutCreated:
    """The registry as scraped: no ``_created`` samples, without touching the
    process-wide switch ``disable_created_metrics()`` that other registries would feel."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            samples = [s for s in metric.samples if not s.name.endswith("_created")]
            if len(samples) != len(metric.samples):
                metric.samples = samples
            yield metric


class AuthoriserFamilies:
    """The generic ``aviso_authoriser_*`` families, one series per authoriser label."""

    def __init__(self, registry: CollectorRegistry) -> None:
        counter, summed, timed = _families(registry)
        by_outcome = ["authoriser", "outcome"]
        self.decisions = counter(
            "aviso_authoriser_decisions", "Stream authoriser decisions", by_outcome
        )
        self.outcomes = counter(
            "aviso_authoriser_outcomes",
            "Detailed decision outcomes a stream authoriser reports",
            by_outcome,
        )
        self.duration = timed(
            "aviso_authoriser_decision_duration_seconds",
            "Time a stream authoriser took to decide",
            ["authoriser"],
        )
        self.cache_lookups = counter(
            "aviso_authoriser_cache_lookups",
            "Stream authoriser cache lookups",
            ["authoriser", "result"],
        )
        self.cache_size = summed(
            "aviso_authoriser_cache_size", "Entries in a stream authoriser's cache", ["authoriser"]
        )
        self.fetches = counter(
            "aviso_authoriser_fetches", "Stream authoriser upstream fetches", by_outcome
        )


class _DedicatedFamilies:
    """``aviso_<name>_*``: an authoriser's own families, for names a specification pins."""

    def __init__(self, cls: type[StreamAuthoriser], registry: CollectorRegistry) -> None:
        counter, summed, _ = _families(registry)
        name, prefix = cls.name, f"aviso_{cls.name}"
        self.decisions = counter(
            f"{prefix}_access_decisions", f"{name} authoriser decisions", ["outcome"]
        )
        self.fetches = counter(f"{prefix}_fetch", f"Upstream {name} fetches", ["outcome"])
        self.hits = counter(f"{prefix}_cache_hits", f"{name} cache hits")
        self.misses = counter(f"{prefix}_cache_misses", f"{name} cache misses")
        self.size = summed(f"{prefix}_cache_size", f"Cached {name} entries")
        for outcome in cls.decision_outcomes:
            self.decisions.labels(outcome)
        for outcome in cls.fetch_outcomes:
            self.fetches.labels(outcome)


class AuthoriserRecorder(AuthoriserMetrics):
    """One authoriser's series: what it reports, and what the host measures around it."""

    def __init__(
        self, cls: type[StreamAuthoriser], families: AuthoriserFamilies, registry: CollectorRegistry
    ) -> None:
        self.name = cls.name
        self._families = families
        self._dedicated = _DedicatedFamilies(cls, registry) if cls.dedicated_metrics else None
        for outcome in AUTHORISER_DECISIONS:
            families.decisions.labels(self.name, outcome)
        for outcome in cls.decision_outcomes:
            families.outcomes.labels(self.name, outcome)
        families.duration.labels(self.name)
        for result in ("hit", "miss"):
            families.cache_lookups.labels(self.name, result)
        families.cache_size.labels(self.name)
        for outcome in cls.fetch_outcomes:
            families.fetches.labels(self.name, outcome)

    # -- reported by the authoriser ---------------------------------------------------------

    def decision(self, outcome: str) -> None:
        self._families.outcomes.labels(self.name, outcome).inc()
        if self._dedicated is not None:
            self._dedicated.decisions.labels(outcome).inc()

    def cache_lookup(self, hit: bool) -> None:
        self._families.cache_lookups.labels(self.name, "hit" if hit else "miss").inc()
        if self._dedicated is not None:
            (self._dedicated.hits if hit else self._dedicated.misses).inc()

    def fetch(self, outcome: str) -> None:
        self._families.fetches.labels(self.name, outcome).inc()
        if self._dedicated is not None:
            self._dedicated.fetches.labels(outcome).inc()

    def cache_size(self, size: int) -> None:
        self._families.cache_size.labels(self.name).set(size)
        if self._dedicated is not None:
            self._dedicated.size.set(size)

    # -- measured by the host ---------------------------------------------------------------

    def admin_bypass(self) -> None:
        """An admin skipped this authoriser (it was not called)."""
        self._families.decisions.labels(self.name, "admin_bypass").inc()
        self.decision("admin_bypass")

    async def judge(self, check: Awaitable[None]) -> None:
        """Await one ``authorise``/``reauthorise`` call, recording its outcome and latency."""
        started = time.perf_counter()
        try:
            await check
        except AuthError as exc:
            self._decided(_DECISION_BY_STATUS.get(exc.status, "error"), started)
            raise
        except Exception:
            self._decided("error", started)
            raise
        # A cancelled call (the client left, the stream closed) decided nothing.
        self._decided("allow", started)

    def _decided(self, outcome: str, started: float) -> None:
        self._families.decisions.labels(self.name, outcome).inc()
        self._families.duration.labels(self.name).observe(time.perf_counter() - started)


class PendingCount:
    """Increments of one counter series gathered in a plain integer and added to it once
    per event-loop turn: a live event reaching thousands of streams costs the counter (a
    lock, and under ``--workers`` a write to its shared file) once, not once per stream."""

    __slots__ = ("_child", "count")

    def __init__(self, child: Counter) -> None:
        self._child = child
        self.count = 0
        """Not yet added; whoever makes it non-zero calls :meth:`flush_soon`."""

    def flush_soon(self) -> None:
        asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        count, self.count = self.count, 0
        self._child.inc(count)


class SseConnection:
    """One watch/replay stream's view of the SSE families (its labels fixed at setup)."""

    __slots__ = ("_event_type", "_metrics", "_opened_at", "_route", "_sent", "_user")

    def __init__(self, metrics: Metrics, route: str, event_type: str, user: str | None) -> None:
        self._metrics = metrics
        self._route = route
        self._event_type = event_type
        self._user = user
        self._opened_at = 0.0
        self._sent: PendingCount | None = None

    def opened(self) -> None:
        metrics, route = self._metrics, self._route
        metrics.sse_total.labels(route, self._event_type).inc()
        metrics.sse_active.labels(route, self._event_type).inc()
        if self._user is not None:
            users = metrics.sse_users[route]
            users[self._user] += 1
            metrics.sse_unique_users.labels(route).set(len(users))
        self._opened_at = time.monotonic()

    def closed(self, stop_reason: str | None) -> None:
        metrics, route = self._metrics, self._route
        metrics.sse_active.labels(route, self._event_type).dec()
        metrics.sse_duration.labels(route).observe(time.monotonic() - self._opened_at)
        if self._user is not None:
            users = metrics.sse_users[route]
            users[self._user] -= 1
            if users[self._user] <= 0:
                del users[self._user]
            metrics.sse_unique_users.labels(route).set(len(users))
        if stop_reason == "slow_consumer":
            metrics.slow_consumer_disconnects.labels(route).inc()

    def events_sent(self, count: int) -> None:
        if count:
            pending = self.sent_count()
            if not pending.count:
                pending.flush_soon()
            pending.count += count

    def sent_count(self) -> PendingCount:
        """Where this stream's notification frames are counted, shared by every stream of
        the same labels (a live delivery adds to it for every watcher)."""
        pending = self._sent
        if pending is None:
            pending = self._sent = self._metrics.events_sent_of(self._route, self._event_type)
        return pending

    def stream_error(self) -> None:
        self._metrics.sse_stream_errors.labels(self._route, self._event_type).inc()

    def notifications_skipped(self, count: int) -> None:
        self._metrics.notifications_skipped.labels(self._route).inc(count)

    def history_gap(self) -> None:
        self._metrics.history_gaps.labels(self._route).inc()


NOTIFY_HELP = "Notify outcomes"
MULTIPROCESS_DIRECTORY_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
"""Where prometheus-client keeps a process's values when set at its import: a worker's of
``serve --workers`` (:mod:`aviso_host.worker_metrics`)."""


class NotificationTally:
    """``aviso_notifications_total``: plain integers per (event type label, status), read
    when the registry is collected (a scrape), instead of a locked Prometheus counter per
    notify. In a worker of ``serve --workers`` (``counter`` set) each count goes to that
    counter as well, whose multiprocess file is what the supervisor reads."""

    __slots__ = ("counter", "counts")

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.counter: Counter | None = None

    def declare(self, event_type_label: str, status: str) -> None:
        """A series present at zero from startup."""
        self.counts.setdefault((event_type_label, status), 0)
        if self.counter is not None:
            self.counter.labels(event_type_label, status)

    def count(self, event_type_label: str, status: str) -> None:
        key = (event_type_label, status)
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        if self.counter is not None:
            self.counter.labels(event_type_label, status).inc()

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "aviso_notifications", NOTIFY_HELP, labels=["event_type", "status"]
        )
        for labels, value in tuple(self.counts.items()):
            family.add_metric(labels, float(value))
        yield family


class BackendRecorder(BackendMetrics):
    """What the backend reports, exported with the service's metrics."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def message_ids_evicted_early(self, reason: str, count: int = 1) -> None:
        metrics = self._metrics
        metrics.idempotency_keys_evicted_early.labels(metrics.backend, reason).inc(count)


class Metrics:
    """The aviso-server metrics plus the backpressure and history-gap counters, pre-initialised."""

    def __init__(
        self,
        *,
        version: str,
        backend: str,
        event_types: Iterable[str],
        authorisers: Iterable[type[StreamAuthoriser]] = (),
    ) -> None:
        self.registry = registry = CollectorRegistry()
        counter, summed, timed = _families(registry)
        ProcessCollector(registry=registry)
        self.backend = backend
        self.declared = frozenset(event_types)
        Gauge(
            "aviso_build_info",
            "Build information",
            ["version"],
            registry=registry,
            multiprocess_mode=SAME_IN_EVERY_WORKER,
        ).labels(version).set(1)
        self.http_requests = counter(
            "aviso_http_requests",
            "HTTP requests on the main listener",
            ["route", "method", "status_code"],
        )
        self.http_duration = timed(
            "aviso_http_request_duration_seconds",
            "Time until the response head was ready",
            ["route", "method"],
        )
        self.http_in_flight = summed(
            "aviso_http_requests_in_flight", "Requests without a response head", ["method"]
        )
        self.backend_operations = counter(
            "aviso_backend_operations",
            "Storage backend operations",
            ["backend", "operation", "outcome"],
        )
        self.backend_duration = Histogram(
            "aviso_backend_operation_duration_seconds",
            "Storage backend operation time",
            ["backend", "operation", "outcome"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        self.notifications = NotificationTally()
        if os.environ.get(MULTIPROCESS_DIRECTORY_VARIABLE):
            # A worker's counts must reach its multiprocess file as they happen: the
            # supervisor reads the files, never this process's memory.
            self.notifications.counter = Counter(
                "aviso_notifications", NOTIFY_HELP, ["event_type", "status"], registry=registry
            )
        else:
            registry.register(self.notifications)
        self.sse_active = Gauge(
            "aviso_sse_connections_active",
            "Open SSE streams",
            ["route", "event_type"],
            registry=registry,
            multiprocess_mode=SUMMED,
        )
        by_event_type = ["route", "event_type"]
        self.sse_total = counter("aviso_sse_connections", "SSE streams opened", by_event_type)
        self.sse_unique_users = summed(
            "aviso_sse_unique_users_active", "Distinct users with an open stream", ["route"]
        )
        self.sse_events_sent = counter(
            "aviso_sse_events_sent", "Notification frames written", by_event_type
        )
        self.sse_stream_errors = counter(
            "aviso_sse_stream_errors", "error events in started streams", by_event_type
        )
        self.sse_duration = Histogram(
            "aviso_sse_connection_duration_seconds",
            "SSE connection lifetime",
            ["route"],
            buckets=CONNECTION_BUCKETS,
            registry=registry,
        )
        self.slow_consumer_disconnects = counter(
            "aviso_sse_slow_consumer_disconnects",
            "Streams closed with slow_consumer (on_backpressure: disconnect)",
            ["route"],
        )
        self._events_sent: dict[tuple[str, str], PendingCount] = {}
        self.notifications_skipped = counter(
            "aviso_sse_notifications_skipped",
            "Live notifications skipped for slow clients (on_backpressure: drop)",
            ["route"],
        )
        self.history_gaps = counter(
            "aviso_sse_history_gaps", "Streams told their requested history was pruned", ["route"]
        )
        self.auth_requests = counter(
            "aviso_auth_requests", "Caller resolutions", ["mode", "outcome"]
        )
        self.idempotency_keys_evicted_early = counter(
            "aviso_idempotency_keys_evicted_early",
            "Remembered Idempotency-Keys forgotten before their duplicate window ended",
            ["backend", "reason"],
        )
        self.consumer_events = counter(
            "aviso_consumer_events",
            "What notification consumers count themselves",
            ["consumer", "event"],
        )
        self.backend_recorder = BackendRecorder(self)
        families = AuthoriserFamilies(registry)
        self.authorisers = {
            cls.name: AuthoriserRecorder(cls, families, registry) for cls in authorisers
        }
        # Per route, open streams per authenticated user name.
        self.sse_users: defaultdict[str, Tally[str]] = defaultdict(Tally)
        self._pre_initialise()

    def _pre_initialise(self) -> None:
        """The series present at zero before any traffic (and the new SSE counters)."""
        for mode in AUTH_MODES:
            for outcome in ("success", *AUTH_OUTCOMES.values()):
                self.auth_requests.labels(mode, outcome)
        for status in (NOTIFY_ERROR, NOTIFY_REJECTED):
            self.notifications.declare(UNKNOWN_LABEL, status)
        for event_type in self.declared:
            for status in (NOTIFY_SUCCESS, NOTIFY_ERROR):
                self.notifications.declare(event_type, status)
        for operation in BACKEND_OPERATIONS:
            for outcome in ("ok", "error"):
                self.backend_operations.labels(self.backend, operation, outcome)
                self.backend_duration.labels(self.backend, operation, outcome)
        self.slow_consumer_disconnects.labels(WATCH_ROUTE)
        self.notifications_skipped.labels(WATCH_ROUTE)
        for route in SSE_ROUTES:
            self.history_gaps.labels(route)
        for reason in EVICTION_REASONS:
            self.idempotency_keys_evicted_early.labels(self.backend, reason)

    # -- recording -------------------------------------------------------------------------

    def event_type_label(self, event_type: str) -> str:
        """A declared event type is its own label; anything else is ``generic``."""
        return event_type if event_type in self.declared else GENERIC_LABEL

    def notification(self, event_type_label: str, status: str) -> None:
        self.notifications.count(event_type_label, status)

    def auth_request(self, mode: str, status: int | None) -> None:
        """A caller resolution: ``None`` for a resolved user, else the error's status."""
        outcome = "success" if status is None else AUTH_OUTCOMES.get(status)
        if outcome is not None:
            self.auth_requests.labels(mode, outcome).inc()

    def events_sent_of(self, route: str, event_type_label: str) -> PendingCount:
        key = (route, event_type_label)
        pending = self._events_sent.get(key)
        if pending is None:
            child = self.sse_events_sent.labels(route, event_type_label)
            pending = self._events_sent[key] = PendingCount(child)
        return pending

    def sse_connection(self, route: str, event_type: str, user: str | None) -> SseConnection:
        return SseConnection(self, route, self.event_type_label(event_type), user)

    def instrument_backend(self, backend: StorageBackend) -> None:
        """Time and count the measured operations of ``backend``, in place.

        The bound methods are shadowed on the instance rather than wrapped in a proxy
        class, so the backend keeps its type and every other attribute as it is.
        """
        for operation, method in BACKEND_OPERATIONS.items():
            setattr(backend, method, self._timed(operation, getattr(backend, method)))

    def _timed(
        self, operation: str, call: Callable[..., Awaitable[_Result]]
    ) -> Callable[..., Awaitable[_Result]]:
        counter, histogram, backend = self.backend_operations, self.backend_duration, self.backend

        @wraps(call)
        async def timed(*args: Any, **kwargs: Any) -> _Result:
            started = time.perf_counter()
            outcome = "error"
            try:
                result = await call(*args, **kwargs)
                outcome = "ok"
                return result
            finally:
                histogram.labels(backend, operation, outcome).observe(time.perf_counter() - started)
                counter.labels(backend, operation, outcome).inc()

        return timed

    def exposition(self) -> bytes:
        return generate_latest(_WithoutCreated(self.registry))


# -- notify outcomes -----------------------------------------------------------------------

_NOTIFY_LABEL = "aviso_notification_label"
"""Request-state key: the notification's event-type label, once the schema is known."""


def count_notification_as(request: Request, event_type: str) -> None:
    """From here on, count this notify under ``event_type`` (before: ``unknown``)."""
    request.scope["state"][_NOTIFY_LABEL] = request.app.service.metrics.event_type_label(event_type)


class _Answer(Protocol):
    status_code: int


_AnswerT = TypeVar("_AnswerT", bound=_Answer)


def counted_notification(
    handler: Callable[[Request], Awaitable[_AnswerT]],
) -> Callable[[Request], Awaitable[_AnswerT]]:
    """Count each notify once in ``aviso_notifications_total`` by how it ended."""

    @wraps(handler)
    async def endpoint(request: Request) -> _AnswerT:
        status = NOTIFY_ERROR
        try:
            response = await handler(request)
            if response.status_code < 400:
                status = NOTIFY_SUCCESS
            return response
        except ApiError as error:
            if error.status in (401, 403) or error.code == UNKNOWN_EVENT_TYPE_CODE:
                status = NOTIFY_REJECTED
            raise
        finally:
            label = request.scope["state"].get(_NOTIFY_LABEL, UNKNOWN_LABEL)
            request.app.service.metrics.notification(label, status)

    return endpoint


# -- HTTP requests on the main listener ---------------------------------------------------


def route_template(routes: Sequence[BaseRoute], scope: Scope) -> str:
    """The template of the route the router will pick (a wrong method still names it)."""
    partial: str | None = None
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return getattr(route, "path", UNMATCHED_ROUTE)
        if match is Match.PARTIAL and partial is None:
            partial = getattr(route, "path", None)
    return partial or UNMATCHED_ROUTE


class HttpMetrics:
    """Counts every request by route template, method and status; times it to its head.
    aviso's edge (:mod:`aviso_host.edge`) opens one :class:`HttpObservation` per request."""

    def __init__(self, metrics: Metrics, routes: Sequence[BaseRoute]) -> None:
        self.metrics = metrics
        self.routes = routes

    def observe(self, scope: Scope) -> HttpObservation:
        return HttpObservation(self, scope)


class HttpObservation:
    """One request: in flight from its start, timed to its head, counted when it ends."""

    __slots__ = ("_answered", "_in_flight", "_method", "_outer_route", "_owner", "_started")

    def __init__(self, owner: HttpMetrics, scope: Scope) -> None:
        self._owner = owner
        self._method = method = scope["method"] if scope["method"] in HTTP_METHODS else "other"
        # An enclosing router (aviso mounted in a gateway) has already set its own route.
        self._outer_route = scope.get("route")
        self._started = time.perf_counter()
        self._in_flight = owner.metrics.http_in_flight.labels(method)
        self._in_flight.inc()
        self._answered: tuple[str, int] | None = None
        """(route label, status) once the response head is ready."""

    def head(self, scope: Scope, status: int) -> None:
        """The response head is being sent."""
        if self._answered is None:
            self._head_ready(self._template(scope), status)

    def failed(self) -> None:
        """The app failed: unless it answered already, the server answers 500."""
        if self._answered is None:
            self._head_ready(ERROR_ROUTE, 500)

    def end(self) -> None:
        """The request is over (a request abandoned without a response is not counted)."""
        if self._answered is None:
            self._in_flight.dec()
        else:
            route, status = self._answered
            self._owner.metrics.http_requests.labels(route, self._method, str(status)).inc()

    def _head_ready(self, route: str, status: int) -> None:
        self._answered = (route, status)
        self._in_flight.dec()
        duration = time.perf_counter() - self._started
        self._owner.metrics.http_duration.labels(route, self._method).observe(duration)

    def _template(self, scope: Scope) -> str:
        """The template of the route the router picked (Starlette records it in the scope),
        else of the one it would have picked: the request was refused before routing (by
        authentication) or matched nothing."""
        route = scope.get("route")
        if route is not None and route is not self._outer_route:
            return getattr(route, "path", UNMATCHED_ROUTE)
        return route_template(self._owner.routes, scope)


# -- the separate listener ----------------------------------------------------------------


class Exposition(Protocol):
    """What a metrics listener serves: one service's :class:`Metrics`, or the sums over the
    workers of ``serve --workers`` (:mod:`aviso_host.worker_metrics`)."""

    def exposition(self) -> bytes: ...


def metrics_app(metrics: Exposition) -> Starlette:
    """``GET /metrics`` and nothing else: served on ``metrics.port``, or mounted by an
    embedding application wherever it exposes metrics."""

    async def scrape(request: Request) -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    app = Starlette(routes=[Route("/metrics", scrape, methods=["GET"])])
    app.add_middleware(RequestIdMiddleware)
    return app
