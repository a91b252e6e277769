"""History pages read through ephemeral pull consumers.

A consumer is positioned once (by sequence or start time) and then kept for the next page
of the same replay, keyed by its filter and the sequence it will read next, so a replay of
many pages costs one consumer instead of one per page.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime

from nats.js import JetStreamContext, api

from aviso_builtins.backends.jetstream.messages import to_record
from aviso_plugins.types import StartCursor, StoredNotification

logger = logging.getLogger("aviso.jetstream")

FETCH_TIMEOUT = 5.0
KEPT_READERS = 64
READER_IDLE_SECONDS = 60.0


@dataclass
class _Reader:
    stream: str
    subscription: JetStreamContext.PullSubscription
    name: str
    pending: int


@dataclass(frozen=True, slots=True)
class Page:
    records: list[StoredNotification]
    """Every record examined, matching the pattern or not."""
    more: bool


class HistoryReaders:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._kept: OrderedDict[tuple[str, int], _Reader] = OrderedDict()

    async def read(self, stream: str, subject: str, start: StartCursor, limit: int) -> Page:
        reader = None
        if start.from_sequence:
            reader = self._kept.pop((subject, start.from_sequence), None)
        if reader is None:
            reader = await self._open(stream, subject, start)
        if reader.pending <= 0:
            await self._close(reader)
            return Page([], more=False)
        try:
            messages = await reader.subscription.fetch(min(limit, reader.pending), FETCH_TIMEOUT)
        except TimeoutError:
            messages = []  # what was pending has gone (deleted or purged meanwhile)
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
            config.opt_start_time = datetime.fromtimestamp(start.from_time_ns / 1e9, UTC)
        elif start.from_sequence:
            config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = start.from_sequence
        else:
            config.deliver_policy = api.DeliverPolicy.ALL
        subscription = await self._js.pull_subscribe(subject, stream=stream, config=config)
        info = await subscription.consumer_info()
        return _Reader(stream, subscription, info.name, info.num_pending)

    def _keep(self, subject: str, next_sequence: int, reader: _Reader) -> None:
        self._kept[(subject, next_sequence)] = reader
        while len(self._kept) > KEPT_READERS:
            _, oldest = self._kept.popitem(last=False)
            asyncio.get_running_loop().create_task(self._close(oldest))

    async def _close(self, reader: _Reader) -> None:
        try:
            await reader.subscription.unsubscribe()
            await self._js.delete_consumer(reader.stream, reader.name)
        except Exception as exc:  # it expires on its own after READER_IDLE_SECONDS
            logger.debug("closing replay consumer %s failed: %s", reader.name, exc)

    async def close_all(self) -> None:
        while self._kept:
            await self._close(self._kept.popitem()[1])
