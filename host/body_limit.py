"""Bounding request bodies (``limits.max_body_bytes``), a step of aviso's edge
(:mod:`aviso_host.edge`).

A declared ``Content-Length`` over the limit is answered before a byte of the body is read;
otherwise (chunked bodies included) the body is counted as the app reads it and reading
stops at the first chunk past the limit, so no body over the limit is ever held in memory.
Both answer 413 ``PAYLOAD_TOO_LARGE`` with ``Connection: close``: the rest of the body is
never read, and the HTTP protocol (:mod:`aviso_host.http_protocol`) discards it while the
client finishes sending, so the client gets to read the answer.
"""

from __future__ import annotations

import logging

from starlette.types import Message, Receive, Scope, Send

from aviso_host.errors import payload_too_large, send_error
from aviso_host.logs import log_event
from aviso_host.requests import BodyTooLarge


def _declared_length(scope: Scope) -> int | None:
    """The body's length as its head declares it, ``None`` when not declared."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value)
    return None


def bounded_receive(scope: Scope, receive: Receive, limit: int) -> Receive | None:
    """The ``receive`` to give the app, or ``None`` when the declared body is over ``limit``.

    A declared body is passed through (the HTTP parser delivers exactly the declared length);
    an undeclared one is counted, and its ``receive`` raises :class:`BodyTooLarge` past the
    limit, for the caller to answer with :func:`refuse`.
    """
    declared = _declared_length(scope)
    if declared is not None:
        return receive if declared <= limit else None
    received = 0

    async def limited_receive() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyTooLarge
        return message

    return limited_receive


async def refuse(limit: int, request_id: str, send: Send) -> None:
    """Answer 413 for a body over ``limit``."""
    error = payload_too_large(limit)
    log_event(error.event_name, error.message, logging.WARNING, code=error.code)
    await send_error(error, request_id, send)
