"""Graceful shutdown on SIGTERM, and a live subscription that cannot be set up."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conformance.helpers import (
    REPLAY,
    SSE_SETUP_ERROR_KEYS,
    WATCH,
    assert_error,
    check_event_invariants,
    gauge,
    open_stream,
    post,
    read_stream,
    request_id_header,
    unique_basin,
)
from tests.support.configs import API_EXAMPLE, ForBackend, with_changes
from tests.support.process import aviso_process
from tests.support.refusing_subscriptions import RefusingSubscriptionsPlugin
from tests.support.server import RunningServer, running_server
from tests.support.sse import Event, Stream

SHUTDOWN_MESSAGE = "Server is shutting down gracefully"

# -- graceful shutdown ----------------------------------------------------------------------------


@pytest.fixture
def slow_replay_process(
    tmp_path: Path, for_backend: ForBackend
) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """``aviso-server serve`` in a subprocess, with a slow replay (one notification per second)."""
    document = for_backend(
        with_changes(
            API_EXAMPLE, watch_endpoint={"replay_batch_size": 1, "replay_batch_delay_ms": 1000}
        )
    )
    config = tmp_path / "aviso.yaml"
    config.write_text(yaml.safe_dump(document))
    log = tmp_path / "server.log"
    with aviso_process(config, log) as (url, process):
        yield process, url, log


def _read_in_thread(
    url: str, path: str, body: dict[str, Any], ready_kind: str
) -> tuple[threading.Thread, threading.Event, list[Event], list[BaseException]]:
    """Read a stream to its end in a thread; ``ready`` is set at the first ``ready_kind``."""
    ready = threading.Event()
    events: list[Event] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            with (
                httpx.Client(base_url=url, timeout=httpx.Timeout(30.0)) as http,
                http.stream("POST", path, content=json.dumps(body)) as response,
            ):
                assert response.status_code == 200
                for event in Stream(response).events():
                    check_event_invariants(event)
                    events.append(event)
                    if event.kind == ready_kind:
                        ready.set()
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, ready, events, failures


def test_sigterm_closes_open_streams(
    slow_replay_process: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    process, url, log = slow_replay_process
    basin = unique_basin()
    with httpx.Client(base_url=url, timeout=10.0) as http:
        for level in range(8):
            gauge(http, basin, level)
    live = {"event_type": "river_gauge", "identifier": {"basin": basin}}
    slow = {**live, "from_id": "0"}
    watch_thread, watch_ready, watch_events, watch_failures = _read_in_thread(
        url, WATCH, live, "live-notification/connection_established"
    )
    replay_thread, replay_ready, replay_events, replay_failures = _read_in_thread(
        url, REPLAY, slow, "replay"
    )
    assert watch_ready.wait(10) and replay_ready.wait(10)
    assert not watch_failures and not replay_failures, (watch_failures, replay_failures)

    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    watch_thread.join(30)
    replay_thread.join(30)
    assert not watch_thread.is_alive() and not replay_thread.is_alive(), log.read_text()
    assert not watch_failures and not replay_failures, (watch_failures, replay_failures)
    try:
        process.wait(max(1.0, 30 - (time.monotonic() - signalled)))
    except subprocess.TimeoutExpired:
        pytest.fail("the server did not exit within 30 s of SIGTERM\n" + log.read_text())
    assert time.monotonic() - signalled < 30

    assert watch_events[0].kind == "live-notification/connection_established"
    assert replay_events[0].kind == "replay-control/replay_started"
    assert len([e for e in replay_events if e.name == "replay"]) < 8, "cut mid-replay"
    for events in (watch_events, replay_events):
        last = events[-1]
        assert last.name == "connection-closing", [event.kind for event in events]
        assert last.data["reason"] == "server_shutdown"
        assert last.data["message"] == SHUTDOWN_MESSAGE
        assert last.data["request_id"] == events[0].data["request_id"]
        assert [event.name for event in events].count("connection-closing") == 1


# -- subscription setup failure -------------------------------------------------------------------


# Single-backend by design: the failing store is a fake (an in-memory subclass), not a backend
# under test, so these tests are not parametrised over ``backend``.
@pytest.fixture(scope="module")
def refusing_server() -> Iterator[RunningServer]:
    document = with_changes(
        API_EXAMPLE,
        notification_backend={
            "kind": "refusing_subscriptions",
            "refusing_subscriptions": {"max_history_per_topic": 100},
        },
    )
    with running_server(document, extra_plugins=[RefusingSubscriptionsPlugin()]) as server:
        yield server


@pytest.fixture
def refusing(refusing_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=refusing_server.url, timeout=10.0) as http:
        yield http


def test_live_only_watch_gets_setup_500(refusing: httpx.Client) -> None:
    basin = unique_basin()
    body = {"event_type": "river_gauge", "identifier": {"basin": basin}}
    error = assert_error(
        post(refusing, WATCH, body),
        500,
        "SSE_STREAM_INITIALIZATION_FAILED",
        error="SSE stream creation failed",
        message="Failed to create stream consumer",
        keys=SSE_SETUP_ERROR_KEYS,
    )
    assert error["topic"] == f"gauge.{basin}.*.*"
    # The backend's reason ("connection refused") goes to the log, not to the client.
    assert error["details"] == "Failed to create stream consumer"


def test_cursor_watch_replays_then_ends(refusing: httpx.Client) -> None:
    basin = unique_basin()
    gauge(refusing, basin, 1)
    gauge(refusing, basin, 2)
    body = {"event_type": "river_gauge", "identifier": {"basin": basin}, "from_id": "0"}
    with open_stream(refusing, WATCH, body) as stream:
        events = stream.to_end()
        request_id = request_id_header(stream.response)
    assert stream.ended
    kinds = [event.kind for event in events if event.name != "heartbeat"]
    assert kinds == [
        "replay-control/replay_started",
        "replay",
        "replay",
        "replay-control/replay_completed",
        "connection-closing",
    ]
    closing = events[-1].data
    assert closing["reason"] == "end_of_stream"
    assert closing["message"] == "Stream completed"
    assert closing["request_id"] == request_id


def test_replay_endpoint_needs_no_subscription(refusing: httpx.Client) -> None:
    basin = unique_basin()
    gauge(refusing, basin)
    body = {"event_type": "river_gauge", "identifier": {"basin": basin}, "from_id": "0"}
    result = read_stream(refusing, REPLAY, body)
    assert len(result.notifications()) == 1
    assert result.events[-1].data["reason"] == "end_of_stream"
