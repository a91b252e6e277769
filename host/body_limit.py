"""Pure-ASGI middleware bounding request bodies (``limits.max_body_bytes``).

A declared ``Content-Length`` over the limit is answered before a byte of the body is read;
otherwise (chunked bodies included) the body is counted as the app reads it and reading
stops at the first chunk past the limit, so no body over the limit is ever held in memory.
Both answer 413 ``PAYLOAD_TOO_LARGE`` with ``Connection: close``: the rest of the body is
never read, and the HTTP protocol (:mod:`aviso_host.http_protocol`) discards it while the
client finishes sending, so the client gets to read the answer.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aviso_host.errors import payload_too_large, send_error
from aviso_host.logs import log_event
from aviso_host.requests import BodyTooLarge


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                if int(value) > limit:
                    await self._refuse(scope, send)
                else:
                    # The HTTP parser delivers exactly the declared length: nothing to count.
                    await self.app(scope, receive, send)
                return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge
            return message

        try:
            await self.app(scope, limited_receive, send)
        except BodyTooLarge:
            # Raised while a handler read its body, before it started an answer.
            await self._refuse(scope, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        error = payload_too_large(self.max_body_bytes)
        log_event(error.event_name, error.message, logging.WARNING, code=error.code)
        await send_error(error, scope["state"]["request_id"], send)
