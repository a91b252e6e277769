"""A fast HTTP/1.1 client for bulk POSTs: raw sockets, keep-alive, pipelined windows.

httpx spends more CPU per request than the server does, so tests and benchmarks that need
tens of thousands of requests use this instead.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any


def request_bytes(path: str, body: Any) -> bytes:
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


async def _read_status(reader: asyncio.StreamReader) -> int:
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) != b"\r\n":
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


async def _connection(
    port: int, requests: list[bytes], window: int, statuses: dict[int, int]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for start in range(0, len(requests), window):
            chunk = requests[start : start + window]
            writer.write(b"".join(chunk))
            await writer.drain()
            for _ in chunk:
                status = await asyncio.wait_for(_read_status(reader), 30)
                statuses[status] = statuses.get(status, 0) + 1
    finally:
        writer.close()


async def post_many(
    port: int,
    count: int,
    make_request: Callable[[int], bytes],
    connections: int = 4,
    window: int = 32,
) -> dict[int, int]:
    """Send ``count`` requests over ``connections`` keep-alive connections; count statuses."""
    statuses: dict[int, int] = {}
    requests = [make_request(n) for n in range(count)]
    await asyncio.gather(
        *(
            _connection(port, requests[index::connections], window, statuses)
            for index in range(connections)
        )
    )
    return statuses
