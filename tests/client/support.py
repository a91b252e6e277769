"""Driving ECMWF's client pyaviso 2.4.2 against aviso-py: its ``aviso`` command as a child
process with a private HOME, and a running ``aviso listen`` read line by line.

Every child process and every wait is bounded. ``aviso listen`` runs until stopped: it is
stopped with one SIGINT (its graceful drain, which flushes the state file) once the output
the test waits for has arrived.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx

COMMAND_TIMEOUT = 60.0
WAIT = 30.0
"""Bound on waiting for one expected output line of a running listener."""
STOP_GRACE = 15.0
SUBSCRIBED = '"event.name":"client.watch.subscribed"'
"""pyaviso's debug log event (``aviso -v``) for each stream it opened and confirmed."""

CONFIG = {
    "application": {"host": "127.0.0.1", "port": 0, "base_url": "http://aviso.test"},
    "notification_backend": {
        "kind": "in_memory",
        "in_memory": {"max_history_per_topic": 10000, "max_topics": 10000},
    },
    "watch_endpoint": {
        "sse_heartbeat_interval_sec": 5,
        "connection_max_duration_sec": 900,
        "replay_batch_delay_ms": 0,
    },
    "notification_schema": {
        "feed": {
            "payload": {"required": False},
            "topic": {"base": "feed", "key_order": ["name", "step"]},
            "identifier": {
                "name": {"type": "StringHandler", "required": True},
                "step": {"type": "IntHandler", "required": False},
            },
        },
    },
}
"""The schema every client test uses; tests isolate their data with a unique ``name``."""


def aviso_cli(*args: str) -> list[str]:
    """pyaviso's ``aviso`` command, run by the interpreter that has pyaviso installed."""
    return [sys.executable, "-m", "pyaviso", *args]


def client_env(home: Path, base_url: str | None, **extra: str) -> dict[str, str]:
    """A sealed environment for pyaviso: its own HOME (so no user config or state file is
    read), no inherited ``AVISO_*`` settings, and ``AVISO_BASE_URL`` pointing at the server."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("AVISO") and name != "XDG_CONFIG_HOME"
    }
    env.update(HOME=str(home), NO_COLOR="1")
    if base_url is not None:
        env["AVISO_BASE_URL"] = base_url
    env.update(extra)
    return env


def run(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """One short ``aviso`` command (not ``listen``), output as text."""
    return subprocess.run(
        aviso_cli(*args),
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    """The echo trigger's notifications: one JSON object per stdout line."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


class Listening:
    """A running ``aviso listen``; its stdout and stderr lines are collected as they come."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.stdout: queue.Queue[str] = queue.Queue()
        self.stderr_lines: list[str] = []
        self._stderr_changed = threading.Condition()
        assert process.stdout is not None and process.stderr is not None
        self._threads = [
            threading.Thread(target=self._pump, args=(process.stdout, None), daemon=True),
            threading.Thread(target=self._pump, args=(process.stderr, True), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _pump(self, stream: IO[str], is_stderr: bool | None) -> None:
        for line in stream:
            if is_stderr:
                with self._stderr_changed:
                    self.stderr_lines.append(line)
                    self._stderr_changed.notify_all()
            else:
                self.stdout.put(line)
        if is_stderr:
            with self._stderr_changed:
                self._stderr_changed.notify_all()

    def notifications(self, count: int, timeout: float = WAIT) -> list[dict[str, Any]]:
        """The next ``count`` notifications the echo trigger printed."""
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(found) < count:
            remaining = deadline - time.monotonic()
            try:
                line = self.stdout.get(timeout=max(remaining, 0.01))
            except queue.Empty:
                raise AssertionError(
                    f"{len(found)} of {count} notifications after {timeout} s: {found}; "
                    f"stderr: {''.join(self.stderr_lines)[-3000:]}"
                ) from None
            if line.startswith("{"):
                found.append(json.loads(line))
        return found

    def no_more_notifications(self) -> list[str]:
        """What is left on stdout (call after :meth:`stop`)."""
        left = []
        while not self.stdout.empty():
            left.append(self.stdout.get_nowait())
        return [line for line in left if line.startswith("{")]

    def wait_stderr(self, text: str, timeout: float = WAIT, count: int = 1) -> str:
        """Wait until ``count`` stderr lines contain ``text``; return the last of them."""
        deadline = time.monotonic() + timeout
        with self._stderr_changed:
            while True:
                found = [line for line in self.stderr_lines if text in line]
                if len(found) >= count:
                    return found[count - 1]
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.process.poll() is not None and self._drained()):
                    raise AssertionError(f"no {text!r} on stderr: {''.join(self.stderr_lines)}")
                self._stderr_changed.wait(min(remaining, 0.5))

    def _drained(self) -> bool:
        return not self._threads[1].is_alive()

    def connected(self, timeout: float = WAIT) -> None:
        """Wait until every listener has confirmed its stream."""
        self.wait_stderr("Listening for", timeout)

    def subscribed(self, times: int, timeout: float = WAIT) -> None:
        """Wait for the ``times``-th confirmed stream (reconnects included; needs ``-v``)."""
        self.wait_stderr(SUBSCRIBED, timeout, times)

    def count(self, text: str) -> int:
        with self._stderr_changed:
            return sum(text in line for line in self.stderr_lines)

    def stop(self) -> int:
        """One SIGINT (graceful: pending state is flushed), then the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(STOP_GRACE)
        self._close_pipes()
        return code

    def exited(self, timeout: float = WAIT) -> int:
        """Wait for the listener to stop by itself (a fatal error); its exit code."""
        code = self.process.wait(timeout)
        self._close_pipes()
        return code

    def _close_pipes(self) -> None:
        for thread in self._threads:
            thread.join(STOP_GRACE)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@contextmanager
def listening(env: Mapping[str, str], *args: str) -> Iterator[Listening]:
    """``aviso listen ARGS`` running for the duration of the block, stopped at its end."""
    process = subprocess.Popen(
        aviso_cli("listen", *args),
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    listener = Listening(process)
    try:
        yield listener
    finally:
        listener.stop()


def write_listeners(path: Path, listeners: list[dict[str, Any]]) -> Path:
    """A listener YAML file (JSON is YAML)."""
    path.write_text(json.dumps({"listeners": listeners}))
    return path


def publish(url: str, name: str, count: int, start: int = 0, **identifier: Any) -> None:
    """``count`` notifications for ``name`` (payload ``{"n": i}``), straight over HTTP: the
    producer is not what these tests are about."""
    with httpx.Client(base_url=url, timeout=10.0) as http:
        for n in range(start, start + count):
            body = {
                "event_type": "feed",
                "identifier": {"name": name, "step": 1, **identifier},
                "payload": {"n": n},
            }
            answer = http.post("/api/v1/notification", json=body)
            assert answer.status_code == 200, answer.text


def payloads(notifications: list[dict[str, Any]]) -> list[Any]:
    return [notification["payload"]["n"] for notification in notifications]


class ServerEvent(logging.Handler):
    """Set once the in-process server logs ``event_name`` (e.g. a backpressure decision)."""

    def __init__(self, event_name: str) -> None:
        super().__init__()
        self.event_name = event_name
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "fields", {}).get("event_name") == self.event_name:
            self.seen.set()


@contextmanager
def server_event(event_name: str) -> Iterator[threading.Event]:
    handler = ServerEvent(event_name)
    logger = logging.getLogger("aviso")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler.seen
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
