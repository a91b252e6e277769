"""Running the app under uvicorn with aviso's shutdown semantics, plus the metrics listener.

uvicorn's lifespan shutdown runs only after connections close, and SSE connections never
close on their own, so the exit signal itself must tell the service to end its streams.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import resource
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

from aviso_host.config.settings import LimitSettings
from aviso_host.http_protocol import AvisoHttpProtocol, ConnectionCaps
from aviso_host.logs import log_event
from aviso_host.metrics import Exposition, metrics_app
from aviso_host.plugins import PluginError
from aviso_host.service import Service


class MetricsListener:
    """``GET /metrics`` on ``metrics.host:metrics.port``: a second uvicorn server on the
    main server's event loop, started before it and stopped after it."""

    def __init__(
        self, metrics: Exposition, host: str, port: int, limits: LimitSettings | None = None
    ) -> None:
        """``limits``: those of the main server (the defaults when ``None``)."""
        self.address = (host, port)
        config = uvicorn_config(metrics_app(metrics), host, port, False)
        # The process's descriptors are shared with the main server: without caps, a flood
        # of connections here would leave none for it to accept its probes with.
        install_limits(config, limits or LimitSettings(), capacity=METRICS_CONNECTIONS)
        self._server = uvicorn.Server(config)
        self._socket: socket.socket | None = None

    async def start(self) -> None:
        """Bind and serve; raises ``OSError`` when the address cannot be bound.

        The socket is bound here rather than by uvicorn, which would ``sys.exit`` from
        inside the main server's startup instead of letting it fail on its own terms.
        """
        family = socket.AF_INET6 if ":" in self.address[0] else socket.AF_INET
        self._socket = socket.create_server(self.address, family=family)
        config = self._server.config
        config.load()
        # What uvicorn.Server.serve() would do before startup(); serve() itself would
        # also run a main loop and install signal handlers, which belong to the main server.
        self._server.lifespan = config.lifespan_class(config)
        await self._server.startup(sockets=[self._socket])

    async def stop(self) -> None:
        if self._socket is not None:
            await self._server.shutdown(sockets=[self._socket])
            self._socket = None


GRACEFUL_SHUTDOWN_SECONDS = 30
"""After a stop signal, requests in flight get this long to finish (streams end at once)."""
DESCRIPTOR_RESERVE = 128
"""Descriptors kept out of ``max_connections``: ``PROBE_RESERVE`` for connections past the
caps, the rest for listening sockets, backend connections, files, the metrics listener's
clients (``METRICS_CONNECTIONS`` and its own probe reserve), and the connections accepted
at once before the excess among them is reset."""
METRICS_CONNECTIONS = 16
"""Connections the metrics listener serves at once (scrapers are few); past it the caps at
accept act as on the main port."""


def raise_descriptor_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; return the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # an unlimited hard limit above the kernel's nr_open
            pass
    return soft


def connection_capacity(limits: LimitSettings, workers: int = 1) -> int:
    """This process's share of ``limits.max_connections`` (a figure for the whole service,
    split evenly over ``workers`` processes, rounded up), lowered so that many connections
    still leave descriptors for everything else (a refused ``accept`` turns away every
    client, the 503 only some)."""
    share = math.ceil(limits.max_connections / workers)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    available = soft - DESCRIPTOR_RESERVE
    if soft != resource.RLIM_INFINITY and share > available:
        log_event(
            "server.connections.capped",
            f"limits.max_connections {limits.max_connections} lowered to {available}"
            f"{' per worker' if workers > 1 else ''}: the process may open {soft} descriptors",
            logging.WARNING,
        )
        return max(available, 1)
    return share


def install_limits(
    config: uvicorn.Config, limits: LimitSettings, workers: int = 1, capacity: int | None = None
) -> None:
    """Serve ``config`` with aviso's HTTP protocol enforcing ``limits`` (docs/guarantees.md)
    in one of ``workers`` processes; ``capacity``: the connections served at once, instead
    of this process's share of ``max_connections``."""
    if capacity is None:
        capacity = connection_capacity(limits, workers)
    # uvicorn calls ``http`` to build each connection's protocol; its annotation asks for a
    # class, which a partial (the limits bound in) is not.
    config.http = functools.partial(  # type: ignore[assignment]
        AvisoHttpProtocol,
        limits=limits,
        # Each worker sees its own connections only: the per-client cap holds per worker.
        caps=ConnectionCaps(capacity, limits.max_connections_per_client),
    )
    # A keep-alive connection that sends nothing is an idle connection like any other.
    config.timeout_keep_alive = limits.idle_timeout_seconds  # type: ignore[assignment]


class AvisoServer(uvicorn.Server):
    """uvicorn's server with aviso's limits, shutdown and metrics listener.

    Under ``aviso-server serve --workers N`` each worker runs one, with ``workers`` = N
    (its share of the service-wide limits) and ``serve_metrics`` false (the supervising
    process serves ``metrics.port``); ``on_started`` is called once it serves."""

    def __init__(
        self,
        config: uvicorn.Config,
        service: Service,
        *,
        workers: int = 1,
        serve_metrics: bool = True,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        install_limits(config, service.settings.limits, workers)
        super().__init__(config)
        self._service = service
        self._shutdown_task: asyncio.Task[None] | None = None
        self._stop_requested = asyncio.Event()
        self._on_started = on_started
        self.start_error: PluginError | None = None
        """Why a plugin did not start (then the server never served); one line."""
        metrics = service.settings.metrics
        self._metrics_listener = (
            MetricsListener(service.metrics, metrics.host, metrics.port, service.settings.limits)
            if serve_metrics and metrics.enabled and metrics.port
            else None
        )

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        listener = self._metrics_listener
        if listener is not None:
            try:
                await listener.start()
            except OSError as exc:
                host, port = listener.address
                log_event(
                    "metrics.listener.failed",
                    f"cannot serve metrics on {host}:{port}: {exc}",
                    logging.ERROR,
                )
                self.should_exit = True  # never started: `aviso-server serve` exits non-zero
                return
        # Started before uvicorn runs the lifespan (whose own call then returns at once):
        # uvicorn would log a failure there as a raw traceback and exit the process.
        starting = asyncio.ensure_future(self._service.ensure_started())
        stopping = asyncio.ensure_future(self._stop_requested.wait())
        try:
            await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            starting.cancel()
            raise
        finally:
            stopping.cancel()
        # A stop signal while the backend still starts (a broker that does not answer holds
        # it for retry_attempts x timeout_seconds) ends the start: nothing is served yet, so
        # nothing is drained, where uvicorn alone would wait for the start to end.
        interrupted = not starting.done()
        if interrupted:
            starting.cancel()
        try:
            await starting
        except PluginError as exc:
            self.start_error = exc
        except (asyncio.CancelledError, Exception):
            if not interrupted:
                raise
        if interrupted or self.start_error is not None:
            self.should_exit = True
            if listener is not None:
                await listener.stop()
            return
        await super().startup(sockets)
        if self.started and self._on_started is not None:
            self._on_started()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().shutdown(sockets)
        finally:
            if self._metrics_listener is not None:
                await self._metrics_listener.stop()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._shutdown_task is None:
            loop = asyncio.get_event_loop()
            loop.call_soon_threadsafe(self._begin_shutdown, loop)
        super().handle_exit(sig, frame)

    def _begin_shutdown(self, loop: asyncio.AbstractEventLoop) -> None:
        self._stop_requested.set()
        if self._shutdown_task is None:
            self._shutdown_task = loop.create_task(self._service.begin_shutdown())


def uvicorn_config(
    app: Callable[..., Any], host: str, port: int, lifespan: bool = True
) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        loop="auto",
        http="auto",
        # aviso serves no WebSocket route: without a WebSocket protocol an upgrade request is
        # an ordinary HTTP request under aviso's limits, not a hand-over to wsproto's code.
        ws="none",
        lifespan="on" if lifespan else "off",
        # The client address is the connection's peer, as auth providers are promised
        # (AuthRequest.client): trusting X-Forwarded-For is a provider's decision, not
        # uvicorn's (whose proxy-header layer would also cost every request a frame).
        proxy_headers=False,
    )
