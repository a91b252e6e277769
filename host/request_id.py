"""Pure-ASGI middleware giving every request a fresh UUID (``X-Request-ID``).

A client-supplied ``X-Request-ID`` is ignored on purpose: the id must be one the server
generated, so it can be trusted in logs.

It also keeps the ``send`` it was given under ``scope["aviso.raw_send"]``: once a streaming
response's head has gone through every middleware (request id header, status for the request
log and metrics), its body chunks need none of them, and a watch delivering to thousands of
streams per notification should not pay for each wrapper on every chunk.
"""

from __future__ import annotations

import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aviso_host.logs import request_id_var

RAW_SEND = "aviso.raw_send"
"""Scope key of the ``send`` below every aviso middleware (for body chunks after the head)."""


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = str(uuid.uuid4())
        scope.setdefault("state", {})["request_id"] = request_id
        scope[RAW_SEND] = send
        token = request_id_var.set(request_id)
        header = (b"x-request-id", request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.lower() != b"x-request-id"
                ]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        await self.app(scope, receive, send_with_id)
        # Not reset when the app raised: uvicorn logs the exception after this returns, in
        # the request's own task, and that line should carry the id too.
        request_id_var.reset(token)
