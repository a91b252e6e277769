"""The running service: settings, plugins, schemas and the one backend, wired once."""

from __future__ import annotations

import asyncio
import inspect
import logging
from importlib.metadata import PackageNotFoundError, version

from aviso_host.auth.gate import AuthGate
from aviso_host.cloudevents import CloudEventRenderer
from aviso_host.config.construct import construct, start
from aviso_host.config.settings import Settings
from aviso_host.consumers import ConsumerRunner
from aviso_host.errors import log_failure
from aviso_host.logs import log_event, register_secrets
from aviso_host.metrics import Metrics
from aviso_host.plugins import PluginRegistry
from aviso_host.schemas import SchemaCatalog
from aviso_host.status import NotificationRate, StatusBoard
from aviso_host.streaming.control import StreamRegistry
from aviso_plugins.service import ServiceAccess
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


class Service:
    def __init__(self, settings: Settings, registry: PluginRegistry) -> None:
        self.settings = settings
        self.registry = registry
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
        self.plugin_access: ServiceAccess | None = None
        """What the hooks that receive the service get (``aviso_api_routes``, ...); set by
        the app serving it (a service no app serves starts no plugin)."""
        self.consumers = ConsumerRunner(
            settings, registry, self.catalog, self.backend, self.renderer, self.metrics
        )
        self.notification_rate = NotificationRate()
        self.status = StatusBoard(
            server_version(), kind, lambda: self.backend.ready(), self.notification_rate
        )
        self.started = False
        """Set once :meth:`ensure_started` has started everything; read by every request."""
        self._start_lock = asyncio.Lock()

    async def ensure_started(self) -> None:
        """Start the backend once, from the lifespan or (when mounted) the first request."""
        if self.started:
            return
        async with self._start_lock:
            if not self.started:
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
                            await self._start_plugins()
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
                self.started = True
                files = self.settings.files
                log_event(
                    "service.started",
                    f"aviso service started (configuration: {', '.join(files) or 'none read'})",
                    backend=self.settings.backend.kind,
                    event_types=self.catalog.event_types,
                    config_files=list(files),
                )

    async def _start_plugins(self) -> None:
        """``aviso_startup`` of every plugin; one failing shuts the others down again."""
        if self.registry.manager is None or self.plugin_access is None:
            return
        waiting = list(self.registry.manager.hook.aviso_startup(service=self.plugin_access))
        try:
            while waiting:
                result = waiting.pop(0)
                if inspect.isawaitable(result):
                    await result
        except BaseException:
            for result in waiting:  # never started: nothing to await
                if inspect.iscoroutine(result):
                    result.close()
            await self._stop_plugins()
            raise

    async def _stop_plugins(self) -> None:
        """``aviso_shutdown`` of every plugin, each failure logged."""
        if self.registry.manager is None or self.plugin_access is None:
            return
        hook = self.registry.manager.hook.aviso_shutdown
        for impl in hook.get_hookimpls():
            try:
                result = impl.function(service=self.plugin_access)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                log_failure("plugin.shutdown_failed", f"plugin '{impl.plugin_name}'", exc)

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
        if self.started:
            self.started = False
            await self._stop_plugins()
            await self.consumers.close()
            if self.auth is not None:
                await self.auth.close()
            await self.backend.shutdown()
