"""The streaming baseline: the least a Starlette app can do for notify, watch and replay.

Run as ``python -m aviso_loadtests.bare_streams PORT`` (through
``aviso_loadtests.servers.bare_server(module)``). Served with aviso's own uvicorn settings.

- ``POST /api/v1/notification`` is ``aviso_loadtests.bare_app.echo`` (parse the JSON body, answer
  JSON), then the raw body is broadcast to every open watch if it is what the load test's
  watchers follow, and kept for replay if it is replay history. Two substring tests stand
  in for aviso's schema validation, topic encoding, storage and filtering.
- ``POST /api/v1/watch``: ``connection_established``, then each broadcast body wrapped as
  ``{"data": <body>}`` in aviso's frame shape (so the same locust user parses both).
- ``POST /api/v1/replay``: the kept bodies from ``from_id`` in batches of 100 frames per
  chunk (paced like aviso's by ``AVISO_LOAD_BARE_REPLAY_DELAY_MS``), then
  ``connection-closing`` with ``end_of_stream``.

No validation, no CloudEvents, no sequence numbers, no backpressure policy beyond a bounded
queue per watcher: the figures it gives are the HTTP/SSE stack's, for aviso to be compared with.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from aviso_host.embedding import uvicorn_config
from aviso_loadtests.bare_app import echo

HEARTBEAT_SECONDS = 10.0
BATCH = 100
MAX_HISTORY = 1_000_000
QUEUE = 4096
# The pause between replay batches, as aviso's replay_batch_delay_ms (set by aviso-server load run).
REPLAY_DELAY_S = int(os.environ.get("AVISO_LOAD_BARE_REPLAY_DELAY_MS", "0")) / 1000

watchers: set[asyncio.Queue[bytes]] = set()
history: list[bytes] = []


def is_watched(body: bytes) -> bool:
    """The load test's watch filter: mars, class od, stream enfo (compact JSON bodies)."""
    return b'"event_type":"mars"' in body and b'"class":"od"' in body and b'"enfo"' in body


def is_history(body: bytes) -> bool:
    return b'"event_type":"mars"' in body and b'"class":"rd"' in body


def frame(event: bytes, data: bytes) -> bytes:
    return b"event: " + event + b"\ndata: " + data + b"\n\n"


async def notify(request: Request) -> Response:
    response = await echo(request)
    body = await request.body()  # cached by the first read
    if is_watched(body):
        event = frame(b"live-notification", b'{"data":' + body + b"}")
        for queue in list(watchers):
            if queue.full():  # a watcher that does not keep up is ended
                watchers.discard(queue)
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(b"")
            else:
                queue.put_nowait(event)
    if is_history(body) and len(history) < MAX_HISTORY:
        history.append(body)
    return response


async def _live(queue: asyncio.Queue[bytes]) -> AsyncIterator[bytes]:
    try:
        yield frame(b"live-notification", b'{"type":"connection_established"}')
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), HEARTBEAT_SECONDS)
            except TimeoutError:
                event = frame(b"heartbeat", b"{}")
            if not event:
                return
            yield event
    finally:
        watchers.discard(queue)


async def watch(request: Request) -> Response:
    await request.body()
    queue: asyncio.Queue[bytes] = asyncio.Queue(QUEUE)
    watchers.add(queue)
    return StreamingResponse(_live(queue), media_type="text/event-stream")


async def _replay(start: int) -> AsyncIterator[bytes]:
    index = start
    while index < len(history):
        batch = history[index : index + BATCH]
        index += len(batch)
        yield b"".join(frame(b"replay", b'{"data":' + body + b"}") for body in batch)
        if REPLAY_DELAY_S and index < len(history):
            await asyncio.sleep(REPLAY_DELAY_S)
    yield frame(b"connection-closing", b'{"reason":"end_of_stream"}')


async def replay(request: Request) -> Response:
    body = json.loads(await request.body())
    start = max(0, int(body.get("from_id") or 1) - 1)
    return StreamingResponse(_replay(start), media_type="text/event-stream")


app = Starlette(
    routes=[
        Route("/api/v1/notification", notify, methods=["POST"]),
        Route("/api/v1/watch", watch, methods=["POST"]),
        Route("/api/v1/replay", replay, methods=["POST"]),
    ]
)

if __name__ == "__main__":
    config = uvicorn_config(app, "127.0.0.1", int(sys.argv[1]))
    config.lifespan = "off"
    uvicorn.Server(config).run()
