"""Prometheus metrics of one service (backends-admin-metrics.md §5), and their listener.

Every service owns its own :class:`CollectorRegistry`, so several apps in one process (tests,
a gateway mounting two instances) never share or collide on a series. Label values are
bounded: route templates instead of paths, a fixed method set, declared event types plus
``generic``/``unknown``. The routes, the stream and the auth steps each record through one
call into this module; the backend is instrumented once, here, not in each backend plugin.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter as Tally
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from functools import wraps
from typing import Any, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aviso_host.errors import UNKNOWN_EVENT_TYPE_CODE, ApiError
from aviso_host.otlp import TALLIES
from aviso_host.request_id import RequestIdMiddleware
from aviso_plugins.types import AuthoriserMetrics, StorageBackend

HTTP_METHODS = frozenset(
    ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE")
)
UNMATCHED_ROUTE = "unmatched"
ERROR_ROUTE = "error"
WATCH_ROUTE = "/api/v1/watch"
REPLAY_ROUTE = "/api/v1/replay"
AGGREGATE_ROUTE = "/api/v1/aggregate"
SSE_ROUTES = (WATCH_ROUTE, REPLAY_ROUTE)

GENERIC_LABEL = "generic"
UNKNOWN_LABEL = "unknown"
NOTIFY_SUCCESS, NOTIFY_ERROR, NOTIFY_REJECTED = "success", "error", "rejected"

BACKEND_OPERATIONS = {
    # operation label -> StorageBackend method; subscriptions are not measured.
    "publish": "publish",
    "get_batch": "fetch_batch",
    "wipe_stream": "wipe_stream",
    "wipe_all": "wipe_all",
    "delete_message": "delete_message",
}
AUTH_MODES = ("direct", "trusted_proxy")
AUTH_OUTCOMES = {401: "unauthorized", 403: "forbidden", 503: "service_unavailable"}
ECPDS_DECISIONS = (
    "allow",
    "deny_destination",
    "deny_match_key_missing",
    "unavailable",
    "admin_bypass",
    "error",
)
ECPDS_FETCH_OUTCOMES = (
    "success",
    "http_401",
    "http_403",
    "http_4xx",
    "http_5xx",
    "invalid_response",
    "unreachable",
)

REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
CONNECTION_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400)

_Result = TypeVar("_Result")
Handler = Callable[[Request], Awaitable[Response]]


class _WithoutCreated:
    """The registry as scraped: no ``_created`` samples (§5.1), without touching the
    process-wide switch ``disable_created_metrics()`` that other registries would feel."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            samples = [s for s in metric.samples if not s.name.endswith("_created")]
            if len(samples) != len(metric.samples):
                metric.samples = samples
            yield metric


class EcpdsMetrics(AuthoriserMetrics):
    """The ``aviso_ecpds_*`` families, reported to by the ``ecpds`` authoriser plugin."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._decisions = Counter(
            "aviso_ecpds_access_decisions", "ECPDS plugin decisions", ["outcome"], registry=registry
        )
        self._fetches = Counter(
            "aviso_ecpds_fetch", "Upstream ECPDS fetches", ["outcome"], registry=registry
        )
        self._hits = Counter("aviso_ecpds_cache_hits", "ECPDS cache hits", registry=registry)
        self._misses = Counter("aviso_ecpds_cache_misses", "ECPDS cache misses", registry=registry)
        self._size = Gauge("aviso_ecpds_cache_size", "Cached ECPDS user names", registry=registry)
        for outcome in ECPDS_DECISIONS:
            self._decisions.labels(outcome)
        for outcome in ECPDS_FETCH_OUTCOMES:
            self._fetches.labels(outcome)

    def decision(self, outcome: str) -> None:
        self._decisions.labels(outcome).inc()

    def cache_lookup(self, hit: bool) -> None:
        (self._hits if hit else self._misses).inc()

    def fetch(self, outcome: str) -> None:
        self._fetches.labels(outcome).inc()

    def cache_size(self, size: int) -> None:
        self._size.set(size)


class SseConnection:
    """One watch/replay stream's view of the SSE families (its labels fixed at setup)."""

    def __init__(self, metrics: Metrics, route: str, event_type: str, user: str | None) -> None:
        self._metrics = metrics
        self._route = route
        self._event_type = event_type
        self._user = user
        self._opened_at = 0.0

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
            self._metrics.sse_events_sent.labels(self._route, self._event_type).inc(count)

    def stream_error(self) -> None:
        self._metrics.sse_stream_errors.labels(self._route, self._event_type).inc()

    def notifications_skipped(self, count: int) -> None:
        self._metrics.notifications_skipped.labels(self._route).inc(count)

    def history_gap(self) -> None:
        self._metrics.history_gaps.labels(self._route).inc()


class OtlpCollector:
    """The OTLP log export counters: process-wide, read at scrape time."""

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "aviso_otlp_export_failures",
            "OTLP log exports that failed (collector down, slow or refusing)",
            value=TALLIES.export_failures,
        )
        yield CounterMetricFamily(
            "aviso_otlp_suppressed_log_records",
            "Log records dropped because the OTLP export queue was full",
            value=TALLIES.suppressed_records,
        )


class Metrics:
    """The §5.2 inventory plus the backpressure and history-gap counters, pre-initialised."""

    def __init__(self, *, version: str, backend: str, event_types: Iterable[str]) -> None:
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        self.backend = backend
        self.declared = frozenset(event_types)
        Gauge("aviso_build_info", "Build information", ["version"], registry=registry).labels(
            version
        ).set(1)
        self.http_requests = Counter(
            "aviso_http_requests",
            "HTTP requests on the main listener",
            ["route", "method", "status_code"],
            registry=registry,
        )
        self.http_duration = Histogram(
            "aviso_http_request_duration_seconds",
            "Time until the response head was ready",
            ["route", "method"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        self.http_in_flight = Gauge(
            "aviso_http_requests_in_flight",
            "Requests without a response head",
            ["method"],
            registry=registry,
        )
        self.backend_operations = Counter(
            "aviso_backend_operations",
            "Storage backend operations",
            ["backend", "operation", "outcome"],
            registry=registry,
        )
        self.backend_duration = Histogram(
            "aviso_backend_operation_duration_seconds",
            "Storage backend operation time",
            ["backend", "operation", "outcome"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        self.notifications = Counter(
            "aviso_notifications", "Notify outcomes", ["event_type", "status"], registry=registry
        )
        self.sse_active = Gauge(
            "aviso_sse_connections_active",
            "Open SSE streams",
            ["route", "event_type"],
            registry=registry,
        )
        self.sse_total = Counter(
            "aviso_sse_connections",
            "SSE streams opened",
            ["route", "event_type"],
            registry=registry,
        )
        self.sse_unique_users = Gauge(
            "aviso_sse_unique_users_active",
            "Distinct users with an open stream",
            ["route"],
            registry=registry,
        )
        self.sse_events_sent = Counter(
            "aviso_sse_events_sent",
            "Notification frames written",
            ["route", "event_type"],
            registry=registry,
        )
        self.sse_stream_errors = Counter(
            "aviso_sse_stream_errors",
            "error events in started streams",
            ["route", "event_type"],
            registry=registry,
        )
        self.sse_duration = Histogram(
            "aviso_sse_connection_duration_seconds",
            "SSE connection lifetime",
            ["route"],
            buckets=CONNECTION_BUCKETS,
            registry=registry,
        )
        self.slow_consumer_disconnects = Counter(
            "aviso_sse_slow_consumer_disconnects",
            "Streams closed with slow_consumer (on_backpressure: disconnect)",
            ["route"],
            registry=registry,
        )
        self.notifications_skipped = Counter(
            "aviso_sse_notifications_skipped",
            "Live notifications skipped for slow clients (on_backpressure: drop)",
            ["route"],
            registry=registry,
        )
        self.history_gaps = Counter(
            "aviso_sse_history_gaps",
            "Streams told their requested history was pruned",
            ["route"],
            registry=registry,
        )
        self.auth_requests = Counter(
            "aviso_auth_requests", "Caller resolutions", ["mode", "outcome"], registry=registry
        )
        self.ecpds = EcpdsMetrics(registry)
        registry.register(OtlpCollector())
        # Per route, open streams per authenticated user name.
        self.sse_users: defaultdict[str, Tally[str]] = defaultdict(Tally)
        self._pre_initialise()

    def _pre_initialise(self) -> None:
        """The series §5.4 requires at zero before any traffic (and the new SSE counters)."""
        for mode in AUTH_MODES:
            for outcome in ("success", *AUTH_OUTCOMES.values()):
                self.auth_requests.labels(mode, outcome)
        for status in (NOTIFY_ERROR, NOTIFY_REJECTED):
            self.notifications.labels(UNKNOWN_LABEL, status)
        for event_type in self.declared:
            for status in (NOTIFY_SUCCESS, NOTIFY_ERROR):
                self.notifications.labels(event_type, status)
        for operation in BACKEND_OPERATIONS:
            for outcome in ("ok", "error"):
                self.backend_operations.labels(self.backend, operation, outcome)
                self.backend_duration.labels(self.backend, operation, outcome)
        self.slow_consumer_disconnects.labels(WATCH_ROUTE)
        self.notifications_skipped.labels(WATCH_ROUTE)
        for route in SSE_ROUTES:
            self.history_gaps.labels(route)

    # -- recording -------------------------------------------------------------------------

    def event_type_label(self, event_type: str) -> str:
        """A declared event type is its own label; anything else is ``generic``."""
        return event_type if event_type in self.declared else GENERIC_LABEL

    def notification(self, event_type_label: str, status: str) -> None:
        self.notifications.labels(event_type_label, status).inc()

    def auth_request(self, mode: str, status: int | None) -> None:
        """A caller resolution: ``None`` for a resolved user, else the error's status."""
        outcome = "success" if status is None else AUTH_OUTCOMES.get(status)
        if outcome is not None:
            self.auth_requests.labels(mode, outcome).inc()

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
        return generate_latest(_WithoutCreated(self.registry))  # type: ignore[arg-type]


# -- notify outcomes -----------------------------------------------------------------------

_NOTIFY_LABEL = "aviso_notification_label"
"""Request-state key: the notification's event-type label, once the schema is known."""


def count_notification_as(request: Request, event_type: str) -> None:
    """From here on, count this notify under ``event_type`` (before: ``unknown``)."""
    request.scope["state"][_NOTIFY_LABEL] = request.app.state.service.metrics.event_type_label(
        event_type
    )


def counted_notification(handler: Handler) -> Handler:
    """Count each notify once in ``aviso_notifications_total`` by how it ended (§5.3)."""

    @wraps(handler)
    async def endpoint(request: Request) -> Response:
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
            request.app.state.service.metrics.notification(label, status)

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


class HttpMetricsMiddleware:
    """Counts every request by route template, method and status; times it to its head."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        metrics = self.metrics
        method = scope["method"] if scope["method"] in HTTP_METHODS else "other"
        # An enclosing router (aviso mounted in a gateway) has already set its own route.
        outer_route = scope.get("route")
        started = time.perf_counter()
        in_flight = metrics.http_in_flight.labels(method)
        in_flight.inc()
        answered: tuple[str, int] | None = None
        """(route label, status) once the response head is ready."""

        def head_ready(route: str, status: int) -> None:
            nonlocal answered
            answered = (route, status)
            in_flight.dec()
            metrics.http_duration.labels(route, method).observe(time.perf_counter() - started)

        async def send_counted(message: Message) -> None:
            if message["type"] == "http.response.start" and answered is None:
                head_ready(self._template(scope, outer_route), message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        except asyncio.CancelledError:
            raise
        except BaseException:
            if answered is None:  # failed before any routed response: the server answers 500
                head_ready(ERROR_ROUTE, 500)
            raise
        finally:
            if answered is None:  # abandoned without a response
                in_flight.dec()
            else:
                metrics.http_requests.labels(answered[0], method, str(answered[1])).inc()

    def _template(self, scope: Scope, outer_route: object) -> str:
        """The template of the route the router picked (Starlette records it in the scope),
        else of the one it would have picked: the request was refused before routing (by
        authentication) or matched nothing."""
        route = scope.get("route")
        if route is not None and route is not outer_route:
            return getattr(route, "path", UNMATCHED_ROUTE)
        return route_template(self.routes, scope)


# -- the separate listener ----------------------------------------------------------------


def metrics_app(metrics: Metrics) -> Starlette:
    """``GET /metrics`` and nothing else: served on ``metrics.port``, or mounted by an
    embedding application wherever it exposes metrics."""

    async def scrape(request: Request) -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    app = Starlette(routes=[Route("/metrics", scrape, methods=["GET"])])
    app.add_middleware(RequestIdMiddleware)
    return app
