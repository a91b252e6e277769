"""Requests NATS refuses by dropping the connection, on JetStream.

nats-server closes a client that sends a subject over its 4,096-byte control line. The
identifier limit normally refuses such a value with 400 before it reaches NATS; this
server raises the limit so that the value reaches NATS, and the attack must leave no lasting
damage: the request fails (the documented 500, or an SSE ``error`` for a replay) within
the client's timeout, and the very next valid requests succeed on the same process.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aviso_builtins.backends.jetstream.backend import JetStreamBackend
from aviso_plugins.types import BackendContext
from tests.hostile.support import VALID_NOTIFY, assert_still_serving
from tests.support.configs import API_EXAMPLE, jetstream_variant, with_changes
from tests.support.nats import NatsServer, nats_server
from tests.support.server import RunningServer, running_server
from tests.support.sse import Stream

HUGE = "x" * 5_000  # over nats-server's default max_control_line (4,096 bytes)


@pytest.fixture(scope="module")
def nats_hostile(nats_session: NatsServer) -> Iterator[httpx.Client]:
    """A JetStream server of its own whose identifier limit lets 5,000-byte values through."""
    config = with_changes(
        API_EXAMPLE, limits={"max_identifier_value_bytes": 100_000, "max_topic_bytes": 100_000}
    )
    server: RunningServer
    with (
        running_server(jetstream_variant(config, nats_session.url)) as server,
        httpx.Client(base_url=server.url, timeout=30.0) as http,
    ):
        yield http


def _assert_storage_failed(answer: httpx.Response) -> None:
    assert answer.status_code == 500, answer.text
    assert answer.json()["code"] == "NOTIFICATION_STORAGE_FAILED", answer.text


def test_a_5000_byte_identifier_value_does_not_break_the_nats_connection(
    nats_hostile: httpx.Client,
) -> None:
    body = {**VALID_NOTIFY, "identifier": {**VALID_NOTIFY["identifier"], "basin": HUGE}}
    _assert_storage_failed(nats_hostile.post("/api/v1/notification", json=body))
    assert_still_serving(nats_hostile)
    assert nats_hostile.get("/ready").status_code == 200


def test_a_5000_byte_replay_filter_does_not_break_the_nats_connection(
    nats_hostile: httpx.Client,
) -> None:
    answer = nats_hostile.post(
        "/api/v1/replay",
        json={"event_type": "river_gauge", "identifier": {"basin": HUGE}, "from_id": "1"},
    )
    assert answer.status_code == 200, answer.text
    assert "event: error" in answer.text, answer.text
    assert_still_serving(nats_hostile)


def test_a_5000_character_stream_name_to_wipe_does_not_break_the_nats_connection(
    nats_hostile: httpx.Client,
) -> None:
    answer = nats_hostile.request(
        "DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": "s" * 5_000}
    )
    assert answer.status_code in (400, 404, 500), answer.text
    assert_still_serving(nats_hostile)


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        pytest.param("/api/v1/watch", {"from_id": "1"}, id="cursor_watch"),
        pytest.param("/api/v1/aggregate", {"group_by": ["level"]}, id="aggregate"),
    ],
)
def test_a_5000_byte_filter_on_a_history_reading_stream_does_not_break_the_nats_connection(
    nats_hostile: httpx.Client, path: str, extra: dict[str, object]
) -> None:
    """The stream reports the failed history read as an SSE ``error`` (read until then,
    bounded by the client's read timeout) and the service keeps serving."""
    body = {"event_type": "river_gauge", "identifier": {"basin": HUGE}, **extra}
    with nats_hostile.stream("POST", path, json=body) as answer:
        assert answer.status_code == 200, answer.read()
        names = []
        for event in Stream(answer).events():
            names.append(event.name)
            if event.name in ("error", "connection-closing"):
                break
    assert "error" in names, names
    assert_still_serving(nats_hostile)


def test_a_reconnect_attempt_that_times_out_logs_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """nats-server replaced by a listener that never answers: each reconnect attempt times
    out, and its log line says so (a timeout's exception has no text of its own)."""
    caplog.set_level(logging.WARNING, logger="aviso.jetstream")

    def reasons() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("NATS error")]

    async def run(nats: NatsServer) -> None:
        options = {"nats_url": nats.url, "reconnect_delay_ms": 100, "timeout_seconds": 1}
        backend = JetStreamBackend(BackendContext(options, {}))
        await backend.start()
        try:
            port = int(nats.url.rsplit(":", 1)[1])
            nats.stop()
            with socket.create_server(("127.0.0.1", port)):  # accepts, never answers
                deadline = time.monotonic() + 20
                while "NATS error: TimeoutError" not in reasons():
                    assert time.monotonic() < deadline, reasons()
                    await asyncio.sleep(0.1)
        finally:
            await backend.shutdown()

    with nats_server(tmp_path) as nats:
        asyncio.run(asyncio.wait_for(run(nats), 60))
    assert all(reason.removeprefix("NATS error: ").strip() for reason in reasons()), reasons()
