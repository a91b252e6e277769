"""An unpaced replay shares the event loop: other requests are served while it is produced."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import StartCursor
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import RunningServer, running_server
from tests.support.sse import DEFAULT_TIMEOUT

STORED = 20_000
# Small batches: the replay has thousands of batch boundaries at which to let others in.
BATCH_SIZE = 10
FRAME = re.compile(rb"event: ([^\n]+)\ndata: ([^\n]+)\n\n")


def _notification(marker: str) -> dict[str, object]:
    return {
        "event_type": "river_gauge",
        "identifier": {"basin": "rhine", "date": "2026-04-02", "level": 3},
        "payload": {"marker": marker},
    }


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


def _replay_bytes(url: str, body: dict[str, object], on_started: Callable[[], None]) -> bytes:
    """Read a whole replay response, calling ``on_started`` once ``replay_started`` arrives.

    A raw socket drained in large reads, so that the client keeps up and the server is not
    made to wait on a full send buffer (which would hand the loop to others by itself).
    """
    parts = urlsplit(url)
    content = json.dumps(body).encode()
    request = (
        f"POST /api/v1/replay HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n"
        f"Content-Length: {len(content)}\r\n\r\n"
    ).encode() + content
    received = bytearray()
    started = False
    with socket.create_connection(
        (parts.hostname, parts.port), timeout=DEFAULT_TIMEOUT.read
    ) as sock:
        sock.sendall(request)
        while chunk := sock.recv(1 << 22):
            received += chunk
            if not started and b"replay_started" in received:
                started = True
                on_started()
    return bytes(received)


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
        statuses: list[int] = []

        def notify_during_replay() -> None:
            with httpx.Client(base_url=server.url, timeout=DEFAULT_TIMEOUT) as other:
                body = json.dumps(_notification("during"))
                statuses.append(other.post("/api/v1/notification", content=body).status_code)

        notifier = threading.Thread(target=notify_during_replay)
        body = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}, "from_id": "0"}
        raw = _replay_bytes(server.url, body, notifier.start)
        notifier.join(DEFAULT_TIMEOUT.read)

    assert statuses == [200]
    # Every batch is sent as whole frames, so frames never straddle transfer-encoding chunks.
    frames = [(name, json.loads(data)) for name, data in FRAME.findall(raw)]
    markers = [data["data"]["payload"]["marker"] for name, data in frames if name == b"replay"]
    # The notify was stored while the replay was still paging, so the replay (which reads
    # up to the end of the log) delivered it before completing.
    assert markers.count("before") == STORED
    assert markers[-1] == "during", "the concurrent notify was not served before the end"
    assert [data.get("type") for _, data in frames[-2:]] == ["replay_completed", None], frames[-2:]
