"""One ``http.request`` log line per request on the main listener, written when the
response ends: who asked (audit fields), what, the status and how long it took."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aviso_host.logs import audit_var, log_event


class RequestLogMiddleware:
    """Runs inside the request-id middleware and outside authentication, so the line carries
    the request id and the caller the auth middleware resolved."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = audit_var.set(None)
        started = time.perf_counter()
        status = 500  # what the server answers when the app fails before a response head

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        finally:
            log_event(
                "http.request",
                f"{scope['method']} {scope['path']} {status}",
                method=scope["method"],
                path=scope["path"],
                status=status,
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
            )
            audit_var.reset(token)
