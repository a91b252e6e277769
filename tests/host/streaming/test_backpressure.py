"""Slow consumers: bounded queues, the two policies, and no effect on other clients."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from aviso_plugins._shared.sse import SSEParser
from aviso_plugins.testing import EventStream
from tests.support.pipelined import post_many, request_bytes
from tests.support.process import aviso_process
from tests.support.raw_http import unread_connection
from tests.support.sse import collect

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

PAD = "x" * 2048
SEQUENCE = re.compile(rb'"sequence":(\d+),')
ROUND = 500

CONFIG = """
application: {{host: 127.0.0.1, port: 0}}
notification_backend:
  kind: in_memory
  in_memory: {{max_history_per_topic: 100000, max_topics: 1000}}
watch_endpoint:
  max_queue_bytes: 65536
  on_backpressure: {policy}
  sse_heartbeat_interval_sec: 30
notification_schema:
  feed:
    topic: {{base: feed, key_order: [name]}}
    identifier:
      name: {{type: StringHandler, required: true}}
"""

WATCH = {"event_type": "feed", "identifier": {"name": "x"}}


def _notification(n: int) -> bytes:
    body = {**WATCH, "payload": {"n": n, "pad": PAD}}
    return request_bytes("/api/v1/notification", body)


def _frozen_watch(port: int) -> socket.socket:
    """A watch whose client reads nothing until told to."""
    return unread_connection(port, request_bytes("/api/v1/watch", WATCH))


async def _publish_until_logged(port: int, log: Path, marker: str) -> int:
    """Publish rounds of notifications until the server logs ``marker``; return the count.

    How much the kernel's socket buffers absorb before a frozen client's stream blocks
    varies, so the amount needed to overflow the stream's queue is found by publishing.
    """
    published = 0
    for _ in range(20):
        statuses = await post_many(port, ROUND, _notification, connections=4)
        assert statuses == {200: ROUND}
        published += ROUND
        if marker in log.read_text():
            return published
    raise AssertionError(f"{marker} was never logged")


def _read_events(client: socket.socket) -> list[dict[str, Any]]:
    """Read the frozen watch to its end and parse it."""
    client.settimeout(10)
    raw = b""
    while chunk := client.recv(65536):
        raw += chunk
    return _parse(raw)


def _read_until(client: socket.socket, marker: bytes, raw: bytes = b"") -> bytes:
    """Read until the SSE frame holding ``marker`` has arrived whole."""
    client.settimeout(10)
    while (found := raw.find(marker)) < 0 or raw.find(b"\n\n", found) < 0:
        chunk = client.recv(65536)
        assert chunk, f"stream ended before {marker!r}"
        raw += chunk
    return raw


def _parse(raw: bytes) -> list[dict[str, Any]]:
    """The SSE frames of a raw HTTP/1.1 chunked response, as event/data pairs."""
    body = raw.split(b"\r\n\r\n", 1)[1]
    text = b"".join(_dechunk(body)).decode()
    events = []
    for frame in text.split("\n\n")[:-1]:  # a trailing partial frame is left out
        if frame:
            name, data = frame.split("\n")
            events.append({"event": name[7:], "data": json.loads(data[6:])})
    return events


def _dechunk(body: bytes) -> list[bytes]:
    parts = []
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        parts.append(body[:size])  # the last chunk read may be incomplete
        body = body[size + 2 :]
    return parts


async def _readers(port: int, count: int, publish: Callable[[], Awaitable[int]]) -> list[list[int]]:
    """``count`` healthy watches reading until the notification marked ``end`` arrives."""
    opened = asyncio.Event()
    ready: list[int] = []

    async def reader() -> list[int]:
        body = json.dumps(WATCH)
        stream_reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST /api/v1/watch HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            f"{body}".encode()
        )
        sequences: list[int] = []
        buffer = b""
        announced = False
        while b'"end":true' not in buffer:
            chunk = await asyncio.wait_for(stream_reader.read(1 << 16), 60)
            assert chunk, "a healthy watch was closed"
            buffer = buffer[-64:] + chunk
            if not announced and b"connection_established" in buffer:
                announced = True
                ready.append(1)
                if len(ready) == count:
                    opened.set()
            sequences += [int(found) for found in SEQUENCE.findall(chunk)]
        writer.close()
        return sequences

    tasks = [asyncio.create_task(reader()) for _ in range(count)]
    await asyncio.wait_for(opened.wait(), 60)
    total = await publish()
    end = request_bytes("/api/v1/notification", {**WATCH, "payload": {"end": True}})
    assert await post_many(port, 1, lambda n: end, connections=1) == {200: 1}
    results = await asyncio.wait_for(asyncio.gather(*tasks), 120)
    assert all(sequences[-1] == total + 1 for sequences in results)
    return results


def test_a_frozen_client_does_not_slow_a_hundred_others(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(policy="disconnect"))
    log = tmp_path / "server.log"
    with aviso_process(config, log) as (url, _):
        port = int(url.rsplit(":", 1)[1])

        async def publish() -> int:
            return await _publish_until_logged(port, log, "stream.backpressure.disconnect")

        frozen = _frozen_watch(port)
        try:
            results = asyncio.run(_readers(port, 100, publish))
        finally:
            frozen.close()
    for sequences in results:
        assert sequences == list(range(1, len(sequences) + 1))


def test_disconnect_policy_gives_the_resume_point_and_nothing_is_lost(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(policy="disconnect"))
    log = tmp_path / "server.log"
    with aviso_process(config, log) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        frozen = _frozen_watch(port)
        total = asyncio.run(_publish_until_logged(port, log, "stream.backpressure.disconnect"))
        try:
            events = _read_events(frozen)
        finally:
            frozen.close()
        closing = events[-1]
        assert closing["event"] == "connection-closing"
        # end_of_stream on the wire (pyaviso reconnects from its cursor), the cause beside it.
        assert closing["data"]["reason"] == "end_of_stream"
        assert closing["data"]["cause"] == "slow_consumer"
        resume = closing["data"]["resume_from_sequence"]
        seen = [
            e["data"]["sequence"]
            for e in events
            if e["event"] == "live-notification" and "sequence" in e["data"]
        ]
        assert seen == list(range(1, len(seen) + 1))
        assert resume == len(seen) + 1
        with httpx.Client(base_url=url) as client:
            rest = collect(client, "/api/v1/replay", {**WATCH, "from_id": str(resume)})
        replayed = [e.data["sequence"] for e in rest if e.name == "replay"]
    assert seen + replayed == list(range(1, total + 1))


def test_drop_policy_skips_and_says_how_many(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(policy="drop"))
    log = tmp_path / "server.log"
    with aviso_process(config, log) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        frozen = _frozen_watch(port)
        total = asyncio.run(_publish_until_logged(port, log, "stream.backpressure.dropping"))
        # The client reads again: the stream reports the skipped notifications, then a
        # sentinel published afterwards arrives normally.
        raw = _read_until(frozen, b"notifications_skipped")
        asyncio.run(post_many(port, 1, lambda n: _notification(total), connections=1))
        raw = _read_until(frozen, b'"sequence":%d,' % (total + 1), raw)
        frozen.close()
    events = _parse(raw)
    # An event name of its own: every live-notification after the opening is a CloudEvent.
    skipped = [e["data"] for e in events if e["event"] == "notifications-skipped"]
    live = [e["data"] for e in events if e["event"] == "live-notification"]
    assert all("id" in data for data in live if data["type"] != "connection_established")
    delivered = [e["data"]["sequence"] for e in events if "sequence" in e["data"]]
    assert len(skipped) == 1
    assert delivered == sorted(set(delivered)) and delivered[-1] == total + 1
    assert len(delivered) + skipped[0]["skipped"] == total + 1
    first, last = skipped[0]["first_skipped_sequence"], skipped[0]["last_skipped_sequence"]
    assert not set(delivered) & set(range(first, last + 1))


def test_a_frozen_subscription_reader_is_cut_off_and_resumes_from_its_cursor(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(policy="disconnect"))
    log = tmp_path / "server.log"
    events_path = "/api/v1/subscriptions/frozen/events"
    with aviso_process(config, log) as (url, _), httpx.Client(base_url=url) as client:
        port = int(url.rsplit(":", 1)[1])
        assert client.put("/api/v1/subscriptions/frozen", json=WATCH).status_code == 201
        request = f"GET {events_path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
        frozen = unread_connection(port, request)
        try:
            total = asyncio.run(_publish_until_logged(port, log, "stream.backpressure.disconnect"))
            frozen.settimeout(10)
            raw = b""
            while chunk := frozen.recv(65536):
                raw += chunk
        finally:
            frozen.close()
        body = b"".join(_dechunk(raw.split(b"\r\n\r\n", 1)[1]))
        frames = SSEParser().feed(body)
        assert frames[-1].event == "connection-closing"
        assert json.loads(frames[-1].data)["cause"] == "slow_consumer"
        seen = [int(f.id) for f in frames if f.event in ("replay", "live-notification")]
        assert seen == list(range(1, len(seen) + 1))
        # Reconnecting as an EventSource would acknowledges what was seen and resumes after it.
        headers = {"Last-Event-ID": str(seen[-1])}
        with client.stream("GET", events_path, headers=headers, timeout=60) as response:
            stream = EventStream(response)
            rest = [stream.until(lambda e: e.is_notification).data["sequence"]]
            while rest[-1] < total:
                rest.append(stream.until(lambda e: e.is_notification).data["sequence"])
        assert seen + rest == list(range(1, total + 1))
        state = client.get("/api/v1/subscriptions/frozen").json()
        assert state["acknowledged_sequence"] == seen[-1]
