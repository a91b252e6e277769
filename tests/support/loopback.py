"""A tiny threaded HTTP server on 127.0.0.1:<ephemeral port> for the upstream test doubles.

The standard library server is used on purpose: the doubles share nothing with the stack
under test, each request gets its own thread (so scripted delays overlap), and everything
they do is plain, synchronous and deterministic.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256
    """The listen backlog: a fake that many clients reach at once (webhook subscriptions)
    must not have connections reset by the kernel (the standard library's default is 5)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (aviso's timeout) leaves a broken pipe behind: expected.
        pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def reply(
        self,
        status: int,
        body: bytes = b"",
        headers: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> None:
        self.send_response(status)
        for name, value in headers or ():
            self.send_header(name, value)
        if body:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serve(handler: type[Handler], owner: Any) -> Iterator[str]:
    """Serve ``handler`` (which reaches its fake through ``self.server.owner``); yield the URL."""
    server = QuietServer(("127.0.0.1", 0), handler)
    server.owner = owner  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, name="loopback-fake", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
