"""uvicorn's httptools protocol with the connection limits of the HTTP edge.

What one connection may cost (``limits`` section, docs/guarantees.md): a request head of at
most ``max_header_bytes`` (431), finished within ``header_timeout_seconds`` of its first
byte (408), a connection that sends nothing closed after ``idle_timeout_seconds``, and
beyond ``max_connections`` open connections new requests answered 503 with
``Retry-After``. Every refusal is the aviso error object with a fresh request id.

Refusing while the client is still sending (a head, or a body nobody will read) must not
reset the connection, or the client never reads the answer: the connection is closed
"lingering" instead, its write side shut after the answer, further input discarded, until
the client closes or ``LINGER_SECONDS`` pass.

The ASGI scope's ``extensions`` carry :data:`ABORT_EXTENSION`, which lets a stream drop its
connection at once (:func:`abort_connection`) rather than wait for a flush that a client
which does not read would never allow, and the scope's :data:`DECLARED_LENGTH` the request's
``Content-Length`` as the parser read it (``None`` for a chunked body), so the body limit
(:mod:`aviso_host.body_limit`) need not look for it again. :data:`DISCONNECT_EXTENSION`
tells a stream when its client goes away (:func:`on_client_gone`) without a task per stream
waiting on ``receive`` for it.

Every request pays for these limits, so the parser callbacks uvicorn's protocol runs per
request are re-implemented here with the limits built in rather than wrapped around a call
to uvicorn's own (each a copy of uvicorn 0.54's, marked where it differs).
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

import httptools
from starlette.types import Receive, Scope, Send
from uvicorn._types import ASGISendEvent
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string
from uvicorn.server import ServerState

from aviso_host.config.settings import LimitSettings
from aviso_host.encoding import dumps
from aviso_host.errors import (
    ApiError,
    error_headers,
    header_fields_too_large,
    internal_error,
    request_head_timeout,
    send_error,
    too_many_connections,
)
from aviso_host.logs import log_event

ABORT_EXTENSION = "aviso.abort_connection"
DISCONNECT_EXTENSION = "aviso.on_client_gone"
DECLARED_LENGTH = "aviso.content_length"
"""Scope key set by aviso's protocol only: the body's length as the head declares it, its
``Content-Length``, 0 with neither that nor ``Transfer-Encoding`` (no body), ``None`` for a
chunked body, whose length nobody knows before it is read."""
LINGER_SECONDS = 5.0
"""How long a refused client may go on sending (discarded) before its connection is cut."""
RETRY_AFTER_SECONDS = 1


def abort_connection(scope: Scope) -> None:
    """Drop the request's connection now, unsent output included (no-op outside aviso's
    protocol, e.g. under a test transport)."""
    abort = scope.get("extensions", {}).get(ABORT_EXTENSION)
    if abort is not None:
        abort()


def on_client_gone(scope: Scope, callback: Callable[[], None] | None) -> bool:
    """Have ``callback`` called once the request's client has closed its connection (``None``:
    no longer). ``False`` outside aviso's protocol, where the caller must wait for
    ``http.disconnect`` from ``receive`` itself."""
    register = scope.get("extensions", {}).get(DISCONNECT_EXTENSION)
    if register is None:
        return False
    register(callback)
    return True


def _response_bytes(error: ApiError, request_id: str) -> bytes:
    """The whole HTTP answer, for refusals written before any request cycle exists."""
    body = dumps(error.body(request_id)).encode()
    head = [STATUS_LINE[error.status]]
    for name, value in error_headers(error, request_id, len(body)):
        head.append(f"{name.lower()}: {value}\r\n".encode("latin-1"))
    return b"".join([*head, b"\r\n", body])


class _Refused(Exception):
    """Stops the parser after a refusal was written from one of its callbacks."""


class _Signal:
    """What uvicorn uses of :class:`asyncio.Event` (``set``, ``clear``, ``is_set``, ``wait``),
    its list of waiters made only while someone waits: an Event's empty deque costs ~700 B,
    and every connection holds two (the request's message event, the writable event of its
    flow control), idle watches included."""

    __slots__ = ("_value", "_waiters")

    def __init__(self, value: bool = False) -> None:
        self._value = value
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        if self._value:
            return
        self._value = True
        for waiter in self._waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._value = False

    async def wait(self) -> bool:
        if self._value:
            return True
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
            return True
        finally:
            self._waiters.remove(waiter)
            if not self._waiters:
                self._waiters = None


class _FlowControl(FlowControl):
    def __init__(self, transport: asyncio.Transport) -> None:  # uvicorn's, with a _Signal
        self._transport = transport
        self.read_paused = False
        self.write_paused = False
        self._is_writable_event = _Signal(True)  # type: ignore[assignment]


class _Transport:
    """The connection's transport as uvicorn's code sees it: closing it while the client
    is still sending a body becomes a lingering close (see the module docstring).

    The methods uvicorn calls on every request are the real transport's own, bound once per
    connection (a ``__getattr__`` fallback would slow them); the rest, rarely called, go
    through that fallback rather than cost every open connection a bound method each."""

    __slots__ = ("_protocol", "_raw", "is_closing", "write", "writelines")

    def __init__(self, transport: asyncio.Transport, protocol: AvisoHttpProtocol) -> None:
        self._protocol = protocol
        self._raw = transport
        self.is_closing = transport.is_closing
        self.write = transport.write
        self.writelines = transport.writelines

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def close(self) -> None:
        self._protocol.close_connection()


class AvisoHttpProtocol(HttpToolsProtocol):
    # Slots: uvicorn's own attributes already fill most of what CPython shares between
    # instances' dicts (30 keys); past that, every attribute read of the protocol slows down.
    __slots__ = (
        "_awaiting_head",
        "_client_gone",
        "_declared_length",
        "_extensions",
        "_head_bytes",
        "_head_timer",
        "_idle_timer",
        "_limits",
        "_linger_timer",
        "_lingering",
        "_max_connections",
        "_raw",
    )

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: LimitSettings,
        max_connections: int,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # A list, not uvicorn's deque (~700 B per connection): requests are pipelined rarely.
        self.pipeline: list[tuple[RequestResponseCycle, Any]] = []  # type: ignore[assignment]
        self._client_gone: Callable[[], None] | None = None
        self._limits = limits
        self._max_connections = max_connections
        self._raw: asyncio.Transport | None = None
        self._extensions: dict[str, Any] = {}
        self._awaiting_head = True
        self._head_bytes = 0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None
        self._lingering = False
        self._declared_length: int | None = 0

    # -- connection ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        self._extensions = {
            ABORT_EXTENSION: self._abort,
            DISCONNECT_EXTENSION: self._on_client_gone,
        }
        super().connection_made(_Transport(transport, self))  # type: ignore[arg-type]
        self.flow = _FlowControl(self.transport)
        self._idle_timer = self.loop.call_later(self._limits.idle_timeout_seconds, self._close_idle)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)
        client_gone = self._client_gone
        if client_gone is not None:
            self._client_gone = None
            client_gone()

    def _on_client_gone(self, callback: Callable[[], None] | None) -> None:
        if callback is not None and self.cycle is not None and self.cycle.disconnected:
            callback()
            return
        self._client_gone = callback
        if callback is not None:
            # What a receive() waiting for the disconnect would do: a connection that is
            # not read from is not seen to close.
            self.flow.resume_reading()

    def _abort(self) -> None:
        if self.cycle is not None:
            # What connection_lost will say anyway; said now, uvicorn does not report the
            # unfinished response of an app that returns right after this as an error.
            self.cycle.disconnected = True
        assert self._raw is not None
        self._raw.abort()

    def close_connection(self) -> None:
        raw = self._raw
        if raw is None or raw.is_closing() or self._lingering:
            return
        cycle = self.cycle
        if cycle is not None and cycle.more_body and not cycle.disconnected:
            self._linger()
        else:
            raw.close()

    def _linger(self) -> None:
        raw = self._raw
        assert raw is not None
        self._lingering = True
        self._cancel_timers()
        self._unset_keepalive_if_required()
        self._linger_timer = self.loop.call_later(LINGER_SECONDS, raw.abort)
        if raw.can_write_eof():
            raw.write_eof()
        raw.resume_reading()  # flow control may have paused it: the rest must be read

    def _cancel_timers(self) -> None:
        for timer in (self._idle_timer, self._head_timer, self._linger_timer):
            if timer is not None:
                timer.cancel()
        self._idle_timer = self._head_timer = self._linger_timer = None

    def _close_idle(self) -> None:
        self._idle_timer = None
        if self._raw is not None and not self._raw.is_closing():
            self._raw.close()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._raw is None or self._raw.is_closing():
            return
        timeout = self._limits.header_timeout_seconds
        if self.pipeline or (self.cycle is not None and not self.cycle.response_complete):
            # Reading is paused while earlier (pipelined) requests are answered: the rest of
            # this head waits on us, not on the client, so the client gets a new window.
            self._head_timer = self.loop.call_later(timeout, self._head_timed_out)
            return
        self._refuse(request_head_timeout(timeout))

    def _refuse(self, error: ApiError) -> None:
        """Answer ``error`` from the protocol itself (no app involved) and close."""
        assert self._raw is not None
        request_id = str(uuid.uuid4())
        log_event(
            error.event_name,
            error.message,
            logging.WARNING,
            code=error.code,
            request_id=request_id,
        )
        self._raw.write(_response_bytes(error, request_id))
        self._linger()

    # -- input -----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        # uvicorn's data_received, plus the head accounting and the refusals.
        if self._lingering:
            return
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._unset_keepalive_if_required()
        if self._awaiting_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self._lingering:  # a callback refused the request
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._awaiting_head and self._head_bytes:
            if self._head_bytes > self._limits.max_header_bytes:
                self._refuse(header_fields_too_large(self._limits.max_header_bytes))
            elif self._head_timer is None:
                self._head_timer = self.loop.call_later(
                    self._limits.header_timeout_seconds, self._head_timed_out
                )

    def on_message_begin(self) -> None:
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.scope = {  # type: ignore[typeddict-item]
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,  # type: ignore[typeddict-item]
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
            # aviso: in the literal, which sizes the dict for them: each key added later
            # may cost every request a resize.
            "extensions": self._extensions,
            DECLARED_LENGTH: 0,
        }

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length":  # aviso: kept for the body limit
            self._declared_length = int(value)  # the parser accepted it: digits only
        elif name == b"transfer-encoding":  # aviso: (the parser refuses it with a length)
            self._declared_length = None
        elif name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        # aviso: the head is complete, so its timer and size check end here.
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        limit = self._limits.max_header_bytes
        # The byte count may include body bytes that came in the same read: only then is
        # the head itself measured.
        if self._head_bytes > limit and self._head_size() > limit:
            self._refuse(header_fields_too_large(limit))
            raise _Refused
        self._awaiting_head = False
        self._head_bytes = 0
        parser = self.parser
        scope = self.scope
        scope[DECLARED_LENGTH] = self._declared_length  # aviso
        self._declared_length = 0
        http_version = parser.get_http_version()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version  # type: ignore[typeddict-item]
        if parser.should_upgrade() and self._should_upgrade():
            return
        parsed_url = httptools.parse_url(self.url)
        raw_path = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope["path"] = self.root_path + path
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        scope["query_string"] = parsed_url.query or b""
        # aviso: the connection cap instead of uvicorn's limit_concurrency.
        app = _service_unavailable if len(self.connections) > self._max_connections else self.app
        existing_cycle = self.cycle
        self.cycle = ResponseCycle(
            scope=scope,
            transport=self.transport,
            flow=self.flow,
            logger=self.logger,
            access_logger=self.access_logger,
            access_log=self.access_log,
            default_headers=self.server_state.default_headers,
            message_event=_Signal(),  # type: ignore[arg-type]
            expect_100_continue=self.expect_100_continue,
            keep_alive=http_version != "1.0" and parser.should_keep_alive(),
            on_response=self.on_response_complete,
        )
        if existing_cycle is None or existing_cycle.response_complete:
            self._start_asgi_task(self.cycle, app)
        else:
            # Pipelined HTTP requests need to be queued up.
            self.flow.pause_reading()
            self.pipeline.append((self.cycle, app))

    def _head_size(self) -> int:
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def on_message_complete(self) -> None:
        self._awaiting_head = True  # aviso: what follows is the next request's head
        upgrading = self.parser.should_upgrade() and self._should_upgrade()
        cycle = self.cycle
        if upgrading or cycle.response_complete:
            return
        cycle.more_body = False
        cycle.message_event.set()

    # -- output ----------------------------------------------------------------------------

    def on_response_complete(self) -> None:
        self._client_gone = None
        if self._lingering:
            # Refused by the protocol itself: the connection is being closed.
            self.server_state.total_requests += 1
            return
        # An answer sent before its body was read (an auth refusal, say) keeps the connection:
        # the parser still takes the rest of that body as body. Refusals that must not wait
        # for the body (413) say ``Connection: close``, which closes it (lingering).
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        self.flow.resume_reading()
        # Unblock any pipelined request, else arm the keep-alive timeout.
        if self.pipeline:
            cycle, app = self.pipeline.pop(0)
            self._start_asgi_task(cycle, app)
        else:
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )


_NAME_BYTES_REFUSED = bytes(byte for byte in range(256) if HEADER_RE.match(bytes([byte])))
_VALUE_BYTES_REFUSED = bytes(byte for byte in range(256) if HEADER_VALUE_RE.match(bytes([byte])))


class ResponseCycle(RequestResponseCycle):
    """uvicorn's request cycle, writing a response of known length in one piece.

    uvicorn writes a response's head as soon as the app starts it and its body when that
    comes: two writes, so two send calls on the socket, for an answer that is all known a
    moment later. The head of a response with a ``Content-Length`` and a body is held until
    the body's first bytes, and written with them. Streams (chunked, e.g. a watch's events)
    still get their head at once, as do ``HEAD`` answers and empty bodies. An app failing
    between the two closes the connection as before, with nothing of the answer written
    instead of half of it."""

    # A class default rather than an ``__init__`` of its own: that would cost every request
    # a frame and a keyword dictionary.
    _held_head: bytes | None = None

    async def send(self, message: ASGISendEvent) -> None:
        # uvicorn 0.54's send, differing where marked "aviso".
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
                )
            self.response_started = True
            self.waiting_for_100_continue = False
            status_code = message["status"]
            headers = self.default_headers + list(message.get("headers", []))
            if self.access_log:
                self.access_logger.info(
                    '%s - "%s %s HTTP/%s" %d',
                    get_client_addr(self.scope),
                    self.scope["method"],
                    get_path_with_query_string(self.scope),
                    self.scope["http_version"],
                    status_code,
                )
            # aviso: uvicorn's two regex searches per field, as one check of all names and one
            # of all values, each deleting the bytes the pattern matches and comparing lengths
            # (single bytes: joining cannot hide or create a match).
            names = b"".join([name for name, _ in headers])
            if len(names.translate(None, _NAME_BYTES_REFUSED)) != len(names):
                raise RuntimeError("Invalid HTTP header name.")
            values = b"".join([value for _, value in headers])
            if len(values.translate(None, _VALUE_BYTES_REFUSED)) != len(values):
                raise RuntimeError("Invalid HTTP header value.")
            content = [STATUS_LINE[status_code]]
            has_connection_close = False
            for name, value in headers:
                name = name.lower()
                if name == b"content-length" and self.chunked_encoding is None:
                    self.expected_content_length = int(value)
                    self.chunked_encoding = False
                elif name == b"transfer-encoding" and value.lower() == b"chunked":
                    self.expected_content_length = 0
                    self.chunked_encoding = True
                elif name == b"connection":
                    connection = [token.lower().strip() for token in value.split(b",")]
                    if b"close" in connection:
                        self.keep_alive = False
                        has_connection_close = True
                content.extend([name, b": ", value, b"\r\n"])
            if not self.keep_alive and not has_connection_close:
                content.append(b"connection: close\r\n")
            if (
                self.chunked_encoding is None
                and self.scope["method"] != "HEAD"
                and status_code not in (204, 304)
            ):
                self.chunked_encoding = True
                content.append(b"transfer-encoding: chunked\r\n")
            content.append(b"\r\n")
            # aviso: held until the body comes when one of known length will.
            if (
                self.chunked_encoding is False
                and self.expected_content_length
                and self.scope["method"] != "HEAD"
            ):
                self._held_head = b"".join(content)
            else:
                self.transport.write(b"".join(content))
        elif not self.response_complete:
            if message["type"] != "http.response.body":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.body', but got '{message['type']}'."
                )
            body = message.get("body", b"")
            more_body = message.get("more_body", False)
            if self.scope["method"] == "HEAD":
                self.expected_content_length = 0
            elif self.chunked_encoding:
                content = [b"%x\r\n" % len(body), body, b"\r\n"] if body else []
                if not more_body:
                    content.append(b"0\r\n\r\n")
                self.transport.write(b"".join(content))
            else:
                num_bytes = len(body)
                if num_bytes > self.expected_content_length:
                    raise RuntimeError("Response content longer than Content-Length")
                self.expected_content_length -= num_bytes
                head = self._held_head  # aviso: written with the first body bytes
                if head is None:
                    self.transport.write(body)
                elif num_bytes:
                    self._held_head = None
                    self.transport.write(head + body)
            if not more_body:
                if self.expected_content_length != 0:
                    raise RuntimeError("Response content shorter than Content-Length")
                self.response_complete = True
                self.message_event.set()
                if not self.keep_alive:
                    self.transport.close()
                self.on_response()
        else:
            raise RuntimeError(
                f"Unexpected ASGI message '{message['type']}' sent, after response already "
                "completed."
            )

    async def send_500_response(self) -> None:
        """uvicorn's own last-resort 500 (the app failed before answering), in our shape."""
        request_id = self.scope.get("state", {}).get("request_id") or str(uuid.uuid4())
        await send_error(internal_error(), request_id, self.send)


async def _service_unavailable(scope: Scope, receive: Receive, send: Send) -> None:
    """The app answering every request while the server holds more than
    ``max_connections`` connections."""
    error = too_many_connections(RETRY_AFTER_SECONDS)
    request_id = str(uuid.uuid4())
    log_event(
        error.event_name, error.message, logging.WARNING, code=error.code, request_id=request_id
    )
    await send_error(error, request_id, send)
