"""Attacks that hold connections rather than send much: bodies that never come or come a
byte at a time, connection floods from one or many addresses; and requests the HTTP parser
cannot read.

A body must be complete ``body_timeout_seconds`` after its head (408); the probes are
answered whatever the connection caps; one client address may be capped on its own (429);
a request the parser refuses is answered in the aviso error shape.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from aviso_host.http_protocol import MAX_PIPELINED_REQUESTS
from tests.hostile.support import (
    VALID_NOTIFY,
    WAIT,
    assert_client_error,
    assert_still_serving,
    client_from,
    connect_from,
    read_until_closed,
    status_and_body,
    wait_for,
)
from tests.hostile.test_edge import CapturedLog
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import RunningServer, running_server

NOTIFY = "/api/v1/notification"
SCHEMAS = "/api/v1/schema"


def _head_read(connections: Any, sock: socket.socket) -> bool:
    """Whether the server has read the request head sent on ``sock``."""
    port = sock.getsockname()[1]
    # A connection the server thread has just registered may not have its address yet.
    return any(
        c.client is not None and c.client[1] == port and c.cycle is not None
        for c in list(connections)
    )


HEAD_WITHOUT_BODY = (
    b"POST /api/v1/notification HTTP/1.1\r\nHost: x\r\n"
    b"Content-Type: application/json\r\nContent-Length: 130\r\n\r\n"
)


# -- bodies have a deadline ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_bodies() -> Iterator[RunningServer]:
    limits = {"body_timeout_seconds": 1.0, "max_connections": 6}
    with running_server(with_changes(API_EXAMPLE, limits=limits)) as server:
        yield server


def test_a_body_that_never_comes_gets_408(quick_bodies: RunningServer) -> None:
    with connect_from(quick_bodies) as sock:
        sock.sendall(HEAD_WITHOUT_BODY)
        answer = read_until_closed(sock)
    status, body = status_and_body(answer)
    assert (status, body["code"]) == (408, "REQUEST_TIMEOUT"), answer[:300]
    assert "body" in body["message"]
    with client_from(quick_bodies) as client:
        assert_still_serving(client)


def test_a_dripped_body_is_cut_at_the_deadline(quick_bodies: RunningServer) -> None:
    """One byte now and then keeps no connection open past the body deadline: the deadline
    is for the whole body, not between two reads."""
    stop = threading.Event()
    with connect_from(quick_bodies) as sock:
        sock.sendall(HEAD_WITHOUT_BODY)

        def drip() -> None:
            for _ in range(129):  # never the whole body
                if stop.wait(0.2):
                    return
                with contextlib.suppress(OSError):
                    sock.sendall(b" ")

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        try:
            answer = read_until_closed(sock)
        finally:
            stop.set()
            dripper.join(WAIT)
    status, body = status_and_body(answer)
    assert (status, body["code"]) == (408, "REQUEST_TIMEOUT"), answer[:300]


def test_an_answered_request_whose_body_never_comes_is_closed(
    quick_bodies: RunningServer,
) -> None:
    """``/health`` answers without reading a body; the connection, waiting for that body,
    is closed at the deadline rather than held."""
    with connect_from(quick_bodies) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 130\r\n\r\n")
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert answer.count(b"HTTP/1.1 ") == 1


def test_probes_are_answered_while_bodies_that_never_come_fill_max_connections(
    quick_bodies: RunningServer,
) -> None:
    """The attack: more connections than ``max_connections`` send a complete head and no
    body, from several addresses. Meanwhile the probes answer 200 (other requests 503),
    and once the body deadline passed every client is served again."""
    connections = quick_bodies.server.server_state.connections
    held: list[socket.socket] = []
    try:
        for n in range(6):  # max_connections, each one's head read before the next connects
            sock = connect_from(quick_bodies, f"127.0.0.{2 + n % 3}")
            held.append(sock)
            sock.sendall(HEAD_WITHOUT_BODY)
            wait_for(lambda sock=sock: _head_read(connections, sock), "head not read")
        with client_from(quick_bodies, "127.0.0.9") as client:
            assert_client_error(client.get(SCHEMAS), 503, "SERVICE_UNAVAILABLE")
            assert client.get("/health").status_code == 200
            assert client.get("/ready").status_code == 200
            answers = [read_until_closed(sock) for sock in held]
            statuses = [status_and_body(answer)[0] for answer in answers]
            assert statuses == [408] * 6, statuses
            wait_for(lambda: client.get(SCHEMAS).status_code == 200, "still refusing")
            assert_still_serving(client)
    finally:
        for sock in held:
            sock.close()


@pytest.fixture
def info_lines() -> Iterator[None]:
    """aviso's logger writes its info lines (``aviso-server serve``'s default level)."""
    aviso = logging.getLogger("aviso")
    level = aviso.level
    aviso.setLevel(logging.INFO)
    try:
        yield
    finally:
        aviso.setLevel(level)


@pytest.mark.usefixtures("info_lines")
def test_a_client_gone_mid_body_makes_one_info_line(quick_bodies: RunningServer) -> None:
    """No error-level traceback: the request's line, status 499 (client closed request)."""
    with CapturedLog() as log:
        with connect_from(quick_bodies) as sock:
            sock.sendall(HEAD_WITHOUT_BODY + b'{"event_type": ')
            connections = quick_bodies.server.server_state.connections
            wait_for(lambda: _head_read(connections, sock), "head not read")
        wait_for(
            lambda: any(line.get("status") == 499 for line in log.lines()),
            "no line for the request",
        )
        lines = log.lines()
    assert [line for line in lines if line["level"] not in ("info", "debug")] == []
    (line,) = [line for line in lines if line.get("event_name") == "http.request"]
    assert (line["path"], line["status"]) == (NOTIFY, 499)
    assert "exception" not in line


# -- one client address may be capped on its own ------------------------------------------------


@pytest.fixture(scope="module")
def per_client_cap() -> Iterator[RunningServer]:
    limits = {"max_connections_per_client": 2}
    with running_server(with_changes(API_EXAMPLE, limits=limits)) as server:
        yield server


def test_connections_beyond_the_per_client_cap_get_429(per_client_cap: RunningServer) -> None:
    held = [connect_from(per_client_cap, "127.0.0.2") for _ in range(2)]
    try:
        with client_from(per_client_cap, "127.0.0.2") as client:
            answer = client.get(SCHEMAS)
            assert_client_error(answer, 429, "TOO_MANY_REQUESTS")
            assert answer.headers["retry-after"] == "1"
            assert client.get("/health").status_code == 200
        with client_from(per_client_cap, "127.0.0.3") as other:
            assert other.get(SCHEMAS).status_code == 200
    finally:
        for sock in held:
            sock.close()
    with client_from(per_client_cap, "127.0.0.2") as client:
        wait_for(lambda: client.get(SCHEMAS).status_code == 200, "the address stayed capped")
        assert_still_serving(client)


def test_probes_over_a_cap_close_their_connection(per_client_cap: RunningServer) -> None:
    """The attack: connections past the cap that only ever ask ``/health`` (answered over
    the caps) would stay open for as long as the client keeps asking. Each is answered,
    then closed; under the cap a probe keeps its connection."""
    probe = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    # Two silent connections fill the address's cap for the whole test, so every probe is
    # over it however the probing connections' own closes interleave.
    held = [connect_from(per_client_cap, "127.0.0.4") for _ in range(4)]
    probing = held[2:]
    connections = per_client_cap.server.server_state.connections

    def open_from_address() -> int:
        return sum(c.client[0] == "127.0.0.4" for c in list(connections))

    try:
        wait_for(lambda: open_from_address() == 4, "connections not accepted")
        for sock in probing:
            sock.sendall(probe)
        for sock in probing:
            answer = read_until_closed(sock)
            assert status_and_body(answer) == (200, {"status": "ok"}), answer
            assert b"connection: close" in answer.lower(), answer
    finally:
        for sock in held:
            sock.close()
    wait_for(lambda: open_from_address() == 0, "connections not closed")
    with connect_from(per_client_cap, "127.0.0.4") as sock:
        for _ in range(2):  # one connection of the address: kept alive
            sock.sendall(probe)
            head = sock.recv(65536)
            assert head.startswith(b"HTTP/1.1 200"), head
            assert b"connection: close" not in head.lower(), head


# -- what the parser cannot read ----------------------------------------------------------------


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /he llo HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost x\r\n\r\n",
        (
            b"POST /api/v1/notification HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        ),
    ],
    ids=["request-line", "header-field", "smuggling"],
)
def test_malformed_requests_get_400_in_the_aviso_shape(
    quick_bodies: RunningServer, request_bytes: bytes
) -> None:
    with connect_from(quick_bodies) as sock:
        sock.sendall(request_bytes)
        answer = read_until_closed(sock)
    head = answer.partition(b"\r\n\r\n")[0].decode("latin-1").lower()
    status, body = status_and_body(answer)
    assert (status, body["code"]) == (400, "BAD_REQUEST"), answer[:300]
    assert "content-type: application/json" in head
    assert f"x-request-id: {body['request_id']}" in head


def test_a_malformed_request_after_a_watch_ends_it_without_an_error(
    quick_bodies: RunningServer,
) -> None:
    """The attack: a watch is streaming when the client sends a head the parser refuses.
    The refusal ends the connection's output; the watch, still running, has its next
    event dropped as after a disconnect, not logged as an application error."""
    basin = f"cut{uuid.uuid4().hex[:12]}"
    watch = json.dumps({"event_type": "river_gauge", "identifier": {"basin": basin}}).encode()
    with CapturedLog() as log, connect_from(quick_bodies) as sock:
        sock.sendall(
            b"POST /api/v1/watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(watch), watch)
        )
        assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "the watch did not start"
        sock.sendall(b"GARBAGE\r\n\r\n")
        answer = read_until_closed(sock)  # the 400, then the end of the connection's output
        assert b'"code":"BAD_REQUEST"' in answer, answer[-300:]
        with client_from(quick_bodies) as client:
            body = {**VALID_NOTIFY, "identifier": {**VALID_NOTIFY["identifier"], "basin": basin}}
            assert client.post(NOTIFY, json=body).status_code == 200  # the watch writes it
            assert_still_serving(client)
    errors = [line for line in log.lines() if line["level"] == "error"]
    assert errors == [], errors


def test_a_deep_pipeline_behind_a_watch_is_reset(quick_bodies: RunningServer) -> None:
    """The attack: a watch, then one read full of tiny pipelined requests; each would wait
    parsed, with its scope, behind the watch that never ends (~7 MiB per connection). Past
    ``MAX_PIPELINED_REQUESTS`` the connection is reset; a shorter pipeline is answered."""
    watch = json.dumps({"event_type": "river_gauge", "identifier": {"basin": "rhine"}}).encode()
    probe = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    connections = quick_bodies.server.server_state.connections
    with CapturedLog() as log, connect_from(quick_bodies) as sock:
        sock.sendall(
            b"POST /api/v1/watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s"
            % (len(watch), watch)
            + probe * (MAX_PIPELINED_REQUESTS * 4)
        )
        # Bounded: unrefused, the watch's heartbeats would keep the connection open.
        deadline = time.monotonic() + WAIT
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(65536):
                assert time.monotonic() < deadline, "the connection was not reset"
        port = sock.getsockname()[1]
        wait_for(
            lambda: all(c.client is None or c.client[1] != port for c in list(connections)),
            "still open",
        )
    refused = [line for line in log.lines() if "pipelined" in line["message"]]
    assert [line["level"] for line in refused] == ["warn"], log.lines()
    assert [line for line in log.lines() if line["level"] == "error"] == []
    depth = 32  # the project's own load generators pipeline this many
    with connect_from(quick_bodies) as sock:
        sock.sendall(probe * (depth - 1) + probe.replace(b"Host: x", b"Connection: close"))
        assert read_until_closed(sock).count(b"HTTP/1.1 200 OK") == depth


def test_an_http_2_request_line_gets_505(quick_bodies: RunningServer) -> None:
    with connect_from(quick_bodies) as sock:
        sock.sendall(b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n")
        answer = read_until_closed(sock)
    status, body = status_and_body(answer)
    assert (status, body["code"]) == (505, "HTTP_VERSION_NOT_SUPPORTED"), answer[:300]


def test_unknown_paths_keep_the_bare_404(quick_bodies: RunningServer) -> None:
    with client_from(quick_bodies) as client:
        answer = client.get("/no/such/path")
    assert answer.status_code == 404
    assert answer.content == b""
