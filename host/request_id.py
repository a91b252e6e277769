"""Every request's id: a fresh UUID4 the server generated, sent back as ``X-Request-ID``.

A client-supplied ``X-Request-ID`` is ignored on purpose: the id must be one the server
generated, so it can be trusted in logs.
"""

from __future__ import annotations

import os

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aviso_host.logs import request_id_var

RAW_SEND = "aviso.raw_send"
"""Scope key of the ``send`` below every aviso middleware (for body chunks after the head)."""

_BATCH = 256
_unused: list[str] = []
"""Ids made ahead, in batches: one ``urandom`` call and a few C passes for many requests.
Taken by ``list.pop``, atomic, so threads (each running a server) never share an id."""

_PLACES = (*range(8), *range(9, 13), *range(15, 18), *range(20, 23), *range(24, 36))
"""Where an id's random hex digits go: 29 of its 32, another for the variant (after the
dashes, the version ``4`` at 14 and the variant at 19)."""
_VARIANT = bytes.maketrans(b"0123456789abcdef", b"89ab" * 4)
"""The RFC 4122 variant digit for a random hex digit (its two high bits set to ``10``)."""


def _batch() -> list[str]:
    # Each place of every id in the batch is written by one strided slice assignment
    # instead of formatting each id in Python; ids are 37 apart (a space after each), for
    # one C split.
    digits = os.urandom(16 * _BATCH).hex().encode()
    text = bytearray(b"-" * 36 + b" ") * _BATCH
    for digit, place in enumerate(_PLACES):
        text[place::37] = digits[digit::32]
    text[14::37] = b"4" * _BATCH
    text[19::37] = digits[31::32].translate(_VARIANT)
    return text.decode().split()


def new_request_id() -> str:
    """A random (version 4) UUID in its canonical text form, like ``str(uuid.uuid4())`` at a
    fraction of its cost: every request pays for one."""
    try:
        return _unused.pop()
    except IndexError:
        _unused.extend(_batch())
        return _unused.pop()


# A forked child must not hand out the ids its parent may still use.
os.register_at_fork(after_in_child=_unused.clear)


def with_request_id(message: Message, header: tuple[bytes, bytes]) -> Message:
    """An ``http.response.start`` message carrying ``header`` as its only ``X-Request-ID``."""
    headers = list(message.get("headers", ()))
    for name, _ in headers:
        if name.lower() == b"x-request-id":  # an app's own: dropped (rare, so filtered apart)
            headers = [field for field in headers if field[0].lower() != b"x-request-id"]
            break
    headers.append(header)
    return {**message, "headers": headers}


class RequestIdMiddleware:
    """The request id alone, for apps without aviso's edge (the metrics listener)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        token = request_id_var.set(request_id)
        header = (b"x-request-id", request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = with_request_id(message, header)
            await send(message)

        await self.app(scope, receive, send_with_id)
        # Not reset when the app raised: uvicorn logs the exception after this returns, in
        # the request's own task, and that line should carry the id too.
        request_id_var.reset(token)
