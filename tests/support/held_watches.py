"""Many watch streams held open on raw asyncio sockets (thousands per process).

httpx costs too much per stream for soak tests and benchmarks that hold 1,000-10,000
watches, so these speak just enough HTTP/1.1 and SSE: the request bytes, the
``connection_established`` event, and counting CloudEvents by a marker.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.pipelined import request_bytes

HeldWatch = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_watch(
    port: int, body: Any, gate: asyncio.Semaphore, timeout: float = 60
) -> HeldWatch:
    """Open one watch and return once the server confirmed it; ``gate`` bounds how many
    connect at once (the listen backlog is finite)."""
    async with gate:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes("/api/v1/watch", body))
        await writer.drain()
        try:
            await asyncio.wait_for(reader.readuntil(b"connection_established"), timeout)
        except asyncio.IncompleteReadError as exc:
            writer.close()
            raise AssertionError(f"watch refused: {exc.partial.decode(errors='replace')}") from None
        return reader, writer


async def count_until(reader: asyncio.StreamReader, marker: bytes, expected: int) -> int:
    """Read until ``marker`` was seen ``expected`` times or the stream ended; the count."""
    seen = 0
    tail = b""
    while seen < expected:
        chunk = await reader.read(1 << 16)
        if not chunk:
            break
        # A marker can straddle two reads: search each read together with the previous
        # read's last bytes, which are too short to hold a whole marker themselves.
        data = tail + chunk
        seen += data.count(marker)
        tail = data[-(len(marker) - 1) :]
    return seen


def close_all(watches: list[HeldWatch]) -> None:
    for _, writer in watches:
        writer.close()
