"""How aviso's request cycle hands a response to the socket.

A response of known length goes out in one write (one send call), its head joined to its
body; a stream (chunked: a watch's events) gets its head written at once, before any event;
an app failing between head and body leaves nothing half-written. The transport records the
writes: it stands for asyncio's socket transport, whose writes are what is counted.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl

from aviso_host.http_protocol import ResponseCycle


def run(check: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """The check as a plain test function, run on its own event loop."""

    @functools.wraps(check)
    def test(*args: Any, **kwargs: Any) -> None:
        asyncio.run(check(*args, **kwargs))

    return test


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def cycle(
    transport: RecordingTransport, method: str = "POST", keep_alive: bool = True
) -> ResponseCycle:
    scope: Any = {"type": "http", "method": method, "http_version": "1.1", "headers": []}
    return ResponseCycle(
        scope=scope,
        transport=transport,
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test.access"),
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )


def start(headers: list[tuple[bytes, bytes]], status: int = 200) -> dict[str, Any]:
    return {"type": "http.response.start", "status": status, "headers": headers}


def body(data: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


JSON = [(b"content-type", b"application/json"), (b"content-length", b"2")]


@run
async def test_a_response_of_known_length_is_one_write() -> None:
    transport = RecordingTransport()
    answer = cycle(transport)
    await answer.send(start(JSON))
    assert transport.writes == []
    await answer.send(body(b"{}"))
    assert transport.writes == [
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    ]
    assert answer.response_complete


@run
async def test_a_body_in_parts_is_written_as_it_comes_head_with_the_first() -> None:
    transport = RecordingTransport()
    answer = cycle(transport)
    await answer.send(start([(b"content-length", b"4")]))
    await answer.send(body(b"", more=True))
    assert transport.writes == []
    await answer.send(body(b"ab", more=True))
    await answer.send(body(b"cd"))
    assert transport.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nab", b"cd"]


@run
async def test_a_stream_gets_its_head_at_once() -> None:
    transport = RecordingTransport()
    answer = cycle(transport)
    await answer.send(start([(b"content-type", b"text/event-stream")]))
    assert transport.writes == [
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    ]
    await answer.send(body(b"data: 1\n\n", more=True))
    assert transport.writes[1] == b"9\r\ndata: 1\n\n\r\n"


@pytest.mark.parametrize(
    ("method", "headers", "status"),
    [("HEAD", JSON, 200), ("POST", [(b"content-length", b"0")], 200), ("POST", [], 204)],
)
@run
async def test_heads_without_a_body_to_follow_are_written_at_once(
    method: str, headers: list[tuple[bytes, bytes]], status: int
) -> None:
    transport = RecordingTransport()
    answer = cycle(transport, method)
    await answer.send(start(headers, status))
    assert len(transport.writes) == 1
    assert transport.writes[0].endswith(b"\r\n\r\n")


@run
async def test_a_closing_answer_is_written_whole_then_closed() -> None:
    transport = RecordingTransport()
    answer = cycle(transport, keep_alive=False)
    await answer.send(start(JSON))
    await answer.send(body(b"{}"))
    assert transport.writes == [
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"
        b"connection: close\r\n\r\n{}"
    ]
    assert transport.closed


@run
async def test_an_app_failing_after_the_start_leaves_nothing_written() -> None:
    transport = RecordingTransport()

    async def failing(scope: Any, receive: Any, send: Any) -> None:
        await send(start(JSON))
        raise RuntimeError("boom")

    await cycle(transport).run_asgi(failing)
    assert transport.writes == []
    assert transport.closed


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ([(b"x-bad name", b"v")], "Invalid HTTP header name."),
        ([(b"x-ok", b"v\r\nx-injected: 1")], "Invalid HTTP header value."),
    ],
)
@run
async def test_invalid_header_fields_are_refused(
    headers: list[tuple[bytes, bytes]], error: str
) -> None:
    transport = RecordingTransport()
    with pytest.raises(RuntimeError, match=error):
        await cycle(transport).send(start(headers))
    assert transport.writes == []
