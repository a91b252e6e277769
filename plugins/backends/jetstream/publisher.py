"""A nats-py client with a lean JetStream publish: what ``js.publish`` does, at a fraction of
its CPU cost per message.

nats-py's request path costs more per publish than the notify handler around it: a NUID and
random bytes per reply subject, two subject validations, the header block built from a dict,
``asyncio.wait_for`` (a timer and a wrapper future), and on the way back a ``Msg`` object, a
queue hop to the response subscription's task, a callback coroutine and a ``PubAck``
dataclass. Here the reply subjects share one wildcard subscription whose messages are picked
out before nats-py builds anything, waiting publishes are failed on time by one periodic
sweep, and the header block is given ready-made (the stream's fixed one is cached). The
checks and errors are those of ``js.publish``: the acknowledgement is JetStream's PubAck, an
error reply raises its ``APIError``, no responders raise ``NoStreamResponseError``.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import re
from collections.abc import Mapping

from nats.aio.client import Client
from nats.errors import (
    BadHeaderError,
    BadSubjectError,
    ConnectionClosedError,
    ConnectionDrainingError,
    MaxPayloadError,
    OutboundBufferLimitError,
)
from nats.errors import TimeoutError as AckTimeout
from nats.js.api import Header
from nats.js.errors import APIError, NoStreamResponseError

_SWEEP_SECONDS = 0.05
"""How often unanswered publishes are checked against their deadline (their timeouts are
late by at most this much)."""
_HEADER_LINE = b"NATS/1.0\r\n"
_NO_RESPONDERS = b"NATS/1.0 503"
# nats-py's own rules for a published subject and a header dict (nats.aio.client 2.16).
_SUBJECT_INVALID = re.compile(r"[ \t\r\n]")
_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SEQUENCE = re.compile(rb'"seq":(\d+)')
_VALUE_NEWLINES = str.maketrans({"\r": " ", "\n": " "})


@functools.lru_cache(maxsize=4096)
def _stream_line(stream: str) -> bytes:
    """The header block's last line, naming the stream JetStream must store the message in,
    and the blank line that ends the block."""
    return b"%b: %b\r\n\r\n" % (Header.EXPECTED_STREAM.encode(), stream.encode())


@functools.lru_cache(maxsize=1024)
def _header_name(key: str) -> bytes | None:
    """``key`` as a header name followed by its separator; ``None`` for a blank key."""
    name = key.strip()
    if not name:
        return None
    if not _HEADER_KEY.fullmatch(name):
        raise BadHeaderError(name)
    return b"%b: " % name.encode()


def header_block(metadata: Mapping[str, str], stream: str) -> bytes:
    """The metadata as message headers (as nats-py encodes a header dict: keys and values
    stripped, an empty key skipped, CR/LF in a value turned into spaces, a key with other
    than token characters refused), then the expected stream."""
    parts = [_HEADER_LINE]
    for key, value in metadata.items():
        name = _header_name(key)
        if name is None:
            continue
        value = value.strip()
        if "\r" in value or "\n" in value:
            value = value.translate(_VALUE_NEWLINES)
        parts += (name, value.encode(), b"\r\n")
    parts.append(_stream_line(stream))
    return b"".join(parts)


def acknowledged_sequence(reply: bytes) -> int:
    """The stream sequence of a PubAck; an error reply raises its ``APIError``."""
    if b'"error"' not in reply:
        # A quote inside a JSON string is escaped, so neither pattern can match inside the
        # stream name: the sequence is read without decoding the whole answer.
        found = _SEQUENCE.search(reply)
        if found is not None:
            return int(found[1])
    answer = json.loads(reply)
    if "error" in answer:
        raise APIError.from_error(answer["error"])
    return answer["seq"]


class PublishingClient(Client):
    """nats-py's client plus :meth:`publish_acked`; everything else is nats-py's own."""

    def __init__(self) -> None:
        super().__init__()
        self._ack_sid: int | None = None
        self._ack_prefix = b""
        self._ack_tokens = itertools.count()
        self._acks: dict[bytes, tuple[asyncio.Future[bytes], float]] = {}
        """Publishes awaiting their acknowledgement, by reply token: (future, deadline)."""
        self._ack_sweep: asyncio.TimerHandle | None = None
        self._ack_loop: asyncio.AbstractEventLoop | None = None

    async def listen_for_acks(self) -> None:
        """Subscribe the reply subjects' wildcard (once connected; nats-py re-subscribes it
        after a reconnect)."""
        self._ack_loop = asyncio.get_running_loop()
        inbox = self.new_inbox()
        subscription = await self.subscribe(f"{inbox}.*")
        self._ack_prefix = f"{inbox}.".encode()
        self._ack_sid = subscription._id

    async def publish_acked(
        self, subject: str, payload: bytes, header: bytes, timeout: float
    ) -> int:
        """Publish with ``header`` (a complete header block) and return the stream sequence
        JetStream acknowledged; :class:`nats.errors.TimeoutError` after ``timeout`` seconds
        without an answer."""
        if self.is_closed:
            raise ConnectionClosedError
        if self.is_draining_pubs:
            raise ConnectionDrainingError
        if not subject or _SUBJECT_INVALID.search(subject):
            raise BadSubjectError
        size = len(payload)
        if not self.is_connected and (
            self._max_pending_size <= 0 or size + self._pending_data_size > self._max_pending_size
        ):
            raise OutboundBufferLimitError  # reconnecting, and nothing more may be buffered
        if size > self._max_payload:
            raise MaxPayloadError
        loop = self._ack_loop
        assert loop is not None, "listen_for_acks() first"
        token = b"%x" % next(self._ack_tokens)
        future: asyncio.Future[bytes] = loop.create_future()
        self._acks[token] = (future, loop.time() + timeout)
        if self._ack_sweep is None:
            self._ack_sweep = loop.call_later(_SWEEP_SECONDS, self._sweep_acks)
        header_size = len(header)
        await self._send_command(
            b"HPUB %b %b%b %d %d\r\n%b%b\r\n"
            % (
                subject.encode(),
                self._ack_prefix,
                token,
                header_size,
                header_size + size,
                header,
                payload,
            )
        )
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()
        return acknowledged_sequence(await future)

    def fail_acks(self, error: Exception) -> None:
        """Fail every publish still awaiting its acknowledgement with ``error``."""
        acks, self._acks = self._acks, {}
        if self._ack_sweep is not None:
            self._ack_sweep.cancel()
            self._ack_sweep = None
        for future, _ in acks.values():
            if not future.done():
                future.set_exception(error)

    def _sweep_acks(self) -> None:
        """Fail the publishes past their deadline; forget those their caller gave up on."""
        self._ack_sweep = None
        loop = self._ack_loop
        assert loop is not None
        now = loop.time()
        for token, (future, deadline) in tuple(self._acks.items()):
            if future.done():
                del self._acks[token]
            elif deadline <= now:
                del self._acks[token]
                future.set_exception(AckTimeout())
        if self._acks:
            self._ack_sweep = loop.call_later(_SWEEP_SECONDS, self._sweep_acks)

    async def _process_msg(
        self,
        sid: int,
        subject: bytes,
        reply: bytes,
        data: bytes,
        headers: bytes | None,
    ) -> None:
        """An acknowledgement resolves its publish here, before nats-py builds a ``Msg``."""
        if sid != self._ack_sid:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        entry = self._acks.pop(bytes(subject[len(self._ack_prefix) :]), None)
        if entry is None or entry[0].done():
            return  # timed out, or its caller gave up
        if headers and headers.startswith(_NO_RESPONDERS):
            entry[0].set_exception(NoStreamResponseError())
        else:
            entry[0].set_result(data)
