"""The two fan-out baselines :mod:`benchmarks.fanout_cpu` measures aviso against.

  python -m benchmarks.fanout_baselines starlette|raw PORT

Both answer ``POST /api/v1/watch`` with a chunked ``text/event-stream`` (a
``connection_established`` event first) and ``POST /api/v1/notification`` with a small JSON
answer, after broadcasting the notification's body, framed as a ``live-notification`` event,
to every open watch. No validation, storage, filtering or CloudEvents: what is left is the
cost of getting one event to many connections.

- ``starlette``: a bare Starlette app on aviso's own uvicorn settings, one queue and one
  task per watch (a ``StreamingResponse`` whose generator awaits its queue): every delivery
  wakes a task, as a straightforward broadcaster does.
- ``raw``: a uvloop protocol per connection, no ASGI; the event is framed (SSE and HTTP
  chunk) once and written straight to every watching transport, the floor for a Python
  server on this loop.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import ClassVar

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from aviso_host.server import uvicorn_config

OPENED = b'{"type":"connection_established"}'
HEAD_END = b"\r\n\r\n"
LENGTH = b"content-length:"
ANSWER = b'{"status":"ok"}'
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
ANSWER_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(ANSWER)).encode()
    + b"\r\n\r\n"
)


def frame(event: bytes, data: bytes) -> bytes:
    return b"event: " + event + b"\ndata: " + data + b"\n\n"


def content_length(head: bytes) -> int:
    """The ``content-length`` of a lower-cased request head (0 without one)."""
    at = head.find(LENGTH)
    if at < 0:
        return 0
    end = head.find(b"\r\n", at)
    return int(head[at + len(LENGTH) : end if end >= 0 else len(head)])


def chunk(body: bytes) -> bytes:
    return b"%x\r\n" % len(body) + body + b"\r\n"


# -- Starlette: a task per watch -------------------------------------------------------------

queues: set[asyncio.Queue[bytes]] = set()


async def notify(request: Request) -> Response:
    body = await request.body()
    json.loads(body)
    event = frame(b"live-notification", body)
    for queue in queues:
        queue.put_nowait(event)
    return Response(ANSWER, media_type="application/json")


async def _events(queue: asyncio.Queue[bytes]) -> AsyncIterator[bytes]:
    try:
        yield frame(b"live-notification", OPENED)
        while True:
            yield await queue.get()
    finally:
        queues.discard(queue)


async def watch(request: Request) -> Response:
    await request.body()
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    queues.add(queue)
    return StreamingResponse(_events(queue), media_type="text/event-stream")


app = Starlette(
    routes=[
        Route("/api/v1/notification", notify, methods=["POST"]),
        Route("/api/v1/watch", watch, methods=["POST"]),
    ]
)


# -- raw: the chunk written to every transport -------------------------------------------------


class RawConnection(asyncio.Protocol):
    """One connection: requests parsed by their head's ``content-length``; a watch keeps the
    connection for its events, a notification is broadcast and answered."""

    watching: ClassVar[set[asyncio.Transport]] = set()

    def __init__(self) -> None:
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self.watching.discard(self._transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data
        while True:
            end = buffer.find(HEAD_END)
            if end < 0:
                break
            head = buffer[:end].lower()
            length = content_length(head)
            if len(buffer) < end + 4 + length:
                break
            body = buffer[end + 4 : end + 4 + length]
            buffer = buffer[end + 4 + length :]
            self._request(head, body)
        self._buffer = buffer

    def _request(self, head: bytes, body: bytes) -> None:
        transport = self._transport
        assert transport is not None
        if head.startswith(b"post /api/v1/watch "):
            transport.write(STREAM_HEAD + chunk(frame(b"live-notification", OPENED)))
            self.watching.add(transport)
            return
        json.loads(body)
        event = chunk(frame(b"live-notification", body))
        for watcher in self.watching:
            watcher.write(event)
        transport.write(ANSWER_HEAD + ANSWER)


async def serve_raw(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(RawConnection, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "raw":
        import uvloop

        uvloop.run(serve_raw(port))
        return
    config = uvicorn_config(app, "127.0.0.1", port)
    config.lifespan = "off"
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
