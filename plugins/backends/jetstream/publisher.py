"""A nats-py client with a lean JetStream publish: what ``js.publish`` does, at a fraction of
its CPU cost per message, on nats-py's public API only.

nats-py's request path costs more per publish than the notify handler around it: a reply
subject and a response future per request, ``asyncio.wait_for`` (a timer and a wrapper
future), and a ``PubAck`` dataclass decoded from JSON. Here every publish carries a reply
subject under one wildcard inbox subscription (plain ``publish`` with ``reply=``), its
acknowledgement resolves a plain future found by the subject's last token, waiting publishes
are failed on time by one periodic sweep, and the sequence is read from the PubAck without
decoding it. The checks and errors are those of ``js.publish``: the acknowledgement is
JetStream's PubAck, an error reply raises its ``APIError``, no responders raise
``NoStreamResponseError``.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import re
from collections.abc import Mapping
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import BadSubjectError
from nats.errors import TimeoutError as AckTimeout
from nats.js.api import Header
from nats.js.errors import APIError, NoStreamResponseError

_SWEEP_SECONDS = 0.05
"""How often unanswered publishes are checked against their deadline (their timeouts are
late by at most this much)."""
_NO_RESPONDERS = "503"
_STATUS = Header.STATUS.value
_EXPECTED_STREAM = Header.EXPECTED_STREAM.value
# What a header and a published subject must be whichever nats-py release encodes them
# (older ones send a CR/LF in a header value as it is, and do not check a subject).
_SUBJECT_INVALID = re.compile(r"[ \t\r\n]")
_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SEQUENCE = re.compile(rb'"seq":(\d+)')
_VALUE_NEWLINES = str.maketrans({"\r": " ", "\n": " "})


@functools.lru_cache(maxsize=1024)
def _header_name(key: str) -> str | None:
    """``key`` as a header name; ``None`` for a blank key."""
    name = key.strip()
    if not name:
        return None
    if not _HEADER_KEY.fullmatch(name):
        raise ValueError(f"not a valid message header name: {name!r}")
    return name


def message_headers(metadata: Mapping[str, str], stream: str) -> dict[str, str]:
    """:func:`sent_metadata`, then the stream JetStream must store the message in."""
    headers = sent_metadata(metadata)
    headers[_EXPECTED_STREAM] = stream
    return headers


def sent_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """The metadata as message headers carry it: keys and values stripped, an empty key
    skipped, CR/LF in a value turned into spaces, a key with other than token characters
    refused with ``ValueError``."""
    headers: dict[str, str] = {}
    for key, value in metadata.items():
        name = _header_name(key)
        if name is None:
            continue
        value = value.strip()
        if "\r" in value or "\n" in value:
            value = value.translate(_VALUE_NEWLINES)
        headers[name] = value
    return headers


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
    sequence: int = answer["seq"]
    return sequence


_DUPLICATE = re.compile(rb'"duplicate":\s*true')


def dropped_as_duplicate(reply: bytes) -> bool:
    """Whether a PubAck says JetStream dropped the message as a re-send of its message id
    (nats-server writes ``"duplicate": true``, with a space, into otherwise compact JSON)."""
    return _DUPLICATE.search(reply) is not None


class PublishingClient(Client):
    """nats-py's client plus :meth:`publish_acked`, and requests (those of its JetStream
    context too) that :meth:`fail_requests` ends at once; everything else is nats-py's."""

    def __init__(self) -> None:
        super().__init__()
        self._ack_prefix = ""
        self._ack_tokens = itertools.count()
        self._acks: dict[str, tuple[asyncio.Future[bytes], float]] = {}
        """Publishes awaiting their acknowledgement, by reply token: (future, deadline)."""
        self._ack_sweep: asyncio.TimerHandle | None = None
        self._ack_loop: asyncio.AbstractEventLoop | None = None
        self._lost: asyncio.Future[None] | None = None
        """Failed by :meth:`fail_requests`: the requests still waiting end with its error."""

    async def listen_for_acks(self) -> None:
        """Subscribe the reply subjects' wildcard (once connected; nats-py re-subscribes it
        after a reconnect)."""
        self._ack_loop = asyncio.get_running_loop()
        inbox = self.new_inbox()
        self._ack_prefix = f"{inbox}."
        await self.subscribe(f"{inbox}.*", cb=self._on_ack)

    async def publish_acked(
        self, subject: str, payload: bytes, headers: dict[str, str], timeout: float
    ) -> int:
        """Publish with ``headers`` (see :func:`message_headers`) and return the stream
        sequence JetStream acknowledged; :class:`nats.errors.TimeoutError` after
        ``timeout`` seconds without an answer."""
        return acknowledged_sequence(await self.publish_for_ack(subject, payload, headers, timeout))

    async def publish_for_ack(
        self, subject: str, payload: bytes, headers: dict[str, str], timeout: float
    ) -> bytes:
        """:meth:`publish_acked`, answering the PubAck itself (read it with
        :func:`acknowledged_sequence` and :func:`dropped_as_duplicate`)."""
        if not subject or _SUBJECT_INVALID.search(subject):
            raise BadSubjectError
        loop = self._ack_loop
        assert loop is not None, "listen_for_acks() first"
        token = f"{next(self._ack_tokens):x}"
        future: asyncio.Future[bytes] = loop.create_future()
        self._acks[token] = (future, loop.time() + timeout)
        try:
            await self.publish(subject, payload, self._ack_prefix + token, headers)
        except BaseException:
            self._acks.pop(token, None)
            raise
        if self._ack_sweep is None:
            self._ack_sweep = loop.call_later(_SWEEP_SECONDS, self._sweep_acks)
        return await future

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        timeout: float = 0.5,
        old_style: bool = False,
        headers: dict[str, Any] | None = None,
    ) -> Msg:
        """nats-py's request, ended by :meth:`fail_requests` (nats-py leaves the requests of
        a closed client waiting for their timeout although no answer can come)."""
        if self._lost is None or self._lost.done():
            self._lost = asyncio.get_running_loop().create_future()
        lost = self._lost
        answer = asyncio.ensure_future(
            super().request(subject, payload, timeout, old_style, headers)
        )
        try:
            await asyncio.wait((answer, lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not answer.done():
                answer.cancel()
        if not answer.done() or answer.cancelled():
            lost.result()  # raises the error it was failed with
        return answer.result()

    def fail_requests(self, error: Exception) -> None:
        """Fail every request and every publish still awaiting its answer with ``error``."""
        if self._lost is not None and not self._lost.done():
            self._lost.set_exception(error)
            self._lost.exception()  # retrieved: no request may be waiting on it
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

    async def _on_ack(self, msg: Msg) -> None:
        entry = self._acks.pop(msg.subject[len(self._ack_prefix) :], None)
        if entry is None or entry[0].done():
            return  # timed out, or its caller gave up
        if msg.headers and msg.headers.get(_STATUS) == _NO_RESPONDERS:
            entry[0].set_exception(NoStreamResponseError())
        else:
            entry[0].set_result(msg.data)
