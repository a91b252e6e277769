"""uvicorn's httptools protocol with the connection limits of the HTTP edge.

What one connection may cost (``limits`` section, docs/guarantees.md): a request head of at
most ``max_header_bytes`` (431), finished within ``header_timeout_seconds`` of its first
byte (408), a body finished within ``body_timeout_seconds`` of the head (408), a
connection that sends nothing closed after ``idle_timeout_seconds``. Every head counts,
wherever it starts: one that begins in the same read as the end of the request before it
(pipelined, or sent behind an open watch) is measured and timed like a head of its own. A
request the parser cannot read gets 400, one of an HTTP version other than 1.0 and 1.1
gets 505. The trailer fields after a chunked body are a second head: they count toward
``max_header_bytes`` and must arrive within ``header_timeout_seconds`` as well (then they
are discarded: the app has its request's headers already). Every refusal is the aviso
error object with a fresh request id.

The connection caps act when a connection is accepted (:class:`ConnectionCaps`): up to
``max_connections`` connections are served; past it, or past
``max_connections_per_client`` from one client address, a connection is for the probes
(``GET``/``HEAD`` ``/health`` and ``/ready``, so that an orchestrator does not restart a
service that is merely busy): it must send its head within ``PROBE_HEAD_SECONDS``, any
other request is answered 503 (429 over the per-client cap) with ``Retry-After``, and it
is closed once answered. At most ``PROBE_RESERVE`` connections are held past the caps, at
most ``PROBE_RESERVE_PER_CLIENT`` of them from one address: past that a new connection
takes the place of one that has shown it is no probe, or is reset as soon as it is
accepted, so that a flood holds no more descriptors than the caps allow and one address
cannot take the probes' room.

A connection dropped at once (an aborted stream, the end of a lingering close, one refused
at accept) is reset (``SO_LINGER`` 0): the kernel discards its send queue then, instead of
holding it while it tries to deliver it to a client that does not read.

Refusing while the client is still sending (a head, or a body nobody will read) must not
reset the connection, or the client never reads the answer: the connection is closed
"lingering" instead, its write side shut after the answer, further input discarded, until
the client closes or stops sending for ``LINGER_QUIET_SECONDS`` (then closed), or
``LINGER_SECONDS`` pass (then reset).

The ASGI scope carries the connection (:data:`CONNECTION_EXTENSION`: one entry, not a dict
of bound methods, which every idle watch would hold), which lets a stream drop its
connection at once (:func:`abort_connection`) rather than wait for a flush that a client
which does not read would never allow, tells a stream when its client goes away
(:func:`on_client_gone`) without a task per stream waiting on ``receive`` for it, and writes
a live stream's event to a connection that keeps up without its task (:func:`chunk_writer`).

This is a subclass of uvicorn's httptools protocol whose overrides add to uvicorn's own
callbacks and call them (``super()``), and a wrapper around the connection's transport,
installed in ``connection_made``, which writes a response of known length in one piece
(:class:`ConnectionTransport`). The protocol's attributes and callbacks it relies on are not
documented uvicorn API: tests/host/test_uvicorn_contract.py lists each and checks it against
the installed uvicorn, and setup.cfg pins uvicorn to the minor it checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import struct
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Protocol

from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from aviso_host.clients import client_of
from aviso_host.config.settings import LimitSettings
from aviso_host.encoding import dumps
from aviso_host.errors import (
    ApiError,
    error_headers,
    header_fields_too_large,
    http_version_not_supported,
    malformed_request,
    request_body_timeout,
    request_head_timeout,
    send_error,
    too_many_client_connections,
    too_many_connections,
)
from aviso_host.logs import log_event
from aviso_host.request_id import new_request_id

CONNECTION_EXTENSION = "aviso.connection"
LINGER_SECONDS = 5.0
"""How long a refused client may go on sending (discarded) before its connection is cut."""
LINGER_QUIET_SECONDS = 1.0
"""A refused client that sends nothing for this long has stopped: its connection is closed
then (it can still read the answer, no reset) rather than held to ``LINGER_SECONDS``."""
RETRY_AFTER_SECONDS = 1
PROBE_PATHS = (b"/health", b"/ready")
"""Answered whatever the connection caps: a busy service is not a dead one."""
PROBE_RESERVE = 32
"""Connections held past the caps, for the probes; taken out of the descriptors kept out of
``max_connections`` (``aviso_host.server.DESCRIPTOR_RESERVE``)."""
PROBE_RESERVE_PER_CLIENT = 4
"""What one client address may hold of ``PROBE_RESERVE``: a flood from one address leaves
the rest to the probes of others."""
PROBE_HEAD_SECONDS = 2.0
"""How long a connection accepted past a cap has to send its whole head (at most
``header_timeout_seconds``): a probe sends it at once; one that does not is reset, so that
held connections give the reserve back quickly."""
PROBE_SILENCE_SECONDS = 0.5
"""A connection in the probe reserve that has sent nothing for this long since it was
accepted may lose its place to a newer one: a probe sends its head at once."""
REFUSAL_LOG_SECONDS = 10.0
"""At most one log line per this many seconds counts the connections reset at accept: a
flood must not become a flood of log lines."""
MAX_PIPELINED_REQUESTS = 64
"""Requests read ahead of the one being answered on a connection; past it the connection is
reset. Every request in one read is parsed and waits with its own scope: unbounded, one read
of tiny requests behind a watch held ~7 MiB per connection."""
SUPPORTED_VERSIONS = ("1.0", "1.1")
_RESET = struct.pack("ii", 1, 0)
"""``SO_LINGER`` on with a timeout of 0: ``close`` resets the connection."""

App = Callable[[Scope, Receive, Send], Any]
_SHARED_ASGI: dict[Any, Any] = {}
"""The scope's ``asgi`` entry, the same few strings in every request: one dict per variant,
not one per request that every idle watch would hold."""


def abort_connection(scope: Scope) -> None:
    """Drop the request's connection now, unsent output included (no-op outside aviso's
    protocol, e.g. under a test transport)."""
    connection = scope.get(CONNECTION_EXTENSION)
    if connection is not None:
        connection.abort()


def on_client_gone(scope: Scope, callback: Callable[[], None] | None) -> bool:
    """Have ``callback`` called once the request's client has closed its connection (``None``:
    no longer). ``False`` outside aviso's protocol, where the caller must wait for
    ``http.disconnect`` from ``receive`` itself."""
    connection = scope.get(CONNECTION_EXTENSION)
    if connection is None:
        return False
    connection.on_client_gone(callback)
    return True


def chunk_writer(scope: Scope) -> Callable[[bytes], bool] | None:
    """What writes one piece of a started chunked response now, framed already (``size
    CRLF data CRLF``), and says whether it did: ``False`` when the response is not
    chunked or no longer being written, or the transport is above its high-water mark (the
    caller then sends it through ASGI, which waits for the client). ``None`` outside aviso's
    protocol."""
    connection: AvisoHttpProtocol | None = scope.get(CONNECTION_EXTENSION)
    return None if connection is None else connection.write_chunk


def _response_bytes(error: ApiError, request_id: str) -> bytes:
    """The whole HTTP answer, for refusals written by the protocol itself."""
    body = dumps(error.body(request_id)).encode()
    status = HTTPStatus(error.status)
    head = [f"HTTP/1.1 {status.value} {status.phrase}\r\n"]
    head.extend(
        f"{name.lower()}: {value}\r\n"
        for name, value in error_headers(error, request_id, len(body))
    )
    return "".join(head).encode("latin-1") + b"\r\n" + body


class Reserved(Protocol):
    """A connection held in the probe reserve, as :class:`ConnectionCaps` sees it."""

    def evictable(self, now: float) -> bool:
        """Whether it has shown it is not a probe being answered (``now``: the loop's
        time)."""
        ...

    def evict(self) -> None:
        """Drop it now: its place went to a newer connection."""
        ...


class ConnectionCaps:
    """The connection caps of one server, applied as each connection is accepted; shared by
    its connections.

    :meth:`accept` files a new connection: served, for the probes only (with the app that
    answers its other requests), or refused (to be reset at once). At most ``capacity``
    connections are served (at most ``per_client`` of them from one address, when set);
    any other is held in the probe reserve: at most ``PROBE_RESERVE`` connections, at most
    ``PROBE_RESERVE_PER_CLIENT`` of them from one address. So the connections together
    hold at most ``capacity + PROBE_RESERVE`` descriptors however many arrive, and one
    address leaves most of the reserve to others. When the reserve (or the address's part
    of it) is full, a new connection takes the place of one that has shown it is no probe
    (:meth:`Reserved.evictable`), from its own address, else from the address holding
    most; only when there is none is it refused. A flood cannot keep probes out by holding
    the reserve: its connections give their places up to newer ones."""

    __slots__ = (
        "_dropped",
        "_next_log",
        "_reserved",
        "_reserved_total",
        "_served",
        "_served_from",
        "capacity",
        "per_client",
        "too_many_from_client",
    )

    def __init__(self, capacity: int, per_client: int = 0) -> None:
        """``per_client``: ``limits.max_connections_per_client``, 0 for none."""
        self.capacity = capacity
        self.per_client = per_client
        self.too_many_from_client: App = functools.partial(_too_many_from_client, per_client)
        self._served = 0
        self._served_from: dict[str, int] = {}
        """Served connections per address, counted only with ``per_client``."""
        self._reserved: dict[str, list[Reserved]] = {}
        """Connections held in the reserve, per address, oldest first (never empty)."""
        self._reserved_total = 0
        self._dropped = 0
        self._next_log = 0.0

    def accept(self, host: str, connection: Reserved, now: float) -> tuple[bool, App | None] | None:
        """Whether ``connection``, new from ``host``, is held in the probe reserve, and the
        app answering its requests other than probes (``None``: it is served); ``None``
        when it is refused. ``now``: the loop's time."""
        over_client = bool(self.per_client) and self._served_from.get(host, 0) >= self.per_client
        if not over_client and self._served < self.capacity:
            self._served += 1
            if self.per_client:
                self._served_from[host] = self._served_from.get(host, 0) + 1
            return False, None
        held = self._reserved.get(host)
        if held is not None and len(held) >= PROBE_RESERVE_PER_CLIENT:
            room = self._evict(host, held, now)
        elif self._reserved_total >= PROBE_RESERVE:
            busiest = max(self._reserved, key=lambda other: len(self._reserved[other]))
            room = self._evict(busiest, self._reserved[busiest], now)
        else:
            room = True
        if not room:
            self._dropped_one()
            return None
        self._reserved.setdefault(host, []).append(connection)
        self._reserved_total += 1
        return True, self.too_many_from_client if over_client else _service_unavailable

    def release(self, host: str, connection: Reserved | None) -> None:
        """A connection that :meth:`accept` took closed; ``connection`` if it was held in
        the reserve."""
        if connection is not None:
            held = self._reserved[host]
            held.remove(connection)
            if not held:
                del self._reserved[host]
            self._reserved_total -= 1
            return
        self._served -= 1
        if self.per_client:
            left = self._served_from[host] - 1
            if left:
                self._served_from[host] = left
            else:
                del self._served_from[host]

    def _evict(self, host: str, held: list[Reserved], now: float) -> bool:
        for connection in held:
            if connection.evictable(now):
                self.release(host, connection)
                connection.evict()
                self._dropped_one()
                return True
        return False

    def _dropped_one(self) -> None:
        """Count a connection reset for want of room in the reserve (refused at accept, or
        evicted for a newer one): one log line per ``REFUSAL_LOG_SECONDS`` at most."""
        self._dropped += 1
        now = time.monotonic()
        if now >= self._next_log:
            log_event(
                "server.connections.refused",
                f"{self._dropped} connection(s) past the connection caps reset: the probe "
                f"reserve ({PROBE_RESERVE} connections, {PROBE_RESERVE_PER_CLIENT} per "
                "address) was full",
                logging.WARNING,
            )
            self._dropped = 0
            self._next_log = now + REFUSAL_LOG_SECONDS


class RequestCycle(Protocol):
    """The public attributes of uvicorn's request cycle (one per request) that aviso reads,
    and the two it sets: ``disconnected`` and ``message_event``."""

    scope: Scope
    response_started: bool
    response_complete: bool
    chunked_encoding: bool | None
    expected_content_length: int
    more_body: bool
    disconnected: bool
    message_event: asyncio.Event


class Connection(Protocol):
    """What :class:`ConnectionTransport` needs of its protocol."""

    @property
    def cycle(self) -> RequestCycle | None: ...

    def close_connection(self) -> None: ...


class ConnectionTransport:
    """The connection's transport as uvicorn's request cycle sees it, with two differences.

    A response of known length goes out in one write. uvicorn writes a response's head as
    soon as the app starts it and its body when that comes: two writes, so two send calls on
    the socket, for an answer that is all known a moment later. The first write of a started
    response with a ``Content-Length`` and a body to come (its head) is held and written with
    the first body bytes. Streams (chunked: a watch's events) still get their head at once,
    as do ``HEAD`` answers and empty bodies. An app failing between the two closes the
    connection with nothing of the answer written instead of half of it.

    Closing while the client is still sending a body becomes a lingering close (see the
    module docstring).

    ``write`` is whatever the response's state needs: the head check until the response's
    head is written, the real transport's own method for the rest of the response (a
    stream's events pay for nothing here), until :meth:`response_complete`. The rest of the
    transport's methods, rarely called, go through a ``__getattr__`` fallback rather than
    cost every open connection a bound method each."""

    __slots__ = ("_connection", "_held", "_raw", "_refused", "is_closing", "write")

    def __init__(self, raw: asyncio.Transport, connection: Connection) -> None:
        self._raw = raw
        self._connection = connection
        self._held: bytes | None = None
        self._refused = False
        self.is_closing = raw.is_closing
        self.write: Callable[[bytes], None] = self._write_head

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def _write_head(self, data: bytes) -> None:
        cycle = self._connection.cycle
        # Before the response starts, a write is uvicorn's "100 Continue". A pipelined
        # request's cycle is the connection's newest, not the one writing: such answers are
        # written as they come, checked write by write, which is merely slower.
        if cycle is not None and cycle.response_started:
            if (
                cycle.chunked_encoding is False
                and cycle.expected_content_length
                and cycle.scope["method"] != "HEAD"
            ):
                self._held = data
                self.write = self._write_held
                return
            self.write = self._raw.write
        self._raw.write(data)

    def _write_held(self, data: bytes) -> None:
        if data:
            held = self._held
            self._held = None
            self.write = self._raw.write
            self._raw.write(held + data)  # type: ignore[operator]

    def response_complete(self) -> None:
        """The next write is the next response's (or a 100 Continue's)."""
        self._held = None
        self.write = self._discard if self._refused else self._write_head

    def refused(self) -> None:
        """The protocol answered the connection itself and ended its output: what a request
        still running on it (one pipelined before the refused head) writes is dropped,
        as after a disconnect, instead of failing on the ended stream."""
        self._refused = True
        self._held = None
        self.write = self._discard

    def _discard(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        # A held head is dropped: the app failed before its body, and half an answer is worse
        # than none.
        self.response_complete()
        self._connection.close_connection()


class _Signal:
    """What uvicorn's request cycle uses of its message event (:class:`asyncio.Event`'s
    ``set``, ``clear``, ``is_set``, ``wait``), its list of waiters made only while someone
    waits: an Event's empty deque costs ~700 B, which every idle watch would hold."""

    __slots__ = ("_value", "_waiters")

    def __init__(self) -> None:
        self._value = False
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


class _FlowControl:
    """What uvicorn's protocol and request cycle use of their flow control, its writable
    event a :class:`_Signal`: uvicorn's :class:`asyncio.Event` holds an empty deque (~760 B)
    on every connection."""

    __slots__ = ("_transport", "_writable", "read_paused", "write_paused")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.read_paused = self.write_paused = False
        self._writable = _Signal()
        self._writable.set()

    async def drain(self) -> None:
        await self._writable.wait()

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._writable.clear()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._writable.set()


class _Pipeline(list[Any]):
    """uvicorn's queue of pipelined requests (``appendleft``, ``pop``), a list: requests are
    rarely pipelined, and uvicorn's deque costs every connection ~760 B."""

    __slots__ = ()

    def appendleft(self, item: Any) -> None:
        self.insert(0, item)


class AvisoHttpProtocol(HttpToolsProtocol):
    # Slots: uvicorn's own attributes already fill most of what CPython shares between
    # instances' dicts (30 keys); past that, every attribute read of the protocol slows down.
    __slots__ = (
        "_accepted_at",
        "_awaiting_head",
        "_body_fed",
        "_body_timer",
        "_caps",
        "_client_gone",
        "_ended_head",
        "_head_began",
        "_head_bytes",
        "_head_timer",
        "_host",
        "_idle_timer",
        "_limits",
        "_linger_heard",
        "_linger_timer",
        "_lingering",
        "_quiet_timer",
        "_raw",
        "_read_heads",
        "_read_size",
        "_refusal",
        "_reserved",
        "_tail_bytes",
        "_trailer_bytes",
        "_wrapper",
        "_write_paused",
    )

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        *,
        limits: LimitSettings,
        caps: ConnectionCaps,
        **uvicorn_arguments: Any,
    ) -> None:
        """``caps``: the server's connection caps; ``uvicorn_arguments``: what else uvicorn's
        server passes (the event loop)."""
        super().__init__(config, server_state, app_state, **uvicorn_arguments)
        self.pipeline = _Pipeline()  # type: ignore[assignment]
        self._caps = caps
        self._host: str | None = None
        """The client address while the connection holds a place under the caps."""
        self._reserved = False
        self._accepted_at = 0.0
        self._refusal: App | None = None
        """The app answering every request but the probes on a connection accepted past a
        cap; ``None`` on a served one."""
        self._body_timer: asyncio.TimerHandle | None = None
        self._client_gone: Callable[[], None] | None = None
        self._limits = limits
        self._raw: asyncio.Transport | None = None
        self._wrapper: ConnectionTransport | None = None
        self._awaiting_head = True
        self._head_bytes = 0
        """Bytes of the unfinished head fed before the current read (an upper bound)."""
        self._head_began = False
        """A head began in the current read and has not ended."""
        self._read_size = 0
        self._read_heads = 0
        """Bytes of the current read taken by heads that ended in it, as measured when the
        next head began."""
        self._ended_head: int | None = None
        """The bytes fed before the current read of the last head that ended in it; ``None``
        when none did."""
        self._body_fed = 0
        self._tail_bytes = 0
        """Bytes of the body phase fed since the last read that carried body bytes (chunk
        framing, trailer fields): what an unfinished trailer field may hold."""
        self._trailer_bytes = 0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None
        self._quiet_timer: asyncio.TimerHandle | None = None
        self._linger_heard = False
        self._lingering = False
        self._write_paused = False

    # -- connection ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        # uvicorn annotates its cycle as never None and its scope as a TypedDict, which
        # Connection, naming only what is read, cannot spell.
        self._wrapper = ConnectionTransport(transport, self)  # type: ignore[arg-type]
        super().connection_made(self._wrapper)  # type: ignore[arg-type]
        self.flow = _FlowControl(transport)  # type: ignore[assignment]
        host = client_of(self.client[0]) if self.client is not None else ""
        self._accepted_at = now = self.loop.time()
        place = self._caps.accept(host, self, now)
        if place is None:
            # Past every cap: the descriptor is given back at once, nothing is read.
            self._lingering = True
            self._reset()
            return
        self._host = host
        self._reserved, self._refusal = place
        if self._refusal is None:
            self._idle_timer = self.loop.call_later(
                self._limits.idle_timeout_seconds, self._close_idle
            )
        else:
            # Over a cap the head has a short deadline from the start, silence included.
            self._head_timer = self.loop.call_later(
                min(PROBE_HEAD_SECONDS, self._limits.header_timeout_seconds),
                self._probe_timed_out,
            )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        if self._host is not None:
            self._caps.release(self._host, self if self._reserved else None)
            self._host = None
        super().connection_lost(exc)
        client_gone = self._client_gone
        if client_gone is not None:
            self._client_gone = None
            client_gone()

    def on_client_gone(self, callback: Callable[[], None] | None) -> None:
        if callback is not None and self.cycle is not None and self.cycle.disconnected:
            callback()
            return
        self._client_gone = callback
        if callback is not None:
            # What a receive() waiting for the disconnect would do: a connection that is
            # not read from is not seen to close.
            self.flow.resume_reading()

    def evictable(self, now: float) -> bool:
        """Held in the probe reserve: no probe is being answered on it (it has sent part of
        a head, or nothing for ``PROBE_SILENCE_SECONDS``, or its answer is written)."""
        if self._lingering:
            return True
        return self.cycle is None and (
            self._head_bytes > 0 or now - self._accepted_at >= PROBE_SILENCE_SECONDS
        )

    def evict(self) -> None:
        self._host = None  # its place is released already
        self._lingering = True
        if self._wrapper is not None:
            self._wrapper.refused()
        if self._raw is not None and not self._raw.is_closing():
            self._reset()

    def abort(self) -> None:
        if self.cycle is not None:
            # What connection_lost will say anyway; said now, uvicorn does not report the
            # unfinished response of an app that returns right after this as an error.
            self.cycle.disconnected = True
        self._reset()

    def _reset(self) -> None:
        """Drop the connection now, with a reset: the kernel frees its send queue at once."""
        raw = self._raw
        assert raw is not None
        sock = raw.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # already gone
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        raw.abort()

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
        self._linger_timer = self.loop.call_later(LINGER_SECONDS, self._reset)
        self._linger_heard = False
        self._quiet_timer = self.loop.call_later(LINGER_QUIET_SECONDS, self._linger_quiet)
        if raw.can_write_eof():
            raw.write_eof()
        raw.resume_reading()  # flow control may have paused it: the rest must be read

    def _linger_quiet(self) -> None:
        self._quiet_timer = None
        raw = self._raw
        if raw is None or raw.is_closing():
            return
        if self._linger_heard:
            self._linger_heard = False
            self._quiet_timer = self.loop.call_later(LINGER_QUIET_SECONDS, self._linger_quiet)
            return
        # Nothing is left unread, so closing sends the client the end of the answer, not a
        # reset; the linger timer still cuts a close whose answer the client never reads.
        raw.close()

    def _cancel_timers(self) -> None:
        for timer in (
            self._idle_timer,
            self._head_timer,
            self._body_timer,
            self._linger_timer,
            self._quiet_timer,
            self.timeout_keep_alive_task,
        ):
            if timer is not None:
                timer.cancel()
        self._idle_timer = self._head_timer = self._body_timer = None
        self._linger_timer = self._quiet_timer = None
        self.timeout_keep_alive_task = None

    def _close_idle(self) -> None:
        self._idle_timer = None
        if self._raw is not None and not self._raw.is_closing():
            self._raw.close()

    def _probe_timed_out(self) -> None:
        self._head_timer = None
        if self._raw is not None and not self._raw.is_closing() and not self._lingering:
            self._lingering = True  # whatever it still sends is not read
            self._reset()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._raw is None or self._raw.is_closing():
            return
        timeout = self._limits.header_timeout_seconds
        if self.pipeline or self.flow.read_paused:
            # Reading is paused while earlier (pipelined) requests are answered: the rest of
            # this head waits on us, not on the client, so the client gets a new window.
            # A request still being answered does not pause reading: a head behind it (a
            # watch's, for its whole life) has its deadline like any other.
            self._head_timer = self.loop.call_later(timeout, self._head_timed_out)
            return
        self._refuse(request_head_timeout(timeout))

    def _tail_timed_out(self) -> None:
        self._head_timer = None
        if self._raw is not None and not self._raw.is_closing():
            self._refuse(request_head_timeout(self._limits.header_timeout_seconds))

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self._raw is None or self._raw.is_closing() or self._awaiting_head:
            return
        timeout = self._limits.body_timeout_seconds
        if self.flow.read_paused:
            # The app has not taken what came so far: the client waits on us.
            self._body_timer = self.loop.call_later(timeout, self._body_timed_out)
            return
        self._refuse(request_body_timeout(timeout))

    def _refuse(self, error: ApiError) -> None:
        """Answer ``error`` from the protocol itself (no app involved) and close.

        Refused in the body phase (its trailer fields), the request's app is running: it is
        told its client went away, as uvicorn's ``connection_lost`` would tell it, so that
        nothing it answers is written, and the refusal is written only if it had not
        started an answer."""
        assert self._raw is not None
        request_id = new_request_id()
        log_event(
            error.event_name,
            error.message,
            logging.WARNING,
            code=error.code,
            request_id=request_id,
        )
        cycle = self.cycle
        answered = False
        if not self._awaiting_head and cycle is not None:
            answered = cycle.response_started
            cycle.disconnected = True
            cycle.message_event.set()
        if not answered:
            self._raw.write(_response_bytes(error, request_id))
        if self._wrapper is not None:
            self._wrapper.refused()
        self._linger()

    # -- input -----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._linger_heard = True
            return
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        in_head = self._awaiting_head
        self._body_fed = self._read_heads = 0
        self._read_size = len(data)
        super().data_received(data)
        same_head = in_head and self._ended_head is None
        self._ended_head = None
        if self._lingering:
            return
        limit = self._limits.max_header_bytes
        if self._awaiting_head:
            if self._head_began:
                # Begun in this read: what else the read held was what came before it (body
                # bytes, framing, the heads before it, measured as they ended).
                self._head_bytes = max(1, len(data) - self._body_fed - self._read_heads)
                self._head_began = False
            elif same_head:
                self._head_bytes += len(data)
            if self._head_bytes > limit:
                self._refuse(header_fields_too_large(limit))
            elif self._head_bytes and self._head_timer is None:
                self._head_timer = self.loop.call_later(
                    self._limits.header_timeout_seconds, self._head_timed_out
                )
        elif not in_head:
            # The body phase throughout this read: what it carried besides body bytes is
            # chunk framing or trailer fields, which the parser holds until a field ends.
            tail = len(data) - self._body_fed
            if self._body_fed:
                self._tail_bytes = tail
                if self._head_timer is not None:
                    self._head_timer.cancel()
                    self._head_timer = None
            else:
                self._tail_bytes += tail
                if tail and self._head_timer is None:
                    self._head_timer = self.loop.call_later(
                        self._limits.header_timeout_seconds, self._tail_timed_out
                    )
            if self._tail_bytes > limit:
                self._refuse(header_fields_too_large(limit))
                return
        if not self._awaiting_head and self._body_timer is None:
            # The body goes on past this read: from now on it has a deadline.
            self._body_timer = self.loop.call_later(
                self._limits.body_timeout_seconds, self._body_timed_out
            )

    def send_400_response(self, msg: str) -> None:
        # What the parser could not read, answered in the aviso error shape (uvicorn's own
        # answer is plain text without a request id); a refused connection gets no second.
        if not self._lingering:
            self._refuse(malformed_request())

    def on_message_begin(self) -> None:
        ended = self._ended_head
        if ended is not None:
            # The head before ended in this read (its fields are still at hand): what of
            # the read it took is not this head's.
            self._read_heads += max(0, self._head_size() - ended)
        self._head_began = True
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._awaiting_head:
            super().on_header(name, value)
            return
        # A trailer field, after a chunked body: counted as head bytes, then dropped.
        if self._lingering:
            return
        self._trailer_bytes += len(name) + len(value) + 4
        limit = self._limits.max_header_bytes
        if self._trailer_bytes > limit:
            self._refuse(header_fields_too_large(limit))

    def on_headers_complete(self) -> None:
        if self._lingering:
            return
        # The head is complete, so its timer and size check end here.
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        limit = self._limits.max_header_bytes
        # What was fed of it, this read whole, may include what came before it in the
        # read and body bytes after it: only past the limit is the head itself measured.
        if self._head_bytes + self._read_size > limit and self._head_size() > limit:
            self._refuse(header_fields_too_large(limit))
            return
        version = self.parser.get_http_version()
        if version not in SUPPORTED_VERSIONS:
            self._refuse(http_version_not_supported(version))
            return
        if len(self.pipeline) >= MAX_PIPELINED_REQUESTS:
            # Reset, not answered: an answer would go out ahead of those of the requests
            # before it, still unwritten, and be read as theirs.
            log_event(
                "api.request.refused",
                f"more than {MAX_PIPELINED_REQUESTS} pipelined requests waiting on one "
                "connection: connection reset",
                logging.WARNING,
            )
            self._lingering = True  # the rest of what was read is dropped
            if self._wrapper is not None:
                self._wrapper.refused()
            self._reset()
            return
        self._ended_head = self._head_bytes
        self._awaiting_head = self._head_began = False
        self._head_bytes = self._tail_bytes = self._trailer_bytes = 0
        # uvicorn types its scope as a TypedDict of ASGI's keys; a server's own key is allowed.
        self.scope[CONNECTION_EXTENSION] = self  # type: ignore[literal-required]
        asgi = self.scope["asgi"]
        self.scope["asgi"] = _SHARED_ASGI.setdefault(tuple(asgi.items()), asgi)
        refusal = self._refusal
        if refusal is not None and self._is_probe():
            refusal = None
        if refusal is None:
            super().on_headers_complete()
        else:
            # Accepted over a connection cap: uvicorn serves this request with the refusing
            # app.
            app = self.app
            self.app = refusal
            try:
                super().on_headers_complete()
            finally:
                self.app = app
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # not an upgrade
            # Its task has not run yet: nothing waits on the event it was given.
            cycle.message_event = _Signal()  # type: ignore[assignment]
            if self._refusal is not None:
                # Closed once answered, probes included: else connections that only ever
                # ask /health would stay open past the caps, for as long as a client likes.
                cycle.keep_alive = False

    def _is_probe(self) -> bool:
        return self.url.partition(b"?")[0] in PROBE_PATHS and self.parser.get_method() in (
            b"GET",
            b"HEAD",
        )

    def _head_size(self) -> int:
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def on_body(self, body: bytes) -> None:
        if self._lingering:
            return
        self._body_fed += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._lingering:
            return
        self._awaiting_head = True  # what follows is the next request's head
        if self._head_timer is not None:  # the trailer fields' timer
            self._head_timer.cancel()
            self._head_timer = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    # -- output ----------------------------------------------------------------------------

    def pause_writing(self) -> None:
        self._write_paused = True
        super().pause_writing()

    def resume_writing(self) -> None:
        self._write_paused = False
        super().resume_writing()

    def write_chunk(self, chunk: bytes) -> bool:
        # Only one response is being written on a connection at a time, and a pipelined
        # request's cycle has not started its own: a started, unfinished chunked response
        # is the caller's.
        cycle = self.cycle
        raw = self._raw
        if (
            self._write_paused
            or cycle is None
            or raw is None
            or not cycle.response_started
            or cycle.response_complete
            or cycle.disconnected
            or cycle.chunked_encoding is not True
            or self._lingering
            or raw.is_closing()
        ):
            return False
        raw.write(chunk)
        return True

    def on_response_complete(self) -> None:
        self._client_gone = None
        if self._wrapper is not None:
            self._wrapper.response_complete()
        if self._lingering:
            # Refused by the protocol itself: the connection is being closed, and neither
            # a pipelined request nor the keep-alive timer is started.
            self.server_state.total_requests += 1
            return
        super().on_response_complete()


async def _service_unavailable(scope: Scope, receive: Receive, send: Send) -> None:
    """The app answering every request while the server holds more than
    ``max_connections`` connections."""
    await _refuse_request(too_many_connections(RETRY_AFTER_SECONDS), send)


async def _too_many_from_client(limit: int, scope: Scope, receive: Receive, send: Send) -> None:
    """The app answering a request on a connection over ``max_connections_per_client``."""
    await _refuse_request(too_many_client_connections(limit, RETRY_AFTER_SECONDS), send)


async def _refuse_request(error: ApiError, send: Send) -> None:
    request_id = new_request_id()
    log_event(
        error.event_name, error.message, logging.WARNING, code=error.code, request_id=request_id
    )
    await send_error(error, request_id, send)
