"""Live events written by the fan-out itself, and the watch that falls behind and catches up.

A watch whose task is asleep with nothing queued, on a connection below its write high-water
mark, gets each live event written straight from the fan-out: one HTTP chunk per event, even
when a burst of notifications lands in one loop turn (the task would have written them as one
chunk). A client that stops reading pushes its connection over the mark: records then queue
for the stream's task, which writes what piled up together once the client reads again, and
the watch goes back to direct writes once it has caught up. Across the switches every event
arrives exactly once and in order. Both backends: the switching is the host's, behind either
backend's live feed.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest

from aviso_host.metrics import WATCH_ROUTE
from tests.support.configs import BACKENDS, jetstream_variant
from tests.support.pipelined import post_many, request_bytes
from tests.support.raw_http import unread_connection
from tests.support.server import RunningServer, running_server

WATCH = {"event_type": "feed", "identifier": {"name": "x"}}


def _config(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A stream of its own (JetStream's server is shared by the session), numbered from 1."""
    document: dict[str, Any] = {
        "application": {"host": "127.0.0.1", "port": 0},
        "notification_backend": {
            "kind": "in_memory",
            "in_memory": {"max_history_per_topic": 100000, "max_topics": 10},
        },
        "watch_endpoint": {"max_queue_bytes": 64 * 1024 * 1024, "sse_heartbeat_interval_sec": 3600},
        "notification_schema": {
            "feed": {
                "topic": {"base": f"direct{uuid.uuid4().hex[:8]}", "key_order": ["name"]},
                "identifier": {"name": {"type": "StringHandler", "required": True}},
            }
        },
    }
    if backend == "in_memory":
        return document
    return jetstream_variant(document, request.getfixturevalue("nats_session").url)


SEQUENCE = re.compile(rb'"sequence":(\d+),')
BURST = 20
ROUND = 250
"""8 KiB notifications per round published while the client reads nothing, until the kernel's
socket buffers are full and the server's transport passes its high-water mark."""
MIN_ROUNDS = 3
"""6 MiB at least: past what the kernel's buffers (``tcp_wmem``'s 4 MiB) take."""
MAX_ROUNDS = 20
"""At most 40 MiB queued: inside ``max_queue_bytes``, so the watch is never cut off."""
PROBES = 3
PAD = "x" * 8192
READ_TIMEOUT = 30.0


class ChunkedWatch:
    """A watch on a raw socket that reads its response as HTTP chunks."""

    def __init__(self, port: int) -> None:
        self.socket = unread_connection(port, request_bytes("/api/v1/watch", WATCH), READ_TIMEOUT)
        self._buffer = b""
        self._head = False
        self.chunks: list[bytes] = []

    def _read(self) -> None:
        data = self.socket.recv(1 << 16)
        assert data, "the watch was closed"
        self._buffer += data
        if not self._head:
            head, found, rest = self._buffer.partition(b"\r\n\r\n")
            if not found:
                return
            assert head.startswith(b"HTTP/1.1 200"), head
            self._head, self._buffer = True, rest
        while True:
            size_line, found, rest = self._buffer.partition(b"\r\n")
            if not found:
                return
            size = int(size_line, 16)
            if len(rest) < size + 2:
                return
            assert rest[size : size + 2] == b"\r\n"
            self.chunks.append(rest[:size])
            self._buffer = rest[size + 2 :]

    def read_until(self, predicate: bytes, count: int = 1) -> list[bytes]:
        """Read until ``count`` chunks in all contain ``predicate``; the chunks read."""
        first = len(self.chunks)
        while sum(predicate in chunk for chunk in self.chunks) < count:
            self._read()
        return self.chunks[first:]

    def read_sequences(self, last: int) -> list[bytes]:
        """Read until the event of sequence ``last`` has arrived; the chunks read."""
        first = len(self.chunks)
        while not any(
            int(found) >= last for chunk in self.chunks[first:] for found in SEQUENCE.findall(chunk)
        ):
            self._read()
        return self.chunks[first:]


def _notification(n: int, pad: str = "") -> bytes:
    body = {**WATCH, "payload": {"n": n, "pad": pad}}
    return request_bytes("/api/v1/notification", body)


def _publish(port: int, count: int, pad: str = "") -> None:
    """``count`` notifications, pipelined over four connections (many handled per loop turn)."""
    statuses = asyncio.run(post_many(port, count, lambda n: _notification(n, pad), connections=4))
    assert statuses == {200: count}


async def _waiting_on_the_client(server: RunningServer) -> bool:
    """Whether the watch's task is held by its connection (not asleep on its waiter).

    Run on the server's loop after the publishing requests were answered. A woken task runs
    within a loop turn and sleeps again unless its write waits, so a task seen awake at
    several turns in a row is held by its connection (or still being fed: the JetStream
    feed delivers after the answers, which is why several rounds are published anyway)."""
    (control,) = server.service.streams.open
    for _ in range(PROBES):
        if control.asleep:
            return False
        await asyncio.sleep(0)
    return True


def _publish_until_behind(server: RunningServer, port: int) -> int:
    """Publish rounds until the watch's connection holds its task back, then one more
    round (queued behind it); the notifications published."""
    for rounds in range(1, MAX_ROUNDS + 1):
        _publish(port, ROUND, PAD)
        if rounds >= MIN_ROUNDS and server.call(lambda: _waiting_on_the_client(server)):
            _publish(port, ROUND, PAD)
            return (rounds + 1) * ROUND
    raise AssertionError("the watch's connection never held its task back")


def _events_per_chunk(chunks: list[bytes]) -> list[int]:
    return [chunk.count(b"event: live-notification\n") for chunk in chunks]


def _sequences(chunks: list[bytes]) -> list[int]:
    return [int(found) for chunk in chunks for found in SEQUENCE.findall(chunk)]


def _sent(server: RunningServer) -> float:
    registry = server.service.metrics.registry
    value = registry.get_sample_value(
        "aviso_sse_events_sent_total", {"route": WATCH_ROUTE, "event_type": "feed"}
    )
    return value or 0.0


@pytest.mark.parametrize(
    "backend",
    # On JetStream, megabytes of file-stored messages: a minute or more on a loaded machine.
    [
        pytest.param(name, marks=pytest.mark.heavy) if name == "jetstream" else name
        for name in BACKENDS
    ],
)
def test_a_watch_switches_between_direct_and_queued_writes_without_loss(
    backend: str, request: pytest.FixtureRequest
) -> None:
    with running_server(_config(backend, request)) as server:
        port = int(server.url.rsplit(":", 1)[1])
        watch = ChunkedWatch(port)
        try:
            watch.read_until(b"connection_established")
            delivered: list[int] = []
            published = 0
            for _ in range(2):
                # Keeping up: a burst arrives one event per chunk, written by the fan-out.
                _publish(port, BURST)
                published += BURST
                chunks = watch.read_sequences(published)
                assert _events_per_chunk(chunks) == [1] * BURST
                delivered += _sequences(chunks)
                # Behind: the client reads nothing while much more is published...
                published += _publish_until_behind(server, port)
                # ...then catches up: what queued meanwhile comes several events a chunk.
                chunks = watch.read_sequences(published)
                assert max(_events_per_chunk(chunks)) > 1, "the stream never fell behind"
                delivered += _sequences(chunks)
            # Caught up: direct writes again.
            _publish(port, BURST)
            published += BURST
            chunks = watch.read_sequences(published)
            assert _events_per_chunk(chunks) == [1] * BURST
            delivered += _sequences(chunks)
        finally:
            watch.socket.close()
        assert delivered == list(range(1, published + 1))
        assert server.call(_next_turn) is None  # the counter is added to once per loop turn
        assert _sent(server) == published


async def _next_turn() -> None:
    await asyncio.sleep(0)
