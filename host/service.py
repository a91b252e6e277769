"""The running service: settings, plugins, schemas and the one backend, wired once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from importlib.metadata import PackageNotFoundError, version

from aviso_host.auth.gate import AuthGate
from aviso_host.cloudevents import CloudEventRenderer
from aviso_host.config.construct import construct, start
from aviso_host.config.settings import Settings
from aviso_host.consumers import LEASES_BUCKET, ConsumerRunner, keeps_shared_state
from aviso_host.deliveries import DeliveryRunner
from aviso_host.filtering import StreamFilter
from aviso_host.logs import log_event, register_secrets
from aviso_host.metrics import Metrics
from aviso_host.plugins import PluginRegistry
from aviso_host.schemas import SchemaCatalog
from aviso_host.status import NotificationRate, StatusBoard
from aviso_host.streaming.control import StreamRegistry
from aviso_host.subscriptions import BUCKET, SubscriptionEntry, SubscriptionStore
from aviso_plugins.leases import DEFAULT_LEASE_SECONDS
from aviso_plugins.state import DeferredState
from aviso_plugins.types import BackendContext, BackendMetrics, StorageBackend

# How long open streams get to write their closing event before they are cut off.
SHUTDOWN_GRACE_SECONDS = 5.0


def server_version() -> str:
    try:
        return version("aviso-py")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def build_backend(
    settings: Settings, registry: PluginRegistry, metrics: BackendMetrics | None = None
) -> StorageBackend:
    """The configured backend, not started (the service, and the Spark ``backend`` sink)."""
    context = BackendContext(
        metrics=metrics or BackendMetrics(),
        options=settings.backend.options,
        storage_policies={
            schema.topic.base: schema.storage_policy
            for schema in settings.schemas.values()
            if schema.topic is not None and schema.storage_policy
        },
    )
    return registry.backends[settings.backend.kind](context)


AdmitEntry = Callable[["Service", SubscriptionEntry], Awaitable[StreamFilter]]


async def _admitted_by_nobody(service: Service, entry: SubscriptionEntry) -> StreamFilter:
    raise RuntimeError("no subscription routes: nothing admits a push subscription")


class Service:
    def __init__(self, settings: Settings, registry: PluginRegistry) -> None:
        self.settings = settings
        self.registry = registry
        self.admit_entry: AdmitEntry = _admitted_by_nobody
        """Checks a push subscription's owner again before delivering; set by the app to the
        subscription routes' check (which imports this module)."""
        self.catalog = SchemaCatalog(settings, registry.field_handlers)
        self.renderer = CloudEventRenderer(self.catalog, settings.application.base_url)
        self.metrics = Metrics(
            version=server_version(),
            backend=settings.backend.kind,
            event_types=self.catalog.event_types,
            authorisers=registry.authorisers.values(),
        )
        if registry.manager is not None:  # plugins' process-wide collectors (aviso_otlp_*)
            for collectors in registry.manager.hook.aviso_metrics():
                for collector in collectors or ():
                    self.metrics.registry.register(collector)
        # Secret option values never reach a log line, whoever writes it.
        register_secrets(settings.secrets)
        kind = settings.backend.kind
        self.backend: StorageBackend = construct(
            lambda: build_backend(settings, registry, self.metrics.backend_recorder),
            ("notification_backend", kind),
            registry.describe("backends", kind),
            settings.secrets,
        )
        if settings.metrics.enabled:  # per-request cost: only where someone scrapes
            self.metrics.instrument_backend(self.backend)
        self.auth = AuthGate.build(settings, registry, self.metrics)  # None when auth is off
        self.streams = StreamRegistry()
        # Kept in the backend's shared state: offered wherever it keeps some.
        self.subscriptions: SubscriptionStore | None = (
            SubscriptionStore(DeferredState(partial(self.backend.shared_state, BUCKET)))
            if settings.subscriptions.enabled and keeps_shared_state(self.backend)
            else None
        )
        self.consumers = ConsumerRunner(
            settings, registry, self.catalog, self.backend, self.renderer, self.metrics
        )
        self.deliveries: DeliveryRunner | None = (
            DeliveryRunner(settings, registry, self.backend, self.renderer, self.metrics)
            if self.subscriptions is not None
            else None
        )
        if self.deliveries is not None:
            self.metrics.track_subscriptions(self.deliveries.census, self.deliveries.kinds)
        self.notification_rate = NotificationRate()
        self.status = StatusBoard(
            server_version(), kind, lambda: self.backend.ready(), self.notification_rate
        )
        self._started = False
        self._start_lock = asyncio.Lock()

    async def ensure_started(self) -> None:
        """Start the backend once, from the lifespan or (when mounted) the first request."""
        if self._started:
            return
        async with self._start_lock:
            if not self._started:
                kind = self.settings.backend.kind
                await start(
                    self.backend.start,
                    ("notification_backend", kind),
                    self.registry.describe("backends", kind),
                    self.settings.secrets,
                )
                try:
                    if self.auth is not None:
                        await self.auth.start()
                    try:
                        await self.consumers.start()
                        try:
                            await self._start_deliveries()
                        except BaseException:
                            await self.consumers.close()
                            raise
                    except BaseException:
                        if self.auth is not None:
                            await self.auth.close()
                        raise
                except BaseException:
                    await self.backend.shutdown()
                    raise
                self._started = True
                files = self.settings.files
                log_event(
                    "service.started",
                    f"aviso service started (configuration: {', '.join(files) or 'none read'})",
                    backend=self.settings.backend.kind,
                    event_types=self.catalog.event_types,
                    config_files=list(files),
                )
                if self.settings.subscriptions.enabled and self.subscriptions is None:
                    log_event(
                        "subscriptions.unavailable",
                        f"subscriptions need a backend that keeps shared state; '{kind}' "
                        "keeps none: their routes are not served",
                    )

    async def _start_deliveries(self) -> None:
        if self.deliveries is None or self.subscriptions is None:
            return
        leases = await self.backend.shared_state(LEASES_BUCKET, DEFAULT_LEASE_SECONDS)
        assert leases is not None  # the store exists only where shared state does
        await self.deliveries.start(self.subscriptions, leases, partial(self.admit_entry, self))

    async def begin_shutdown(self) -> None:
        """Close every open stream with ``server_shutdown``; cut off those that cannot write."""
        self.streams.stop_all("server_shutdown")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SHUTDOWN_GRACE_SECONDS
        while self.streams.open and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for control in tuple(self.streams.open):
            log_event(
                "stream.shutdown.forced",
                "stream did not close in time",
                logging.WARNING,
                request_id=control.request_id,
            )
            control.abort("server_shutdown")

    async def close(self) -> None:
        if self._started:
            self._started = False
            if self.deliveries is not None:
                await self.deliveries.close()
            await self.consumers.close()
            if self.auth is not None:
                await self.auth.close()
            await self.backend.shutdown()
