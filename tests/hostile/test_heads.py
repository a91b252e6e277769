"""Request heads that start in the same read as the end of the request before them.

Found: a 100 KB head right behind another request got 200 (the limit is 64 KiB; the same
head alone got 431), and behind an open watch an unfinished 200 KB head stayed in memory
for the watch's whole life (+193 KiB per connection): the size and the deadline of a head
were counted from the first read of a head only, and a head that began in the middle of a
read was neither measured nor timed. Now every head counts toward ``max_header_bytes``
and runs the head timer, wherever it starts.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest

from tests.hostile.support import (
    VALID_NOTIFY,
    assert_still_serving,
    client_from,
    connect_from,
    read_to_end,
    server_port,
    server_side,
    status_and_body,
    wait_for,
)
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import RunningServer, running_server

LIMIT = 4096
"""``max_header_bytes`` here: a head over it still fits one TCP segment on the loopback, so
the request before it and the head arrive in one read."""
TIMEOUT = 1.0
PROBE = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
OVERSIZED = b"GET /health HTTP/1.1\r\nX-Pad: " + b"a" * (LIMIT + 2048)
"""The start of a head past the limit, never finished."""
LAST_PROBE = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def _head(size: int, last: bool = False) -> bytes:
    """A complete ``GET /health`` head of about ``size`` bytes."""
    start = LAST_PROBE if last else PROBE
    start = start[:-2]
    return start + b"X-Pad: " + b"a" * (size - len(start) - 11) + b"\r\n\r\n"


def _notify(basin: str) -> bytes:
    body = json.dumps(
        {**VALID_NOTIFY, "identifier": {**VALID_NOTIFY["identifier"], "basin": basin}}
    ).encode()
    return (
        b"POST /api/v1/notification HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


def _watch(basin: str) -> bytes:
    body = json.dumps({"event_type": "river_gauge", "identifier": {"basin": basin}}).encode()
    return (
        b"POST /api/v1/watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


def _chunked_notify(basin: str) -> bytes:
    request = _notify(basin)
    head, _, body = request.partition(b"\r\n\r\n")
    head = head.replace(b"Content-Length: %d" % len(body), b"Transfer-Encoding: chunked")
    return head + b"\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


@pytest.fixture(scope="module")
def small_heads() -> Iterator[RunningServer]:
    limits = {"max_header_bytes": LIMIT, "header_timeout_seconds": TIMEOUT}
    with running_server(with_changes(API_EXAMPLE, limits=limits)) as server:
        yield server


def _open_on(server: RunningServer, sock: socket.socket) -> bool:
    port = sock.getsockname()[1]
    connections = list(server.server.server_state.connections)
    return any(c.client is not None and c.client[1] == port for c in connections)


def _refused(answer: bytes, status: int, code: str) -> None:
    """``answer`` ends with the protocol's refusal ``status`` and nothing answered after."""
    head, _, body = answer.rpartition(b"HTTP/1.1 ")[2].partition(b"\r\n\r\n")
    assert int(head.split()[0]) == status, answer[-400:]
    assert json.loads(body)["code"] == code


@pytest.mark.parametrize("before", ["probe", "notify", "chunked"])
def test_a_head_right_behind_a_request_counts_toward_the_limit(
    small_heads: RunningServer, before: str
) -> None:
    """The oversized head arrives in the same read as the request before it (a probe, a
    notify with its body, a chunked notify): 431, as the same head alone gets."""
    basin = f"behind{uuid.uuid4().hex[:12]}"
    previous = {"probe": PROBE, "notify": _notify(basin), "chunked": _chunked_notify(basin)}
    oversized = _head(LIMIT + 2048)
    with connect_from(small_heads) as alone:
        alone.sendall(oversized)
        answer, _ = read_to_end(alone)
    assert status_and_body(answer)[0] == 431
    with connect_from(small_heads) as sock:
        sock.sendall(previous[before] + oversized)
        answer, _ = read_to_end(sock)
    _refused(answer, 431, "HEADER_FIELDS_TOO_LARGE")
    assert answer.count(b"HTTP/1.1 ") <= 2, answer[-400:]  # never an answer to it
    with client_from(small_heads) as client:
        assert_still_serving(client)


def test_pipelined_heads_under_the_limit_are_answered(small_heads: RunningServer) -> None:
    """No false alarm: heads each under the limit but together over it, in one read, and a
    head split over two reads that began behind another, are all answered."""
    size = LIMIT * 3 // 4
    with connect_from(small_heads) as sock:
        sock.sendall(_head(size) + _head(size) + _head(size, last=True))
        answer, _ = read_to_end(sock)
    assert answer.count(b"HTTP/1.1 200 ") == 3, answer[-400:]
    with connect_from(small_heads) as sock:
        second = _head(size)
        sock.sendall(_head(size) + second[: size // 2])
        assert sock.recv(65536, socket.MSG_PEEK), "the first head was not answered"
        sock.sendall(second[size // 2 :] + LAST_PROBE)
        answer, _ = read_to_end(sock)
    assert answer.count(b"HTTP/1.1 200 ") == 3, answer[-400:]


@pytest.mark.parametrize("read", ["same", "later"], ids=["same-read", "later-read"])
@pytest.mark.parametrize(
    ("unfinished", "status", "code"),
    [
        (OVERSIZED, 431, "HEADER_FIELDS_TOO_LARGE"),
        (b"GET /health HTTP/1.1\r\nHost: x\r\n", 408, "REQUEST_TIMEOUT"),
    ],
    ids=["oversized", "stalled"],
)
def test_an_unfinished_head_behind_a_watch_is_refused(
    small_heads: RunningServer, read: str, unfinished: bytes, status: int, code: str
) -> None:
    """The attack: a watch, then the start of a head that is never finished, sent in the
    same read as the watch's request or after it. The head is measured (431 past the limit)
    and timed (408 after ``header_timeout_seconds``) like any other, and the connection
    ends, instead of holding the head for the watch's whole life."""
    basin = f"held{uuid.uuid4().hex[:12]}"
    with connect_from(small_heads) as sock:
        if read == "same":
            sock.sendall(_watch(basin) + unfinished)
        else:
            sock.sendall(_watch(basin))
            assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "the watch did not start"
            sock.sendall(unfinished)
        answer, _ = read_to_end(sock)
        assert f'"code":"{code}"'.encode() in answer, answer[-400:]
        assert b"HTTP/1.1 %d " % status in answer
        wait_for(lambda: not _open_on(small_heads, sock), "the server holds the connection")
    with client_from(small_heads) as client:
        assert_still_serving(client)


def test_a_watch_alone_keeps_its_connection(small_heads: RunningServer) -> None:
    """Only a head that has begun runs the head timer: a watch whose request ended its read
    is not timed out, and delivers what is published past ``header_timeout_seconds``."""
    basin = f"alone{uuid.uuid4().hex[:12]}"
    with connect_from(small_heads) as sock:
        sock.sendall(_watch(basin))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "the watch did not start"
        time.sleep(TIMEOUT * 1.5)  # what must not happen: a head timer ending the watch
        with client_from(small_heads) as client:
            body = {**VALID_NOTIFY, "identifier": {**VALID_NOTIFY["identifier"], "basin": basin}}
            assert client.post("/api/v1/notification", json=body).status_code == 200
        received = b""
        while basin.encode() not in received:
            chunk = sock.recv(65536)
            assert chunk, "the watch was ended"
            received += chunk


def test_a_refused_client_that_stops_sending_gets_a_close_not_a_reset(
    small_heads: RunningServer,
) -> None:
    """After a refusal the server discards what the client still sends, for at most 5 s,
    then resets the connection; once the client has stopped sending, it is closed instead
    (nothing unread is left, so the client keeps its answer), and a refused slow head gives
    its place back soon after its 408. The server's side of the connection ends closed in
    order (FIN-WAIT-2 while the client has not closed), not reset (no socket left)."""
    with connect_from(small_heads) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        answer, _ = read_to_end(sock)
        status, body = status_and_body(answer)
        assert (status, body["code"]) == (408, "REQUEST_TIMEOUT")
        wait_for(lambda: not _open_on(small_heads, sock), "the server holds the connection")
        states = server_side(server_port(small_heads), sock.getsockname()[1])
    assert states == [psutil.CONN_FIN_WAIT2], states
