"""Helpers of the hostile-input suite."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.support.process import (
    aviso_command,
    clean_environment,
    free_port,
    stop,
    wait_until_healthy,
)
from tests.support.server import RunningServer

WAIT = 30.0
"""Bound on any one wait: every answer and close awaited comes long before."""
VALID_NOTIFY = {
    "event_type": "river_gauge",
    "identifier": {"basin": "rhine", "date": "20260402", "level": 3},
    "payload": {"path": "/data/ok"},
}


def assert_still_serving(client: httpx.Client) -> None:
    """The attack left the service usable: ``/health`` and a valid notify (whose value is
    unique, then found by a replay) both answer."""
    assert client.get("/health").status_code == 200
    basin = f"alive{uuid.uuid4().hex[:12]}"
    body = {**VALID_NOTIFY, "identifier": {**VALID_NOTIFY["identifier"], "basin": basin}}
    answer = client.post("/api/v1/notification", json=body)
    assert answer.status_code == 200, answer.text
    replay = client.post(
        "/api/v1/replay",
        json={"event_type": "river_gauge", "identifier": {"basin": basin}, "from_id": "1"},
    )
    assert replay.status_code == 200
    assert basin in replay.text


def assert_client_error(answer: httpx.Response, status: int, code: str | None = None) -> None:
    """A documented refusal: the expected 4xx in our JSON error shape with a request id."""
    assert answer.status_code == status, answer.text
    assert answer.headers.get("x-request-id")
    if code is not None:
        body = answer.json()
        assert body["code"] == code, body
        assert body["request_id"] == answer.headers["x-request-id"]


def server_port(server: RunningServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def read_until_closed(sock: socket.socket, timeout: float = 30.0) -> bytes:
    """Everything the server sends until it closes the connection (EOF or reset)."""
    sock.settimeout(timeout)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def status_and_body(answer: bytes) -> tuple[int, dict[str, Any]]:
    """The status and the JSON body (``{}`` when there is none) of a raw HTTP answer."""
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else {}


def connect_from(server: RunningServer, source: str = "127.0.0.1") -> socket.socket:
    """A raw connection to ``server`` from the loopback address ``source``."""
    sock = socket.socket()
    sock.settimeout(WAIT)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", server_port(server)))
    return sock


def client_from(server: RunningServer, source: str = "127.0.0.1") -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=source)
    return httpx.Client(base_url=server.url, timeout=WAIT, transport=transport)


def wait_for(condition: Callable[[], object], what: str) -> None:
    """Poll ``condition`` until it holds; fail with ``what`` after ``WAIT`` seconds."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def read_to_end(sock: socket.socket) -> tuple[bytes, bool]:
    """Everything the server sends until it ends the connection, and whether it ended it
    with a reset; fails if it has not within ``WAIT`` seconds, whatever it sends meanwhile
    (a stream's heartbeats)."""
    deadline = time.monotonic() + WAIT
    chunks = []
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"the connection is still open: {b''.join(chunks)[-300:]!r}"
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return b"".join(chunks), True
        except TimeoutError:
            continue
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)


def server_side(server_port: int, client_port: int) -> list[str]:
    """The states of the kernel's sockets for the server's end of one connection (none
    once it was reset)."""
    return [
        connection.status
        for connection in psutil.net_connections(kind="tcp4")
        if connection.laddr
        and connection.raddr
        and (connection.laddr.port, connection.raddr.port) == (server_port, client_port)
    ]


@contextmanager
def serving(
    tmp_path: Path, config: str, limit_descriptors: Callable[[], None]
) -> Iterator[tuple[int, int]]:
    """``aviso-server serve`` on ``config`` (YAML text), started with ``limit_descriptors``
    applied in the child; yields its port and pid. Its stderr is in
    ``tmp_path / "server.log"``."""
    path = tmp_path / "config.yaml"
    path.write_text(config)
    port = free_port()
    with (tmp_path / "server.log").open("wb") as stderr:
        process = subprocess.Popen(
            aviso_command("serve", "--config", str(path), "--port", str(port)),
            stderr=stderr,
            stdout=subprocess.DEVNULL,
            env=clean_environment(),
            preexec_fn=limit_descriptors,
        )
        try:
            wait_until_healthy(f"http://127.0.0.1:{port}", process)
            yield port, process.pid
        finally:
            stop(process, 30.0)


def log_lines(tmp_path: Path) -> list[dict[str, Any]]:
    """The JSON lines of the server :func:`serving` ran."""
    return [json.loads(line) for line in (tmp_path / "server.log").read_text().splitlines()]
