"""Attacks on the HTTP edge: oversize and deeply nested bodies, slow and huge
request heads, too many connections, a watcher that never reads, framework failures.

Each refusal is a documented status in the aviso error shape (never a 5xx, never a reset),
and the service serves ordinary clients right after.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from aviso_host.config.settings import LimitSettings
from aviso_host.logs import JsonLineFormatter
from aviso_plugins import hookimpl
from tests.hostile.support import (
    VALID_NOTIFY,
    assert_client_error,
    assert_still_serving,
    log_lines,
    read_until_closed,
    server_port,
    server_side,
    serving,
    status_and_body,
)
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.pipelined import request_bytes
from tests.support.raw_http import unread_connection
from tests.support.server import RunningServer, running_server

NOTIFY = "/api/v1/notification"
MIB = 1024 * 1024


def _edge_server(**limits: Any) -> Any:
    return running_server(with_changes(API_EXAMPLE, limits=limits))


# -- bodies -----------------------------------------------------------------------------------


def test_declared_oversize_body_is_refused_before_it_is_sent(hostile: httpx.Client) -> None:
    """Content-Length over the limit is answered from the head alone: the client has not
    sent a byte of its 10 MB body and already has its 413."""
    url = httpx.URL(str(hostile.base_url))
    with socket.create_connection((url.host, url.port), timeout=30) as sock:
        sock.sendall(
            b"POST /api/v1/notification HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n" % (10 * MIB)
        )
        status, body = status_and_body(read_until_closed(sock))
    assert status == 413
    assert body["code"] == "PAYLOAD_TOO_LARGE"
    assert "262144" in body["message"]
    assert_still_serving(hostile)


def _read_response(sock: socket.socket) -> int:
    """One whole ``Content-Length`` response off a keep-alive connection; its status."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed before the response"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed inside the response"
        rest += chunk
    return int(head.split()[1])


def test_a_websocket_upgrade_is_answered_as_plain_http(
    hostile_server: RunningServer, hostile: httpx.Client
) -> None:
    """No WebSocket route, so no WebSocket protocol: an upgrade request is an HTTP request
    like any other (answered by the route, on a connection that stays HTTP)."""
    upgrade = (
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server_port(hostile_server)), timeout=30) as sock:
        for _ in range(2):  # the connection stays an HTTP keep-alive connection
            sock.sendall(upgrade)
            assert _read_response(sock) == 200
    assert_still_serving(hostile)


def test_a_pipelined_request_whose_body_is_still_arriving_keeps_its_connection(
    hostile: httpx.Client,
) -> None:
    """The first answer of a pipeline is sent while the second request's body is still on
    its way: a normal pipeline, not a refused body, so the connection stays usable."""
    url = httpx.URL(str(hostile.base_url))
    body = json.dumps(VALID_NOTIFY).encode()
    request = b"POST /api/v1/notification HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
    whole, head = request % len(body) + body, request % len(body)
    with socket.create_connection((url.host, url.port), timeout=30) as sock:
        sock.sendall(whole + head + body[:10])
        assert _read_response(sock) == 200
        sock.sendall(body[10:])
        assert _read_response(sock) == 200
    assert_still_serving(hostile)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_streamed_10mb_body_gets_413_not_a_reset(hostile: httpx.Client, chunked: bool) -> None:
    if chunked:
        content: Any = (b"x" * 65536 for _ in range(160))
    else:
        content = b"x" * (10 * MIB)
    answer = hostile.post(NOTIFY, content=content)
    assert_client_error(answer, 413, "PAYLOAD_TOO_LARGE")
    assert_still_serving(hostile)


def test_a_client_sending_connection_close_still_reads_its_413(hostile: httpx.Client) -> None:
    """The client asked to close: the server must still not reset while the body arrives."""
    url = httpx.URL(str(hostile.base_url))
    with socket.create_connection((url.host, url.port), timeout=30) as sock:
        sock.sendall(
            b"POST /api/v1/notification HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % (10 * MIB)
        )
        for _ in range(160):
            sock.sendall(b"x" * 65536)
        status, body = status_and_body(read_until_closed(sock))
    assert (status, body["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert_still_serving(hostile)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_the_unread_rest_of_a_refused_body_is_never_parsed_as_a_request(
    hostile: httpx.Client, chunked: bool
) -> None:
    """Before, a keep-alive connection went on parsing the rest of a refused body as the
    next request: a second answer, 400 "Invalid HTTP request received", followed the 413."""
    url = httpx.URL(str(hostile.base_url))
    framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % (MIB,)
    piece = b"x" * 65536
    body = (b"10000\r\n" + piece + b"\r\n") * 16 + b"0\r\n\r\n" if chunked else piece * 16
    with socket.create_connection((url.host, url.port), timeout=30) as sock:
        sock.sendall(b"POST /api/v1/notification HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n\r\n")
        sock.sendall(body)
        answer = read_until_closed(sock)
    assert answer.count(b"HTTP/1.1 ") == 1, answer
    status, payload = status_and_body(answer)
    assert (status, payload["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert_still_serving(hostile)


def test_a_chunked_body_is_accepted(hostile: httpx.Client) -> None:
    data = json.dumps(VALID_NOTIFY).encode()
    answer = hostile.post(NOTIFY, content=(data[i : i + 7] for i in range(0, len(data), 7)))
    assert answer.status_code == 200, answer.text
    assert_still_serving(hostile)


def _nested(depth: int, kind: str) -> str:
    return "[" * depth + "]" * depth if kind == "array" else '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("depth", [65, 1_000, 10_000])
@pytest.mark.parametrize("kind", ["array", "object"])
@pytest.mark.parametrize("where", ["payload", "body"])
def test_deeply_nested_json_is_invalid_json(
    hostile: httpx.Client, depth: int, kind: str, where: str
) -> None:
    nested = _nested(depth, kind)
    if where == "payload":
        text = f'{{"event_type":"river_gauge","identifier":{{"basin":"x"}},"payload":{nested}}}'
    else:
        text = nested
    answer = hostile.post(NOTIFY, content=text.encode())
    assert_client_error(answer, 400, "INVALID_JSON")
    message = answer.json()["message"]
    assert message.startswith("JSON parsing failed: ") and "64" in message, message
    assert_still_serving(hostile)


def test_nesting_at_the_limit_and_brackets_inside_strings_are_fine(
    hostile: httpx.Client,
) -> None:
    payload = json.loads(_nested(62, "object"))  # body -> payload -> 62 levels: 64
    text = "[" * 5000
    body = {**VALID_NOTIFY, "payload": {"deep": payload, "text": text}}
    answer = hostile.post(NOTIFY, json=body)
    assert answer.status_code == 200, answer.text


def test_deep_nesting_on_watch_and_replay(hostile: httpx.Client) -> None:
    text = f'{{"event_type":"river_gauge","identifier":{_nested(5_000, "object")}}}'
    for path in ("/api/v1/watch", "/api/v1/replay"):
        assert_client_error(hostile.post(path, content=text.encode()), 400, "INVALID_JSON")
    assert_still_serving(hostile)


# -- request heads and connections ------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_timeouts() -> Iterator[RunningServer]:
    with _edge_server(header_timeout_seconds=1.0, idle_timeout_seconds=1.0) as server:
        yield server


def test_slow_request_heads_are_timed_out(quick_timeouts: RunningServer) -> None:
    """50 clients each dribbling a request head (one byte every 0.2 s) get 408 and are
    closed once ``header_timeout_seconds`` passes, however long they would go on."""
    port = server_port(quick_timeouts)
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(50)]
    head = b"POST /api/v1/notification HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 1000
    stop = threading.Event()

    def dribble() -> None:
        for index in range(len(head)):
            for sock in sockets:
                with contextlib.suppress(OSError):  # closed by the server: the point
                    sock.send(head[index : index + 1])
            if stop.wait(0.2):
                return

    sender = threading.Thread(target=dribble, daemon=True)
    sender.start()
    try:
        answers = [read_until_closed(sock) for sock in sockets]
    finally:
        stop.set()
        sender.join(10)
        for sock in sockets:
            sock.close()
    for answer in answers:
        status, body = status_and_body(answer)
        assert (status, body["code"]) == (408, "REQUEST_TIMEOUT")
    with httpx.Client(base_url=quick_timeouts.url, timeout=30) as client:
        assert_still_serving(client)


def test_a_connection_that_sends_nothing_is_closed(quick_timeouts: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", server_port(quick_timeouts)), timeout=30) as sock:
        assert read_until_closed(sock) == b""


def test_an_idle_keep_alive_connection_is_closed(quick_timeouts: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", server_port(quick_timeouts)), timeout=30) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("size", [100 * 1024, 5 * MIB])
def test_huge_request_heads_get_431(hostile: httpx.Client, size: int) -> None:
    """Headers of several MB from a raw socket: 431 and the connection closed, after the
    server buffered no more than about the limit."""
    url = httpx.URL(str(hostile.base_url))
    with socket.create_connection((url.host, url.port), timeout=30) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        line = b"X-Pad: " + b"a" * 8000 + b"\r\n"
        try:
            for _ in range(size // len(line)):
                sock.sendall(line)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed after the linger: the answer was sent long before
        status, body = status_and_body(read_until_closed(sock))
    assert (status, body["code"]) == (431, "HEADER_FIELDS_TOO_LARGE")
    assert_still_serving(hostile)


def test_requests_beyond_max_connections_get_503_with_retry_after() -> None:
    with _edge_server(max_connections=4) as server:
        port = server_port(server)
        held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(4)]
        try:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                answer = client.get("/api/v1/schema")
            assert_client_error(answer, 503, "SERVICE_UNAVAILABLE")
            assert answer.headers["retry-after"] == "1"
        finally:
            for sock in held:
                sock.close()
        with httpx.Client(base_url=server.url, timeout=30) as client:
            # Until the held connections' closes reach the server (a loaded machine may take
            # seconds).
            deadline = time.monotonic() + 30
            while client.get("/api/v1/schema").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert_still_serving(client)


# -- a watcher that never reads ---------------------------------------------------------------

SLOW_CONSUMER = with_changes(
    API_EXAMPLE,
    watch_endpoint={**API_EXAMPLE["watch_endpoint"], "max_queue_bytes": 65536},
)
PAD = "x" * 2048


def test_a_never_reading_watcher_cut_off_is_disconnected() -> None:
    """Cut off as a slow consumer, its connection is reset: the server holds no
    descriptor, socket or send queue for it, though the client never reads nor closes."""
    with running_server(SLOW_CONSUMER) as server:
        body = {"event_type": "river_gauge", "identifier": {"basin": "slow"}}
        watcher = unread_connection(server_port(server), request_bytes("/api/v1/watch", body))
        client_port = watcher.getsockname()[1]

        def watcher_connected() -> bool:
            connections = server.server.server_state.connections
            return any(c.client == ("127.0.0.1", client_port) for c in connections)  # type: ignore[attr-defined]

        notification = {
            **VALID_NOTIFY,
            "identifier": {**VALID_NOTIFY["identifier"], "basin": "slow"},
            "payload": {"pad": PAD},
        }

        def cut_off() -> bool:
            return all(c.stop_reason == "slow_consumer" for c in server.service.streams.open)

        with CapturedLog() as log, httpx.Client(base_url=server.url, timeout=30) as client:
            published = 0
            while not cut_off() and published < 5_000:
                assert client.post(NOTIFY, json=notification).status_code == 200
                published += 1
            assert cut_off(), f"not cut off after {published} notifications"
            # Bounded: the stream gets 5 s to write its closing event, then the abort.
            deadline = time.monotonic() + 30
            while watcher_connected() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not watcher_connected(), "the cut-off watcher's connection is still open"
            # Reset, not closed: no socket of the server's side is left (in FIN-WAIT-1,
            # holding its send queue while the kernel tries to deliver it).
            while server_side(server_port(server), client_port) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert server_side(server_port(server), client_port) == []
            assert_still_serving(client)
        assert not [line for line in log.lines() if line["logger"] == "uvicorn.error"]
        watcher.close()


# -- failures inside the server ---------------------------------------------------------------


class Silent:
    """An ASGI app that returns without answering: uvicorn's own 500."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        return None


class FailingRoutes:
    @hookimpl
    def aviso_extra_routes(self) -> list[BaseRoute]:
        async def explode(request: Request) -> Response:
            raise RuntimeError("route exploded")

        return [Route("/explode", explode, methods=["GET"]), Route("/silent", Silent())]


@pytest.fixture(scope="module")
def failing_server() -> Iterator[RunningServer]:
    with running_server(API_EXAMPLE, (FailingRoutes(),)) as server:
        yield server


@pytest.mark.parametrize("path", ["/explode", "/silent"])
def test_framework_500s_are_aviso_json(failing_server: RunningServer, path: str) -> None:
    with httpx.Client(base_url=failing_server.url, timeout=30) as client:
        answer = client.get(path)
        assert answer.status_code == 500
        body = answer.json()
        assert body["code"] == "INTERNAL_ERROR"
        assert body["request_id"] == answer.headers["x-request-id"]
        assert "exploded" not in answer.text
        assert_still_serving(client)


class CapturedLog:
    """The JSON lines uvicorn's and aviso's loggers write while a test runs, formatted as
    ``aviso-server serve`` formats them."""

    NAMES = ("aviso", "uvicorn.error")

    def __init__(self) -> None:
        self.buffer = io.StringIO()
        self.handler = logging.StreamHandler(self.buffer)
        self.handler.setFormatter(JsonLineFormatter())

    def __enter__(self) -> CapturedLog:
        for name in self.NAMES:
            logging.getLogger(name).addHandler(self.handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.NAMES:
            logging.getLogger(name).removeHandler(self.handler)

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.buffer.getvalue().splitlines()]


def test_uvicorn_error_lines_carry_the_request_id(failing_server: RunningServer) -> None:
    with CapturedLog() as log, httpx.Client(base_url=failing_server.url, timeout=30) as client:
        answer = client.get("/explode")
        # uvicorn logs after the answer is written, in the same step of the server's loop:
        # once the loop answers another request, the line is there.
        assert client.get("/health").status_code == 200
    request_id = answer.headers["x-request-id"]
    (line,) = [line for line in log.lines() if line["logger"] == "uvicorn.error"]
    assert line["message"].strip() == "Exception in ASGI application"
    assert line["request_id"] == request_id
    assert "route exploded" in line["exception"]


@pytest.mark.parametrize("size", [1_000, 200_000])
def test_a_huge_rejected_value_makes_a_short_log_line(hostile: httpx.Client, size: int) -> None:
    """A value under the length limit is echoed once, truncated; one over it is not echoed."""
    value = "z" * size
    body = {**VALID_NOTIFY, "identifier": {**VALID_NOTIFY["identifier"], "level": value}}
    with CapturedLog() as log:
        answer = hostile.post(NOTIFY, json=body)
    assert_client_error(answer, 400, "INVALID_NOTIFICATION_REQUEST")
    (line,) = [
        line for line in log.lines() if line.get("request_id") == answer.json()["request_id"]
    ]
    text = json.dumps(line)
    assert len(text) < 1_000, text
    if size < LimitSettings().max_identifier_value_bytes:
        assert text.count("z" * 100) == 1, "the value is echoed once"
        assert "more characters]" in line["message"]
    else:
        assert "z" * 100 not in text


# -- aviso-server serve -----------------------------------------------------------------------

SERVE_CONFIG = """
application: {host: 127.0.0.1, port: 0}
notification_backend: {kind: in_memory}
"""


def _lower_descriptor_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def _descriptor_limit_of_512() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))


def _open_files_limits(pid: int) -> tuple[str, str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return soft, hard
    raise AssertionError("no Max open files line")


def test_serve_raises_its_descriptor_limit_and_logs_only_json(tmp_path: Path) -> None:
    """Started with a soft limit of 256, ``aviso-server serve`` raises it to the hard limit;
    what uvicorn itself logs (a request it cannot parse) is a JSON line like ours."""
    with serving(tmp_path, SERVE_CONFIG, _lower_descriptor_limit) as (port, pid):
        soft, hard = _open_files_limits(pid)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert read_until_closed(sock).startswith(b"HTTP/1.1 400 ")
    assert soft == hard, (soft, hard)
    lines = log_lines(tmp_path)
    assert any(
        line["logger"] == "uvicorn.error" and line["message"] == "Invalid HTTP request received."
        for line in lines
    ), lines


def test_max_connections_stays_below_the_descriptor_limit(tmp_path: Path) -> None:
    """Hard limit 512: the default 10,000 connections could never be served, so the cap is
    lowered to leave descriptors for everything else, and the log says so."""
    with serving(tmp_path, SERVE_CONFIG, _descriptor_limit_of_512):
        pass
    (line,) = [
        line
        for line in log_lines(tmp_path)
        if line.get("event_name") == "server.connections.capped"
    ]
    assert line["level"] == "warn"
    assert "lowered to 384" in line["message"], line
