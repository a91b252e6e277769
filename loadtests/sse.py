"""Reading a streamed body as it arrives, for the SSE parser of :mod:`aviso_plugins._shared.sse`.

Nothing here imports gevent or locust, so it can be imported anywhere.
"""

from __future__ import annotations

from typing import Any

from aviso_plugins._shared.sse import SSEEvent, SSEParser

__all__ = ["SSEEvent", "SSEParser", "StreamClosed", "read_available"]


class StreamClosed(ConnectionError):
    """The server closed the connection before the HTTP message ended."""


def read_available(raw: Any) -> bytes:
    """The body bytes available now, blocking only while there are none; b"" at the end.

    ``raw`` is geventhttpclient's socket response (``FastResponse._response``). Its public
    ``read(n)`` waits until ``n`` bytes have arrived, which holds a small SSE event back until
    later events fill the buffer: a latency measured after it would include waiting for
    unrelated traffic. This reads what one ``recv`` returns (de-chunked by the response's
    parser) instead, so an event is handed over as soon as its bytes are here.
    """
    buffer = raw._body_buffer
    while not buffer and not raw.message_complete:
        sock = raw._sock
        if sock is None:
            raise StreamClosed("connection released before the end of the body")
        try:
            data = sock.recv(raw.block_size)
            if not data:
                raise StreamClosed("connection closed before the end of the body")
            raw.feed(data)
        except BaseException:
            raw.release()
            raise
    chunk = bytes(buffer)
    del buffer[:]
    return chunk
