"""An unpaced replay shares the event loop: other requests are served while it is produced."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import StartCursor
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import RunningServer, running_server
from tests.support.sse import DEFAULT_TIMEOUT

STORED = 20_000
# One record per batch: the replay has 20,000 batch boundaries at which to let others in,
# and lasts long enough that the notify arrives while it runs however busy the machine is.
BATCH_SIZE = 1
FRAME = re.compile(rb"event: ([^\n]+)\ndata: ([^\n]+)\n\n")


def _notification(marker: str) -> dict[str, object]:
    return {
        "event_type": "river_gauge",
        "identifier": {"basin": "rhine", "date": "2026-04-02", "level": 3},
        "payload": {"marker": marker},
    }


def _post(url: str, path: str, body: object) -> bytes:
    """A whole ``Connection: close`` POST request, byte for byte."""
    content = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {urlsplit(url).netloc}\r\nConnection: close\r\n"
        f"Content-Length: {len(content)}\r\n\r\n"
    )
    return head.encode() + content


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return socket.create_connection((parts.hostname, parts.port), timeout=DEFAULT_TIMEOUT.read)


def _read_all(sock: socket.socket, on_started: Callable[[], None] = lambda: None) -> bytes:
    """Everything the server sends until it closes; ``on_started`` runs once the bytes so far
    hold ``replay_started``. Large reads, so that the client keeps up: a server waiting on a
    full send buffer hands the loop to others by itself, which would hide a replay that
    never yields."""
    received = bytearray()
    started = False
    while chunk := sock.recv(1 << 22):
        received += chunk
        if not started and b"replay_started" in received:
            started = True
            on_started()
    return bytes(received)


def _fill_history(server: RunningServer, client: httpx.Client) -> None:
    """Store one notification through the API, then ``STORED - 1`` copies straight away."""
    response = client.post("/api/v1/notification", content=json.dumps(_notification("before")))
    assert response.status_code == 200, response.text
    backend = server.service.backend
    pattern = TopicPattern(("gauge", None, None, None))
    template = server.call(lambda: backend.fetch_batch(pattern, StartCursor(), 1)).messages[0]

    async def copy() -> None:
        for _ in range(STORED - 1):
            await backend.publish(template.topic, template.payload, template.metadata)

    server.call(copy, timeout=60)


def test_unpaced_replay_lets_a_notify_in_before_it_completes() -> None:
    config = with_changes(
        API_EXAMPLE,
        notification_backend={
            "kind": "in_memory",
            "in_memory": {"max_history_per_topic": 2 * STORED},
        },
        watch_endpoint={
            "replay_batch_size": BATCH_SIZE,
            "replay_batch_delay_ms": 0,
            "max_historical_notifications": 2 * STORED,
        },
    )
    with running_server(config) as server, httpx.Client(base_url=server.url) as client:
        _fill_history(server, client)
        notify = _post(server.url, "/api/v1/notification", _notification("during"))
        replay = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}, "from_id": "0"}
        started = threading.Event()
        received: list[bytes] = []
        with _connect(server.url) as replayer:
            replayer.sendall(_post(server.url, "/api/v1/replay", replay))
            # The replay is read on its own thread, at full speed: a replay waiting on a full
            # send buffer would hand the loop to the notify by itself.
            reader = threading.Thread(
                target=lambda: received.append(_read_all(replayer, started.set))
            )
            reader.start()
            assert started.wait(DEFAULT_TIMEOUT.read)
            # Observed on the server's loop at the moment the notify is stored: whether the
            # replay stream is still open then (the backend itself is the real one).
            backend = server.service.backend
            store = backend.publish
            open_at_publish: list[int] = []

            async def observed_publish(*args: Any, **kwargs: Any) -> Any:
                open_at_publish.append(len(server.service.streams.open))
                return await store(*args, **kwargs)

            backend.publish = observed_publish  # type: ignore[method-assign]
            with _connect(server.url) as notifier:
                notifier.sendall(notify)
                answer = _read_all(notifier)
            reader.join(60)
        raw = received[0]

    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert open_at_publish == [1], "the notify was only served once the replay had finished"
    # Every batch is sent as whole frames, so frames never straddle transfer-encoding chunks.
    frames = [(name, json.loads(data)) for name, data in FRAME.findall(raw)]
    markers = [data["data"]["payload"]["marker"] for name, data in frames if name == b"replay"]
    # The replay ends at what was stored when it started.
    assert markers == ["before"] * STORED
    assert [data.get("type") for _, data in frames[-2:]] == ["replay_completed", None], frames[-2:]
