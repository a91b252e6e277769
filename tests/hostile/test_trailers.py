"""Trailer fields after a chunked body are a second request head: bounded in size and time.

httptools reports them after the body, through the same header callback as the head's
fields; before, nothing counted them, so a client could make the server hold any amount of
them, or trickle them for ever.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from tests.hostile.support import (
    VALID_NOTIFY,
    assert_still_serving,
    read_until_closed,
    status_and_body,
)
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import RunningServer, running_server

HEAD = b"POST /api/v1/notification HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
MIB = 1024 * 1024


def _chunked_body() -> bytes:
    """A valid notification as one chunk, then the last chunk's size line (no trailers yet)."""
    data = json.dumps(VALID_NOTIFY).encode()
    return b"%x\r\n%s\r\n0\r\n" % (len(data), data)


def _address(client: httpx.Client | RunningServer) -> tuple[str, int]:
    url = httpx.URL(str(client.base_url if isinstance(client, httpx.Client) else client.url))
    assert url.host and url.port
    return url.host, url.port


def _send_ignoring_close(sock: socket.socket, data: bytes) -> None:
    # Closed after the linger: the answer was sent long before.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(data)


def _answer_while_trickling(sock: socket.socket) -> bytes:
    """The server's answer, read while another thread sends one byte every 0.2 s."""
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.2):
            _send_ignoring_close(sock, b"X")

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        return read_until_closed(sock)
    finally:
        stop.set()
        sender.join(10)


def _status_and_code(answer: bytes) -> tuple[int, str]:
    status, body = status_and_body(answer)
    return status, body["code"]


def test_small_trailer_fields_are_accepted(hostile: httpx.Client) -> None:
    with socket.create_connection(_address(hostile), timeout=30) as sock:
        closing = HEAD.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n")
        sock.sendall(closing + _chunked_body() + b"X-Checksum: abc\r\nX-Other: 1\r\n\r\n")
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer


@pytest.mark.parametrize(
    "trailers",
    [
        # Many whole fields: the parser reports each.
        b"".join(b"X-Pad-%d: %s\r\n" % (n, b"a" * 8000) for n in range(13)) + b"\r\n",
        # One field that never ends: the parser reports nothing, it only buffers.
        b"X-Pad: " + b"a" * (5 * MIB),
    ],
    ids=["many-fields", "one-endless-field"],
)
def test_trailer_fields_count_toward_max_header_bytes(
    hostile: httpx.Client, trailers: bytes
) -> None:
    """Over ``max_header_bytes`` (64 KiB) of trailer fields: 431, never the notify's 200."""
    with socket.create_connection(_address(hostile), timeout=30) as sock:
        sock.sendall(HEAD + _chunked_body())
        for start in range(0, len(trailers), 65536):
            _send_ignoring_close(sock, trailers[start : start + 65536])
        answer = read_until_closed(sock)
    assert _status_and_code(answer) == (431, "HEADER_FIELDS_TOO_LARGE"), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1
    assert_still_serving(hostile)


@pytest.fixture(scope="module")
def quick_timeouts() -> Iterator[RunningServer]:
    with running_server(with_changes(API_EXAMPLE, limits={"header_timeout_seconds": 1.0})) as s:
        yield s


def test_trickled_trailer_fields_are_timed_out(quick_timeouts: RunningServer) -> None:
    """Trailer fields sent a byte at a time must end within ``header_timeout_seconds``,
    like a head: 408, however long the client would go on."""
    with socket.create_connection(_address(quick_timeouts), timeout=30) as sock:
        sock.sendall(HEAD + _chunked_body())
        answer = _answer_while_trickling(sock)
    assert _status_and_code(answer) == (408, "REQUEST_TIMEOUT"), answer[:200]
    with httpx.Client(base_url=quick_timeouts.url, timeout=30) as client:
        assert_still_serving(client)


def test_trickled_trailer_fields_on_a_probe_are_timed_out(quick_timeouts: RunningServer) -> None:
    """``/health`` answers before its chunked body ends; trailer fields trickled after that
    answer still get ``header_timeout_seconds``: then the connection is closed."""
    with socket.create_connection(_address(quick_timeouts), timeout=30) as sock:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\n"
        )
        answer = _answer_while_trickling(sock)  # returns once the server closed it
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1


def _rss(process: psutil.Process) -> int:
    return int(process.memory_info().rss)


def test_trailer_floods_on_a_probe_are_cut_and_their_memory_returns(
    hostile_server: RunningServer,
) -> None:
    """The attack as found: ``GET /health`` with a chunked body, then megabytes of trailer
    lines, on several connections at once. ``/health`` answers without reading the body;
    the trailers still count toward ``max_header_bytes``, so each connection is closed
    (after its 200, or with 431), and the server holds nothing of them afterwards."""
    server = hostile_server
    process = psutil.Process()
    head = (
        b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
    )
    flood = b"X-T: " + b"a" * 1000 + b"\r\n"
    per_connection = 8 * MIB
    before = _rss(process)

    def attack(answers: list[bytes]) -> None:
        with socket.create_connection(_address(server), timeout=30) as sock:
            sock.sendall(head)
            block = flood * 64
            for _ in range(per_connection // len(block)):
                try:
                    sock.sendall(block)
                except OSError:  # closed or reset by the server: the flood was refused
                    break
            answers.append(read_until_closed(sock))

    answers: list[bytes] = []
    attackers = [threading.Thread(target=attack, args=(answers,)) for _ in range(4)]
    for attacker in attackers:
        attacker.start()
    for attacker in attackers:
        attacker.join(60)
    assert len(answers) == 4
    for answer in answers:
        # Answered once (the probe's 200, or 431 if the flood came first), never twice.
        assert answer.count(b"HTTP/1.1 ") <= 1, answer[:200]
        assert answer == b"" or answer.startswith((b"HTTP/1.1 200 ", b"HTTP/1.1 431 ")), answer[
            :200
        ]
    connections = server.server.server_state.connections
    deadline = time.monotonic() + 30
    while len(connections) > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(connections) == 0, "the attackers' connections are still open"
    # Before trailers were counted, the server held every trailer line sent: 32 MiB here.
    assert _rss(process) - before < 16 * MIB
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert_still_serving(client)
