"""Helpers for the JetStream backend tests.

Everything is a real process on 127.0.0.1: ``aviso-server serve`` children talking to real
``nats-server -js`` processes (``tests.support.nats``). Streams are inspected directly with
nats-py. Every wait is a bounded poll; every child process is stopped by the context manager
that started it, whatever the test outcome.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import nats
import yaml
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from tests.support.process import free_port
from tests.support.sse import Event, Stream

AVISO = (sys.executable, "-c", "from aviso_host.cli import main; main()")
START_TIMEOUT = 90.0  # until GET /health answers (workers start slowly on a loaded machine)
EXIT_TIMEOUT = 90.0  # a refused configuration must have exited by then (a loaded machine)
STOP_TIMEOUT = 15.0  # SIGTERM, then SIGKILL
POLL = 0.05
HTTP_TIMEOUT = httpx.Timeout(15.0)
STREAM_TIMEOUT = httpx.Timeout(15.0, read=15.0)

NOTIFY = "/api/v1/notification"
WATCH = "/api/v1/watch"
REPLAY = "/api/v1/replay"
ERROR_KEYS = {"code", "details", "error", "message", "request_id"}

_runs = itertools.count(1)
_MISSING: Any = object()
T = TypeVar("T")


def unique(prefix: str) -> str:
    """A fresh lower-case name: as a generic event type it is a fresh topic base/stream."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


# -- configuration ----------------------------------------------------------------------


def document(
    nats_url: str | None,
    *,
    jetstream: Mapping[str, Any] | None = None,
    schemas: Mapping[str, Any] | None = None,
    watch: Mapping[str, Any] | None = None,
    kind: str = "jetstream",
) -> dict[str, Any]:
    """A configuration on the JetStream backend with quick reconnect settings.

    ``notification_schema_strict`` is false so that any undeclared event type is accepted:
    its name is its topic base, which gives each test its own fresh stream.
    """
    options: dict[str, Any] = {
        "retry_attempts": 2,
        "timeout_seconds": 2,
        "reconnect_delay_ms": 200,
        "max_reconnect_attempts": 0,
    }
    if nats_url is not None:
        options["nats_url"] = nats_url
    options.update(jetstream or {})
    return {
        "application": {"host": "127.0.0.1", "port": 0, "base_url": "http://aviso.test"},
        "logging": {"level": "info"},
        "notification_backend": {"kind": kind, "jetstream": options},
        "notification_schema_strict": False,
        "notification_schema": dict(schemas or {}),
        "watch_endpoint": {
            "sse_heartbeat_interval_sec": 1,
            "replay_batch_size": 100,
            # 0: no pause between pages (a pause trips the host's timer bug, see
            # test_replay_pages_with_a_batch_delay).
            "replay_batch_delay_ms": 0,
        },
    }


def write_config(directory: Path, content: Mapping[str, Any]) -> Path:
    path = directory / f"aviso-{next(_runs)}.yaml"
    path.write_text(yaml.safe_dump(dict(content), sort_keys=False), encoding="utf-8")
    return path


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``os.environ`` without inherited ``AVISOSERVER_*`` / ``NATS_TOKEN``, plus ``extra``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith("AVISOSERVER_") and name != "NATS_TOKEN"
    }
    env.update(extra or {})
    return env


# -- aviso-server serve child processes --------------------------------------------------------


def _healthy(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(f"{url}/health").status_code == 200
    except httpx.TransportError:
        return False


def port_served(port: int) -> bool:
    with httpx.Client(timeout=0.5) as client:
        return _healthy(client, f"http://127.0.0.1:{port}")


def stop_process(process: subprocess.Popen[bytes], kill: bool = False) -> None:
    """SIGTERM (or SIGKILL), wait, SIGKILL on timeout; always reaps."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait(STOP_TIMEOUT)


@dataclass
class Aviso:
    """A running ``aviso-server serve``."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=HTTP_TIMEOUT)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        """kill -9: no shutdown code runs."""
        stop_process(self.process, kill=True)

    def stop(self) -> None:
        stop_process(self.process)


def _spawn(
    directory: Path, config: Path | None, args: tuple[str, ...], env: Mapping[str, str] | None
) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = free_port()
    log_path = directory / f"aviso-{next(_runs)}.log"
    command = [*AVISO, "serve", "--port", str(port), *args]
    if config is not None:
        command += ["--config", str(config)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=directory,
            env=environment(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    return process, port, log_path


@contextmanager
def aviso_serving(
    directory: Path,
    config: Mapping[str, Any] | Path | None,
    *args: str,
    env: Mapping[str, str] | None = None,
) -> Iterator[Aviso]:
    """``aviso-server serve [--config FILE] --port P ARGS``; yields once ``/health`` answers."""
    if isinstance(config, Mapping):
        config = write_config(directory, config)
    process, port, log_path = _spawn(directory, config, args, env)
    server = Aviso(process, port, log_path)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        with httpx.Client(timeout=1.0) as client:
            while not _healthy(client, server.url):
                if process.poll() is not None:
                    raise AssertionError(
                        f"aviso-server serve exited with {process.returncode}:\n{server.log()}"
                    )
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"aviso-server serve did not become healthy:\n{server.log()}"
                    )
                time.sleep(POLL)
        yield server
    finally:
        stop_process(process)


@dataclass
class Refusal:
    """How an ``aviso-server serve`` that was expected to refuse its configuration ended."""

    returncode: int | None
    served: bool
    """Whether its HTTP port ever answered ``/health``."""
    output: str

    def assert_refused(self, *fragments: str) -> None:
        assert not self.served, f"the HTTP port was served:\n{self.output}"
        assert self.returncode is not None, f"still running, never exited:\n{self.output[-3000:]}"
        assert self.returncode != 0, f"exit status 0:\n{self.output}"
        for fragment in fragments:
            assert fragment in self.output, f"{fragment!r} not in the output:\n{self.output}"


@dataclass
class Case:
    """One configuration ``aviso-server serve`` must refuse."""

    content: Mapping[str, Any]
    env: Mapping[str, str] | None = None
    timeout: float = EXIT_TIMEOUT
    """Seconds after its start by which it must have exited."""


def serve_refusals(
    directory: Path, cases: Mapping[str, Case], parallel: int = 4
) -> dict[str, Refusal]:
    """Run one ``aviso-server serve`` per case, ``parallel`` at a time, each on its own port; wait
    until each exits (bounded by its timeout), noting whether its port was ever served.
    Every process is reaped before this returns."""
    waiting = list(cases.items())
    running: dict[str, tuple[subprocess.Popen[bytes], int, Path, float]] = {}
    results: dict[str, Refusal] = {}
    served: dict[str, bool] = dict.fromkeys(cases, False)

    def finish(name: str) -> None:
        process, _, log_path, _ = running.pop(name)
        returncode = process.poll()
        stop_process(process, kill=True)
        output = log_path.read_text(encoding="utf-8", errors="replace")
        results[name] = Refusal(returncode, served[name], output)

    try:
        with httpx.Client(timeout=0.5) as client:
            while waiting or running:
                while waiting and len(running) < parallel:
                    name, case = waiting.pop(0)
                    config = write_config(directory, case.content)
                    spawned = _spawn(directory, config, (), case.env)
                    running[name] = (*spawned, time.monotonic() + case.timeout)
                for name, (process, port, _, deadline) in list(running.items()):
                    if process.poll() is not None or time.monotonic() > deadline:
                        finish(name)
                    elif _healthy(client, f"http://127.0.0.1:{port}"):
                        served[name] = True
                        finish(name)
                time.sleep(POLL)
    finally:
        for process, _, _, _ in running.values():
            stop_process(process, kill=True)
    return results


# -- NATS inspection with nats-py -------------------------------------------------------


def with_jetstream(
    url: str, action: Callable[[JetStreamContext], Awaitable[T]], token: str | None = None
) -> T:
    """Run ``action(js)`` on a fresh nats-py connection of this thread."""

    async def run() -> T:
        nc = await nats.connect(
            servers=[url], token=token, allow_reconnect=False, connect_timeout=5
        )
        try:
            return await asyncio.wait_for(action(nc.jetstream()), 20)
        finally:
            await nc.close()

    return asyncio.run(run())


def stream_config(url: str, name: str) -> api.StreamConfig | None:
    """The stream's configuration as the server reports it, or ``None`` if it does not exist."""

    async def info(js: JetStreamContext) -> api.StreamConfig | None:
        try:
            return (await js.stream_info(name)).config
        except NotFoundError:
            return None

    return with_jetstream(url, info)


def stream_state(url: str, name: str) -> api.StreamState:
    async def info(js: JetStreamContext) -> api.StreamState:
        return (await js.stream_info(name)).state

    return with_jetstream(url, info)


@dataclass
class RawMessage:
    sequence: int
    subject: str
    body: bytes
    headers: dict[str, str]


def stored_messages(url: str, name: str) -> list[RawMessage]:
    """Every message the stream holds, read one by one by sequence (no consumer)."""

    async def read(js: JetStreamContext) -> list[RawMessage]:
        state = (await js.stream_info(name)).state
        found = []
        for sequence in range(state.first_seq, state.last_seq + 1):
            try:
                msg = await js.get_msg(name, sequence)
            except NotFoundError:
                continue
            assert msg.seq is not None and msg.subject is not None
            found.append(RawMessage(msg.seq, msg.subject, msg.data or b"", dict(msg.headers or {})))
        return found

    return with_jetstream(url, read)


# -- HTTP -------------------------------------------------------------------------------


def notify(
    client: httpx.Client, event_type: str, identifier: Mapping[str, Any], payload: Any = _MISSING
) -> httpx.Response:
    body: dict[str, Any] = {"event_type": event_type, "identifier": dict(identifier)}
    if payload is not _MISSING:
        body["payload"] = payload
    return client.post(NOTIFY, content=json.dumps(body))


def notify_ok(
    client: httpx.Client, event_type: str, identifier: Mapping[str, Any], payload: Any = _MISSING
) -> None:
    response = notify(client, event_type, identifier, payload)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "success", response.text


def assert_storage_failed(response: httpx.Response) -> dict[str, Any]:
    """500 NOTIFICATION_STORAGE_FAILED in aviso's JSON error shape."""
    assert response.status_code == 500, (response.status_code, response.text)
    assert response.headers["content-type"].split(";")[0] == "application/json"
    body = response.json()
    assert set(body) == ERROR_KEYS, body
    assert body["code"] == "NOTIFICATION_STORAGE_FAILED", body
    assert body["error"] == "Notification Storage Failed", body
    assert body["message"] == "Failed to store notification", body
    assert body["request_id"] == response.headers["x-request-id"], body
    return body


def replay(
    client: httpx.Client,
    event_type: str,
    identifier: Mapping[str, Any],
    *,
    from_id: str | None = "1",
    from_date: str | None = None,
    timeout: float = 30.0,
    read_timeout: float = 15.0,
) -> list[dict[str, Any]]:
    """The CloudEvents of a complete replay (which must end with ``end_of_stream``)."""
    body: dict[str, Any] = {"event_type": event_type, "identifier": dict(identifier)}
    if from_date is not None:
        body["from_date"] = from_date
    elif from_id is not None:
        body["from_id"] = from_id
    events: list[Event] = []
    deadline = time.monotonic() + timeout
    limits = httpx.Timeout(15.0, read=read_timeout)
    with client.stream("POST", REPLAY, content=json.dumps(body), timeout=limits) as resp:
        assert resp.status_code == 200, resp.read()
        for event in Stream(resp).events():
            events.append(event)
            assert event.name != "error", event.data
            assert time.monotonic() < deadline, "replay did not finish in time"
    assert events and events[-1].name == "connection-closing", [e.kind for e in events]
    assert events[-1].data["reason"] == "end_of_stream", events[-1].data
    return [event.data for event in events if event.name == "replay"]


def ids(events: list[dict[str, Any]]) -> list[str]:
    return [event["id"] for event in events]


@dataclass
class Watch:
    """An open watch stream, read event by event with deadlines (heartbeats every second
    keep every blocking read short)."""

    response: httpx.Response
    events: list[Event] = field(default_factory=list)
    ended: bool = False

    def __post_init__(self) -> None:
        self._iterator = Stream(self.response).events()

    def next(self) -> Event | None:
        if self.ended:
            return None
        try:
            event = next(self._iterator)
        except StopIteration:
            self.ended = True
            return None
        self.events.append(event)
        return event

    def until(self, predicate: Callable[[Event], bool], timeout: float = 15.0) -> Event:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = self.next()
            assert event is not None, f"stream ended: {[e.kind for e in self.events]}"
            if predicate(event):
                return event
        raise AssertionError(f"timed out; got {[e.kind for e in self.events]}")

    def notifications(self) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.name == "live-notification" and _is_ce(e)]

    def collect(self, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Read until ``count`` notifications in total have arrived; return them all."""
        deadline = time.monotonic() + timeout
        while len(self.notifications()) < count:
            assert time.monotonic() < deadline, (
                f"timed out with {len(self.notifications())}/{count} notifications: "
                f"{[e.kind for e in self.events][-20:]}"
            )
            event = self.next()
            assert event is not None, f"stream ended: {[e.kind for e in self.events]}"
            assert event.name != "error", event.data
        return self.notifications()


def _is_ce(event: Event) -> bool:
    return str(event.data.get("type", "")).startswith("int.ecmwf.aviso.")


@contextmanager
def watching(
    client: httpx.Client, event_type: str, identifier: Mapping[str, Any]
) -> Iterator[Watch]:
    """A live watch, yielded once ``connection_established`` arrived (subscription in place)."""
    body = {"event_type": event_type, "identifier": dict(identifier)}
    with client.stream("POST", WATCH, content=json.dumps(body), timeout=STREAM_TIMEOUT) as resp:
        assert resp.status_code == 200, resp.read()
        watch = Watch(resp)
        first = watch.next()
        assert first is not None and first.kind == "live-notification/connection_established", first
        yield watch


def poll(condition: Callable[[], T], timeout: float, what: str, step: float = 0.1) -> T:
    """Call ``condition`` until it returns a true value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(step)
