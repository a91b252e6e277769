"""One ``http.request`` log line per request on the main listener, written when the
response ends: who asked (audit fields, client address), what, the status and how long it
took."""

from __future__ import annotations

import logging
import time

from starlette.types import Scope

from aviso_host.logs import log_event, logger


def log_request(scope: Scope, status: int, started: float) -> None:
    """The line for a request that began at ``perf_counter()`` ``started``; ``status`` is what
    was answered (500 when the app failed before a response head)."""
    if not logger.isEnabledFor(logging.INFO):  # the line would be dropped: do not build it
        return
    log_event(
        "http.request",
        f"{scope['method']} {scope['path']} {status}",
        method=scope["method"],
        path=scope["path"],
        status=status,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
        client=client_address(scope),
    )


def client_address(scope: Scope) -> str | None:
    """``host:port`` of the peer, as the server saw it (``None`` when unknown, e.g. a Unix
    socket)."""
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else None
