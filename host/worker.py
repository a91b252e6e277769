"""One aviso server process: ``aviso-server serve`` itself, or one of its ``--workers``.

A worker binds its own listening socket on the service's address with ``SO_REUSEPORT``,
so the kernel spreads new connections evenly over the workers (no socket is shared, and
the supervising process accepts nothing). It reads the configuration as the supervisor
left it in the environment (the configuration file, and the overrides shared resources
such as an embedded nats-server asked for).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from aviso_host.config import ConfigError, load_settings
from aviso_host.config.settings import Settings
from aviso_host.logs import configure_logging, log_event
from aviso_host.plugins import PluginError, PluginRegistry, discover

READY = b"ready"
"""What a worker sends its supervisor once it serves."""


def run_server(
    settings: Settings,
    registry: PluginRegistry,
    host: str,
    port: int,
    *,
    workers: int = 1,
    sockets: list[socket.socket] | None = None,
    on_started: Callable[[], None] | None = None,
) -> bool:
    """Build the app and serve it until a signal ends it; whether it ever served.

    Raises ``ConfigError`` when the app cannot be built, ``PluginError`` when a plugin does
    not start."""
    from aviso_host.app import create_app
    from aviso_host.lifecycle import raise_if_stopped
    from aviso_host.server import AvisoServer, raise_descriptor_limit, uvicorn_config
    from aviso_host.streaming.collector import freeze_startup_objects, pace_garbage_collector

    raise_descriptor_limit()
    pace_garbage_collector()
    app = create_app(settings, registry)
    server = AvisoServer(
        uvicorn_config(app, host, port),
        app.state.service,
        workers=workers,
        # The supervising process alone serves metrics.port.
        serve_metrics=workers == 1,
        on_started=on_started,
    )
    freeze_startup_objects()
    # Last moment of start-up under aviso's own stop handlers: uvicorn's take over now.
    raise_if_stopped()
    server.run(sockets=sockets)
    if server.start_error is not None:
        raise server.start_error
    return server.started


def address_family(host: str, port: int) -> socket.AddressFamily:
    """The family of the first address ``host`` resolves to (IPv6 for ``::``)."""
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` beside the other workers' (``SO_REUSEPORT``), not
    yet listening (uvicorn's server starts listening on it)."""
    family = address_family(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def worker_main(
    host: str, port: int, workers: int, ready: int
) -> None:  # pragma: no cover - runs in a worker process, covered by tests/host/test_workers.py
    """Serve as one of ``workers`` workers; say ``READY`` on the descriptor ``ready`` once
    serving (:func:`aviso_host.lifecycle.worker_entry` calls it, stop signals raising
    ``Stopped``)."""
    try:
        registry = discover()
        settings = load_settings(registry)
        configure_logging(settings.logging.level, settings.logging.format)
        sockets = [reuse_port_socket(host, port)]
    except (ConfigError, PluginError, OSError) as exc:
        log_event("worker.failed", f"worker {os.getpid()} cannot start: {exc}", logging.ERROR)
        sys.exit(1)
    with plugin_log_handlers(settings, registry):
        try:
            started = run_server(
                settings,
                registry,
                host,
                port,
                workers=workers,
                sockets=sockets,
                on_started=lambda: _tell(ready),
            )
        except (ConfigError, PluginError) as exc:
            log_event("worker.failed", f"worker {os.getpid()} cannot start: {exc}", logging.ERROR)
            sys.exit(1)
    sys.exit(0 if started else 1)


def _tell(supervisor: int) -> None:
    """Say ``READY``; a supervisor already gone is not this worker's failure (its death
    signal follows)."""
    with suppress(OSError):
        os.write(supervisor, READY)


@contextmanager
def plugin_log_handlers(settings: Settings, registry: PluginRegistry) -> Iterator[None]:
    """This process's log records also handled by the handlers plugins contribute (the OTLP
    export), from now until the block ends."""
    from aviso_host.logs import JsonLineFormatter
    from aviso_host.service import server_version
    from aviso_plugins.process import LogSetup

    handlers: list[logging.Handler] = []
    if registry.manager is not None:
        setup = LogSetup(settings.document, JsonLineFormatter(), server_version())
        for contributed in registry.manager.hook.aviso_log_handlers(setup=setup):
            handlers += contributed or ()
    root = logging.getLogger()
    for handler in handlers:
        root.addHandler(handler)
    try:
        yield
    finally:
        for handler in reversed(handlers):
            root.removeHandler(handler)
            handler.close()
