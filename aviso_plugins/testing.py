"""Testing kit for plugin authors: a real aviso server with your plugin objects, and a client.

No installation is needed: the plugin objects under test (modules or instances with
``@hookimpl`` functions) are registered beside the built-in plugins, the configuration is a
dict (or YAML text), and the server is the one ``aviso-server serve`` runs (uvicorn, on a free
127.0.0.1 port, in a background thread)::

    from aviso_plugins.testing import serve
    import my_plugin

    def test_my_handler() -> None:
        with serve(CONFIG, plugins=[my_plugin]) as aviso:
            assert aviso.notify("paint", {"colour": "#ABC"}).status_code == 200
            [event] = aviso.replay("paint", {"colour": "#aabbcc"}).notifications()
            assert event.data["data"]["identifier"]["colour"] == "#aabbcc"

With pytest, the ``aviso_server`` fixture (registered by installing aviso-py, see
:mod:`aviso_plugins.pytest_plugin`) is ``serve`` with the server stopped after the test.
:func:`build_app` gives the Starlette application alone, for an ASGI test client or to mount.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import yaml
from starlette.applications import Starlette

from aviso_host.server import AvisoServer, uvicorn_config
from aviso_plugins.sse import SSEParser

START_TIMEOUT = 15.0
READ_TIMEOUT = 10.0
NOTIFICATION_EVENTS = ("live-notification", "replay")
TEST_DEFAULTS: Mapping[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {"kind": "in_memory"},
}

__all__ = [
    "AvisoClient",
    "Event",
    "EventStream",
    "ThreadedServer",
    "build_app",
    "serve",
]


def build_app(
    config: Mapping[str, Any] | str, plugins: Iterable[object] = (), installed: bool = False
) -> Starlette:
    """The aviso application for ``config`` with the built-in plugins plus ``plugins``.

    ``config`` is a configuration document as ``aviso-server serve`` reads it (a dict or YAML
    text); the two sections upstream requires default to ``TEST_DEFAULTS`` (an in-memory
    backend), and no file or ``AVISOSERVER_*`` variable is read.

    ``installed=True`` also loads every installed plugin distribution (as ``aviso-server serve``
    does); by default only the built-ins and ``plugins`` are registered, so a test sees
    exactly the plugin under test. A configuration error raises ``ConfigError`` (its message
    is the one ``aviso-server config check`` prints); two plugins claiming one name raise
    ``PluginError``.
    """
    from aviso_host.app import create_app
    from aviso_host.config import settings_from_document
    from aviso_host.config.loader import deep_merge
    from aviso_host.plugins import discover

    given = yaml.safe_load(config) if isinstance(config, str) else config
    document = deep_merge(TEST_DEFAULTS, given or {})
    registry = discover(load_entry_points=installed, extra=plugins)
    return create_app(settings_from_document(document, registry), registry)


# -- reading streams -------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One SSE event of a watch or replay stream; ``data`` is the parsed JSON."""

    name: str
    data: Any
    id: str | None = None

    @property
    def kind(self) -> str:
        """The event name, plus ``/<data.type>`` for control events (``replay-control/
        replay_completed``, ``connection-closing`` ...); notifications are just their name."""
        kind = self.data.get("type") if isinstance(self.data, dict) else None
        if isinstance(kind, str) and not self.is_notification:
            return f"{self.name}/{kind}"
        return self.name

    @property
    def is_notification(self) -> bool:
        """A stored notification (a CloudEvent on ``live-notification`` or ``replay``)."""
        kind = self.data.get("type") if isinstance(self.data, dict) else None
        return self.name in NOTIFICATION_EVENTS and str(kind).startswith("int.ecmwf.aviso.")


class EventStream:
    """An open SSE response, read event by event (every read bounded by ``READ_TIMEOUT``)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.events: list[Event] = []
        self.ended = False
        self._parser = SSEParser()
        self._chunks = response.iter_bytes()
        self._ready: list[Event] = []

    def next(self) -> Event | None:
        """The next event, or None when the server ended the body."""
        while not self._ready:
            chunk = next(self._chunks, None)
            if chunk is None:
                self.ended = True
                return None
            self._ready += [
                Event(e.event, json.loads(e.data), e.id) for e in self._parser.feed(chunk)
            ]
        event = self._ready.pop(0)
        self.events.append(event)
        return event

    def until(self, wanted: str | Callable[[Event], bool], timeout: float = READ_TIMEOUT) -> Event:
        """Read until an event of kind ``wanted`` (or for which ``wanted(event)`` holds);
        AssertionError if the body ends or ``timeout`` seconds pass first."""
        matches = wanted if callable(wanted) else (lambda event: event.kind == wanted)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = self.next()
            if event is None:
                break
            if matches(event):
                return event
        raise AssertionError(f"no {wanted!r} event; got {[e.kind for e in self.events]}")

    def to_end(self) -> list[Event]:
        """Every event up to the end of the body (a replay's ``connection-closing``)."""
        while self.next() is not None:
            pass
        return self.events

    def notifications(self) -> list[Event]:
        """The notifications read so far (not control events nor heartbeats)."""
        return [event for event in self.events if event.is_notification]


# -- the client ------------------------------------------------------------------------------


class AvisoClient(httpx.Client):
    """An httpx client on a running aviso server, with the API's three verbs."""

    def notify(
        self,
        event_type: str,
        identifier: Mapping[str, Any],
        payload: Any = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> httpx.Response:
        """POST /api/v1/notification; ``payload=None`` sends none, ``extra`` are more body
        members. Returns the response unchecked, so a test can assert on a rejection
        (status, ``code``, ``message``)."""
        body: dict[str, Any] = {"event_type": event_type, "identifier": dict(identifier), **extra}
        if payload is not None:
            body["payload"] = payload
        return self.post("/api/v1/notification", json=body, headers=headers)

    @contextmanager
    def watch(
        self,
        event_type: str,
        identifier: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> Iterator[EventStream]:
        """POST /api/v1/watch; the stream is open (``connection_established`` read) on entry,
        so a notification sent inside the block is delivered to it. A refused request raises
        AssertionError with the status and body."""
        with self._stream("/api/v1/watch", event_type, identifier, headers, extra) as stream:
            stream.until(lambda event: event.data.get("type") == "connection_established")
            yield stream

    def replay(
        self,
        event_type: str,
        identifier: Mapping[str, Any],
        from_id: str | None = "1",
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> EventStream:
        """POST /api/v1/replay from ``from_id`` (or pass ``from_date=...`` and
        ``from_id=None``), read to the end of the stream."""
        if from_id is not None:
            extra["from_id"] = from_id
        with self._stream("/api/v1/replay", event_type, identifier, headers, extra) as stream:
            stream.to_end()
        return stream

    @contextmanager
    def _stream(
        self,
        path: str,
        event_type: str,
        identifier: Mapping[str, Any],
        headers: Mapping[str, str] | None,
        extra: Mapping[str, Any],
    ) -> Iterator[EventStream]:
        body = {"event_type": event_type, "identifier": dict(identifier), **extra}
        with self.stream("POST", path, json=body, headers=headers) as response:
            if response.status_code != 200:
                response.read()
                raise AssertionError(f"{path}: {response.status_code} {response.text}")
            yield EventStream(response)


# -- the server ------------------------------------------------------------------------------


class ThreadedServer(AvisoServer):
    """``aviso-server serve``'s server, signalling when it listens (or failed to start), for
    running in a background thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: Any = None) -> None:
        self.loop = asyncio.get_running_loop()
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()


@contextmanager
def serve(
    config: Mapping[str, Any] | str, plugins: Iterable[object] = (), installed: bool = False
) -> Iterator[AvisoClient]:
    """Run :func:`build_app` on 127.0.0.1 (a free port) and yield a client for it; the
    server's open streams are closed and it stops when the block ends."""
    app = build_app(config, plugins, installed)
    server = ThreadedServer(uvicorn_config(app, "127.0.0.1", 0), app.state.service)
    thread = threading.Thread(target=server.run, name="aviso-testing", daemon=True)
    thread.start()
    try:
        if not server.ready.wait(START_TIMEOUT) or not server.started:
            raise RuntimeError("the aviso test server did not start (see the log above)")
        port = server.servers[0].sockets[0].getsockname()[1]
        timeout = httpx.Timeout(READ_TIMEOUT)
        with AvisoClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout) as client:
            yield client
    finally:
        if server.loop is not None and server.started:
            # Streams still open end with connection-closing, as on SIGTERM.
            closing = app.state.service.begin_shutdown()
            asyncio.run_coroutine_threadsafe(closing, server.loop).result(START_TIMEOUT)
        server.should_exit = True
        thread.join(START_TIMEOUT)
