"""A real uvicorn server on a free loopback port, running in a background thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import yaml
from starlette.applications import Starlette

from aviso_host.app import create_app
from aviso_host.config import settings_from_document
from aviso_host.plugins import discover
from aviso_host.server import uvicorn_config
from aviso_host.service import Service
from aviso_plugins.testing import ThreadedServer as _TestServer

START_TIMEOUT = 60.0
"""Until an in-thread server is up, or stopped: bounds a hang, with room for a loaded machine."""


@dataclass
class RunningServer:
    url: str
    app: Starlette
    server: _TestServer

    @property
    def service(self) -> Service:
        return self.app.state.service

    def call(self, coroutine_factory: Any, timeout: float = 10.0) -> Any:
        """Run a coroutine on the server's loop (e.g. to inspect the backend)."""
        assert self.server.loop is not None
        future = asyncio.run_coroutine_threadsafe(coroutine_factory(), self.server.loop)
        return future.result(timeout)

    def begin_shutdown(self) -> None:
        assert self.server.loop is not None
        self.server.loop.call_soon_threadsafe(self.server._begin_shutdown, self.server.loop)
        self.server.should_exit = True


def load_yaml(text: str) -> dict[str, Any]:
    return yaml.safe_load(text)


@contextmanager
def serve_app(app: Starlette, service: Service) -> Iterator[RunningServer]:
    server = _TestServer(uvicorn_config(app, "127.0.0.1", 0), service)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    if not server.ready.wait(START_TIMEOUT) or not server.started:
        raise RuntimeError("test server did not start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield RunningServer(f"http://127.0.0.1:{port}", app, server)
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT)


@contextmanager
def running_server(
    document: Mapping[str, Any] | str, extra_plugins: Iterable[Any] = ()
) -> Iterator[RunningServer]:
    """Serve a configuration document (a mapping or YAML text) on 127.0.0.1:<free port>."""
    if isinstance(document, str):
        document = load_yaml(document)
    registry = discover(extra=extra_plugins)
    settings = settings_from_document(document, registry)
    app = create_app(settings, registry)
    with serve_app(app, app.state.service) as running:
        yield running
