"""A watch whose client goes away ends at once and lets go of what it held.

Under aviso's protocol the connection itself tells the stream (no task per stream waits on
``receive`` for the disconnect): the stream must still see a client that closes while the
watch is idle, and only that client's stream ends.
"""

from __future__ import annotations

import json
import socket
import time

from tests.support.configs import API_EXAMPLE
from tests.support.server import RunningServer, running_server

OPEN_TIMEOUT = 30.0


def _open_watch(server: RunningServer, body: dict[str, object]) -> socket.socket:
    data = json.dumps(body).encode()
    client = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
    client.settimeout(OPEN_TIMEOUT)
    client.sendall(
        b"POST /api/v1/watch HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
    )
    received = b""
    while b"connection_established" not in received and b"replay_started" not in received:
        chunk = client.recv(65536)
        assert chunk, f"the watch was refused: {received!r}"
        received += chunk
    return client


def _streams_end(server: RunningServer) -> bool:
    """Whether every stream of the server ended (bounded wait for the server's side)."""
    deadline = time.monotonic() + OPEN_TIMEOUT
    while server.service.streams.open and time.monotonic() < deadline:
        time.sleep(0.05)
    return not server.service.streams.open


def test_an_idle_watch_ends_when_its_client_closes() -> None:
    with running_server(API_EXAMPLE) as server:
        watches = [
            _open_watch(server, {"event_type": "river_gauge", "identifier": {"basin": f"b{n}"}})
            for n in range(3)
        ]
        assert len(server.service.streams.open) == 3
        watches[0].close()
        deadline = time.monotonic() + OPEN_TIMEOUT
        while len(server.service.streams.open) > 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(server.service.streams.open) == 2, "the closed watch's stream still runs"
        for watch in watches[1:]:
            watch.close()
        assert _streams_end(server), "watches whose clients closed still run"
