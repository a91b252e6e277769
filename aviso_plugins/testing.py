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
:func:`build_app` gives the Starlette application alone, for an ASGI test client or to mount;
:func:`run_sink` runs a sink plugin on notifications validated as Spark validates them.

The errors a test may expect are here too, so a plugin's tests never import the host:
:class:`ConfigError` (a configuration the host refuses, worded as ``config check`` words it)
and :class:`PluginError` (a plugin that cannot load, clashes with another or fails to start).
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import yaml
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from aviso_host.embedding import (
    AvisoServer,
    ConfigError,
    PluginError,
    PluginRegistry,
    Settings,
    deep_merge,
    discover,
    settings_from_document,
    uvicorn_config,
)
from aviso_plugins._shared.sse import SSEParser
from aviso_plugins.types import Notification, SinkOutcome, SinkRejected

START_TIMEOUT = 15.0
READ_TIMEOUT = 10.0
NOTIFICATION_EVENTS = ("live-notification", "replay")
_OPENING_EVENTS = ("connection_established", "replay_started")
TEST_DEFAULTS: Mapping[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {"kind": "in_memory"},
}

__all__ = [
    "NOTIFICATION_EVENTS",
    "READ_TIMEOUT",
    "START_TIMEOUT",
    "TEST_DEFAULTS",
    "AvisoClient",
    "ConfigError",
    "Event",
    "EventStream",
    "PluginError",
    "StreamError",
    "ThreadedServer",
    "build_app",
    "run_sink",
    "serve",
]


def _settings(
    config: Mapping[str, Any] | str, plugins: Iterable[object], installed: bool
) -> tuple[Settings, PluginRegistry]:
    given = yaml.safe_load(config) if isinstance(config, str) else config
    registry = discover(load_entry_points=installed, extra=plugins)
    for problem in registry.warnings:  # what serve would log, e.g. a hook without @hookimpl
        warnings.warn(problem, UserWarning, stacklevel=3)
    return settings_from_document(deep_merge(TEST_DEFAULTS, given or {}), registry), registry


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
    from aviso_host.embedding import create_app

    settings, registry = _settings(config, plugins, installed)
    return create_app(settings, registry)


def run_sink(
    name: str,
    notifications: Iterable[tuple[str, Mapping[str, Any], Any]],
    options: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | str | None = None,
    plugins: Iterable[object] = (),
    installed: bool = False,
) -> list[SinkOutcome]:
    """Build the sink ``name`` from ``options`` as Spark does (its ``options_schema``
    applied, the configuration's schemas as its planner), validate each ``(event_type,
    identifier, payload)`` as the Spark writer does, publish the valid ones in one batch and
    close the sink. Returns one outcome per notification, in order: a notification the host
    refuses gets ``SinkOutcome(error=SinkRejected(code, message))`` without reaching the sink.

    ``config``, ``plugins`` and ``installed`` are those of :func:`build_app`. Unusable options
    raise ``ConfigError`` (or the sink's ``ValueError`` as a ``ConfigError``).
    """
    from aviso_host.embedding import build_backend, build_sink, catalog_planner

    settings, registry = _settings(config or {}, plugins, installed)
    planner = catalog_planner(settings, registry)
    sink = build_sink(
        registry, name, options or {}, planner, lambda: build_backend(settings, registry)
    )
    outcomes: list[SinkOutcome | None] = []
    valid: list[Notification] = []
    for event_type, identifier, payload in notifications:
        try:
            planned = planner.plan(event_type, identifier, payload)
        except SinkRejected as rejected:
            outcomes.append(SinkOutcome(error=rejected))
            continue
        valid.append(Notification(event_type, identifier, payload, planned=planned))
        outcomes.append(None)

    async def publish() -> list[SinkOutcome]:
        await sink.start()
        try:
            return await sink.publish_batch(valid) if valid else []
        finally:
            await sink.close()

    published = iter(asyncio.run(publish()))
    return [outcome if outcome is not None else next(published) for outcome in outcomes]


# -- reading streams -------------------------------------------------------------------------


class StreamError(AssertionError):
    """The server ended a stream with an ``event: error`` (``event`` is that event)."""

    def __init__(self, path: str, event: Event) -> None:
        super().__init__(f"{path}: the stream ended with an error: {event.data}")
        self.event = event


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
    """An open SSE response, read event by event; every wait is bounded by its timeout
    (``READ_TIMEOUT`` unless given).

    Chunks are read one at a time, only when an event is wanted, by a thread of the
    stream's own: a blocking socket read cannot be given a deadline per call, while a
    thread's answer can be waited for with one. A read that times out stays pending and
    answers the next wait, so nothing is lost or read ahead of the test.
    """

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.path = response.request.url.path
        self.events: list[Event] = []
        self.ended = False
        self._parser = SSEParser()
        self._ready: list[Event] = []
        self._wanted = threading.Semaphore(0)
        self._read: queue.SimpleQueue[bytes | Exception | None] = queue.SimpleQueue()
        self._pending = False
        self._closed = False
        self._reader: threading.Thread | None = None

    def next(self, timeout: float = READ_TIMEOUT) -> Event | None:
        """The next event, or None when the server ended the body; AssertionError when
        none comes within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self._ready:
            if self.ended:
                return None
            chunk = self._chunk(deadline)
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
        AssertionError if the body ends or ``timeout`` seconds pass first, :class:`StreamError`
        if an ``event: error`` comes first."""
        matches = wanted if callable(wanted) else (lambda event: event.kind == wanted)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.next(left)
            except AssertionError:
                break
            if event is None:
                break
            if matches(event):
                return event
            if event.name == "error":
                raise StreamError(self.path, event)
        raise AssertionError(
            f"no {wanted!r} event within {timeout} s; got {[e.kind for e in self.events]}"
        )

    def close(self) -> None:
        """Let the reader thread end (the response itself is closed by its owner)."""
        self._closed = True
        self._wanted.release()

    def _chunk(self, deadline: float) -> bytes | None:
        if self._reader is None:
            self._reader = threading.Thread(
                target=self._read_chunks, name=f"aviso-testing-read {self.path}", daemon=True
            )
            self._reader.start()
        if not self._pending:
            self._pending = True
            self._wanted.release()
        try:
            chunk = self._read.get(timeout=max(deadline - time.monotonic(), 0))
        except queue.Empty:
            raise AssertionError(
                f"{self.path}: no event in time; got {[e.kind for e in self.events]}"
            ) from None
        self._pending = False
        if isinstance(chunk, Exception):
            raise chunk
        return chunk

    def _read_chunks(self) -> None:
        chunks = self.response.iter_bytes()
        while True:
            self._wanted.acquire()
            if self._closed:
                return
            try:
                chunk = next(chunks, None)
            except Exception as exc:  # handed to the test's thread, raised there
                self._read.put(exc)
                return
            self._read.put(chunk)
            if chunk is None:
                return

    def to_end(self) -> list[Event]:
        """Every event up to the end of the body (a replay's ``connection-closing``);
        :class:`StreamError` if one of them is an ``event: error``."""
        while self.next() is not None:
            pass
        for event in self.events:
            if event.name == "error":
                raise StreamError(self.path, event)
        return self.events

    def notifications(self) -> list[Event]:
        """The notifications read so far (not control events nor heartbeats)."""
        return [event for event in self.events if event.is_notification]


# -- the client ------------------------------------------------------------------------------


class AvisoClient(httpx.Client):
    """An httpx client on a running aviso server, with the API's three verbs.

    ``app`` is the server's application; ``metrics_registry`` its prometheus registry (what
    ``GET /metrics`` serves), e.g. ``aviso.metrics_registry.get_sample_value(name, labels)``.
    """

    app: Starlette | None = None

    @property
    def metrics_registry(self) -> CollectorRegistry:
        if self.app is None:
            raise RuntimeError("this client was not made by aviso_plugins.testing.serve")
        registry: CollectorRegistry = self.app.state.service.metrics.registry
        return registry

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
        """POST /api/v1/watch; the stream is open on entry (its first control event read:
        ``connection_established``, or ``replay_started`` for a watch that resumes from
        ``from_id=...`` or ``from_date=...``), so a notification sent inside the block is
        delivered to it. A refused request raises AssertionError with the status and body."""
        with self._stream("/api/v1/watch", event_type, identifier, headers, extra) as stream:
            stream.until(lambda event: event.data.get("type") in _OPENING_EVENTS)
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
        ``from_id=None``), read to the end of the stream; :class:`StreamError` if the server
        ended it with an ``event: error`` (a history it could not read)."""
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
            stream = EventStream(response)
            try:
                yield stream
            finally:
                stream.close()


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
            if server.start_error is not None:
                # The plugin's own exception is the cause, for a test to inspect.
                raise PluginError(
                    f"the aviso test server did not start: {server.start_error}"
                ) from server.start_error.__cause__
            raise RuntimeError("the aviso test server did not start (see the log above)")
        port = server.servers[0].sockets[0].getsockname()[1]
        timeout = httpx.Timeout(READ_TIMEOUT)
        with AvisoClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout) as client:
            client.app = app
            yield client
    finally:
        if server.loop is not None and server.started:
            # Streams still open end with connection-closing, as on SIGTERM.
            closing = app.state.service.begin_shutdown()
            asyncio.run_coroutine_threadsafe(closing, server.loop).result(START_TIMEOUT)
        server.should_exit = True
        thread.join(START_TIMEOUT)
