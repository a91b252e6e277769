"""History pages read through ephemeral pull consumers.

A consumer is positioned once (by sequence or start time) and then kept for the next page
of the same replay, keyed by its filter and the sequence it will read next, so a replay of
many pages costs one consumer instead of one per page.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api
from nats.js.errors import APIError
from nats.nuid import NUID

from aviso_builtins.backends.jetstream.messages import to_record
from aviso_plugins.types import StartCursor, StoredNotification

logger = logging.getLogger("aviso.jetstream")

FETCH_TIMEOUT = 5.0
KEPT_READERS = 64
READER_IDLE_SECONDS = 60.0
STATUS_HEADER = "Status"
LAST_NATS_TIME_NS = 2**63 - 1
"""nats-server keeps times as int64 nanoseconds (up to 2262): a start time past that wraps
around and delivers the whole stream, yet no message can be stored after it."""


class ReplayPageTimeout(RuntimeError):
    """A replay consumer did not answer a page request at all."""


class _Reader:
    """An ephemeral pull consumer and the inbox its pages arrive on.

    Pages are requested with the raw ``CONSUMER.MSG.NEXT`` API and collected by one
    subscription callback: nats-py's ``fetch`` awaits every message with its own timeout
    task, which made it the largest cost of a replay.
    """

    def __init__(self, client: Client, stream: str, name: str, pending: int) -> None:
        self._nc = client
        self.stream = stream
        self.name = name
        self.pending = pending
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"
        self._inbox = self._nc.new_inbox()
        self._subscription: Subscription | None = None
        self._page: list[Msg] = []
        self._wanted = 0
        self._filled: asyncio.Future[None] | None = None

    async def listen(self) -> None:
        self._subscription = await self._nc.subscribe(self._inbox, cb=self._on_message)

    async def _on_message(self, msg: Msg) -> None:
        if msg.headers and msg.headers.get(STATUS_HEADER):
            self._finish()  # "no messages" / "request timeout": the page ends here
            return
        self._page.append(msg)
        if len(self._page) >= self._wanted:
            self._finish()

    def _finish(self) -> None:
        if self._filled is not None and not self._filled.done():
            self._filled.set_result(None)

    async def fetch(self, count: int) -> list[Msg]:
        self._page = []
        self._wanted = count
        self._filled = asyncio.get_running_loop().create_future()
        request = json.dumps({"batch": count, "no_wait": True}).encode()
        await self._nc.publish(self._next, request, reply=self._inbox)
        try:
            await asyncio.wait_for(self._filled, FETCH_TIMEOUT)
        except TimeoutError:
            if not self._page:
                # Not even a "no messages" status: the server did not answer (connection
                # lost or consumer gone), which must not read as the end of history.
                raise ReplayPageTimeout(f"replay page from {self.name} got no answer") from None
            logger.warning(
                "replay page from %s timed out after %d messages", self.name, len(self._page)
            )
        return self._page

    async def unsubscribe(self) -> None:
        if self._subscription is not None:
            await self._subscription.unsubscribe()


@dataclass(frozen=True, slots=True)
class Page:
    records: list[StoredNotification]
    """Every record examined, matching the pattern or not."""
    more: bool


class HistoryReaders:
    def __init__(self, client: Client, js: JetStreamContext) -> None:
        self._client = client
        self._js = js
        self._names = NUID()
        self._kept: OrderedDict[tuple[str, int], _Reader] = OrderedDict()

    async def read(self, stream: str, subject: str, start: StartCursor, limit: int) -> Page:
        if start.from_time_ns is not None and start.from_time_ns > LAST_NATS_TIME_NS:
            return Page([], more=False)
        reader = None
        if start.from_sequence:
            reader = self._kept.pop((subject, start.from_sequence), None)
        if reader is None:
            reader = await self._open(stream, subject, start)
        if reader.pending <= 0:
            await self._close(reader)
            return Page([], more=False)
        # Ask for a full page of whatever is stored now (not just what was pending when the
        # last page was read), so a replay catches up with a producer and then ends.
        messages = await reader.fetch(limit)
        records = [to_record(message) for message in messages]
        reader.pending = messages[-1].metadata.num_pending if messages else 0
        if reader.pending > 0 and records:
            self._keep(subject, records[-1].sequence + 1, reader)
        else:
            await self._close(reader)
        return Page(records, more=reader.pending > 0 and bool(records))

    async def _open(self, stream: str, subject: str, start: StartCursor) -> _Reader:
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            replay_policy=api.ReplayPolicy.INSTANT,
            inactive_threshold=READER_IDLE_SECONDS,
            mem_storage=True,
        )
        if start.from_time_ns is not None:
            config.deliver_policy = api.DeliverPolicy.BY_START_TIME
            # Nothing is stored before 1970, and nats-server misreads earlier start times
            # (it delivered nothing for year 1500).
            config.opt_start_time = datetime.fromtimestamp(max(start.from_time_ns, 0) / 1e9, UTC)
        elif start.from_sequence:
            config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = start.from_sequence
        else:
            config.deliver_policy = api.DeliverPolicy.ALL
        config.name = self._names.next().decode()
        config.filter_subject = subject
        info = await self._js.add_consumer(stream, config)
        reader = _Reader(self._client, stream, info.name, info.num_pending or 0)
        await reader.listen()
        return reader

    async def first_after(self, stream: str, time_ns: int) -> int | None:
        """The first sequence of ``stream`` stored strictly after ``time_ns``.

        A consumer positioned by start time is the server's own search (no message is
        read): right after creation it reports the sequence before its start as delivered,
        and how many messages follow. Its start time is sent with nanosecond precision,
        which nats-py's configuration type (microseconds) cannot carry.
        """
        start_ns = time_ns + 1
        if start_ns > LAST_NATS_TIME_NS:
            return None
        config = api.ConsumerConfig(
            name=self._names.next().decode(),
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.BY_START_TIME,
            inactive_threshold=READER_IDLE_SECONDS,
            mem_storage=True,
        )
        body = config.as_dict()
        body["opt_start_time"] = _nanosecond_rfc3339(max(start_ns, 0))
        request = json.dumps({"stream_name": stream, "config": body}).encode()
        answer = await self._client.request(
            f"{api.DEFAULT_PREFIX}.CONSUMER.CREATE.{stream}.{config.name}", request, FETCH_TIMEOUT
        )
        response = json.loads(answer.data)
        if "error" in response:
            raise APIError.from_error(response["error"])
        info = api.ConsumerInfo.from_response(response)
        try:
            await self._js.delete_consumer(stream, info.name)
        except Exception as exc:  # it expires on its own after READER_IDLE_SECONDS
            logger.debug("deleting time-lookup consumer %s failed: %s", info.name, exc)
        if not info.num_pending or info.delivered is None:
            return None
        return (info.delivered.stream_seq or 0) + 1

    def _keep(self, subject: str, next_sequence: int, reader: _Reader) -> None:
        self._kept[(subject, next_sequence)] = reader
        while len(self._kept) > KEPT_READERS:
            _, oldest = self._kept.popitem(last=False)
            asyncio.get_running_loop().create_task(self._close(oldest))

    async def _close(self, reader: _Reader) -> None:
        try:
            await reader.unsubscribe()
            await self._js.delete_consumer(reader.stream, reader.name)
        except Exception as exc:  # it expires on its own after READER_IDLE_SECONDS
            logger.debug("closing replay consumer %s failed: %s", reader.name, exc)

    def forget_all(self) -> None:
        """Drop every kept consumer without asking the server (after a reconnect they may
        be gone; if not, they expire after ``READER_IDLE_SECONDS``)."""
        self._kept.clear()

    async def close_all(self) -> None:
        while self._kept:
            await self._close(self._kept.popitem()[1])


def _nanosecond_rfc3339(time_ns: int) -> str:
    seconds, nanoseconds = divmod(time_ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{nanoseconds:09d}Z"
