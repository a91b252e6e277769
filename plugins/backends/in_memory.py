"""The embedded default backend: process-local history and fan-out.

Retention is kept per encoded topic (a bounded deque each) under one process-wide sequence
counter. For paging, every stream (first topic token) also has an append-only log in
sequence order, so a replay batch is a bisect plus a short forward scan instead of a sort
of everything retained; records that retention dropped are skipped and compacted away
lazily. Live subscribers are indexed by their pattern's literal leading tokens
(``aviso_plugins.fanout``) so a publish only looks at the watchers that could match it.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left, bisect_right
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from aviso_plugins import hookimpl
from aviso_plugins.fanout import SubscriberIndex
from aviso_plugins.topics import TopicPattern, decode_token, encode_token
from aviso_plugins.types import (
    BackendContext,
    Batch,
    LiveSink,
    StartCursor,
    StorageBackend,
    StoredNotification,
)

logger = logging.getLogger("aviso.in_memory")

_COUNT = {"type": "integer", "minimum": 0}


class _StreamLog:
    """Records of one stream in sequence (and so storage-time) order, dead ones included."""

    __slots__ = ("records", "sequences", "times")

    def __init__(self) -> None:
        self.records: list[StoredNotification] = []
        self.sequences: list[int] = []
        self.times: list[int] = []

    def append(self, record: StoredNotification) -> None:
        self.records.append(record)
        self.sequences.append(record.sequence)
        self.times.append(record.time_ns)

    def start_index(self, start: StartCursor) -> int:
        index = bisect_left(self.sequences, start.from_sequence or 0)
        if start.from_time_ns is not None:
            index = max(index, bisect_left(self.times, start.from_time_ns))
        return index

    def keep_only(self, alive: Mapping[int, StoredNotification]) -> None:
        records = [record for record in self.records if record.sequence in alive]
        self.records.clear()
        self.sequences.clear()
        self.times.clear()
        for record in records:
            self.append(record)


class _Subscriber:
    __slots__ = ("closed", "pattern", "sink")

    def __init__(self, pattern: TopicPattern, sink: LiveSink) -> None:
        self.pattern = pattern
        self.sink = sink
        self.closed = False


class _Subscription:
    def __init__(self, backend: InMemoryBackend, subscriber: _Subscriber) -> None:
        self._backend = backend
        self._subscriber = subscriber

    async def close(self) -> None:
        self._backend._unsubscribe(self._subscriber)


class InMemoryBackend(StorageBackend):
    kind: ClassVar[str] = "in_memory"
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "properties": {
            "max_history_per_topic": _COUNT,
            "max_topics": _COUNT,
            "enable_metrics": {"type": "boolean"},
        },
    }

    def __init__(self, context: BackendContext) -> None:
        super().__init__(context)
        self._max_history = max(1, int(context.options.get("max_history_per_topic", 1)))
        self._max_topics = max(1, int(context.options.get("max_topics", 10000)))
        # Topic -> retained history. Insertion order is refreshed on every publish, so the
        # first entry is always the topic whose newest message is oldest (evicted first).
        self._topics: OrderedDict[str, deque[StoredNotification]] = OrderedDict()
        self._alive: dict[int, StoredNotification] = {}
        self._logs: dict[str, _StreamLog] = {}
        self._pruned: dict[str, int] = {}
        self._sequence = 0
        self._last_time_ns = 0
        self._subscribers: SubscriberIndex[_Subscriber] = SubscriberIndex()

    @property
    def live_buffer_size(self) -> int:
        return min(max(self._max_history * self._max_topics, 1024), 65536)

    async def publish(
        self, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> StoredNotification:
        self._sequence += 1
        # Storage times never go backwards (even if the wall clock does) so that a stream's
        # log stays sorted by time as well as by sequence.
        self._last_time_ns = max(time.time_ns(), self._last_time_ns + 1)
        record = StoredNotification(self._sequence, topic, payload, self._last_time_ns, metadata)
        history = self._topics.pop(topic, None)
        if history is None:
            if len(self._topics) >= self._max_topics:
                self._forget(self._topics.popitem(last=False)[1])
            history = deque()
        if len(history) >= self._max_history:
            self._forget((history.popleft(),))
        history.append(record)
        self._topics[topic] = history
        self._alive[record.sequence] = record
        base = decode_token(topic.split(".", 1)[0])
        self._log(base).append(record)
        self._fan_out(record)
        return record

    def _log(self, base: str) -> _StreamLog:
        log = self._logs.get(base)
        if log is None:
            log = self._logs[base] = _StreamLog()
        return log

    def _forget(self, records: Iterable[StoredNotification]) -> None:
        for record in records:
            self._alive.pop(record.sequence, None)
            base = decode_token(record.topic.split(".", 1)[0]).lower()
            self._pruned[base] = max(self._pruned.get(base, 0), record.sequence)
        # Compact once dead entries dominate, keeping the logs' size proportional to what
        # is retained (amortised O(1) per publish).
        if sum(len(log.records) for log in self._logs.values()) > 2 * len(self._alive) + 1024:
            for log in self._logs.values():
                log.keep_only(self._alive)

    def _fan_out(self, record: StoredNotification) -> None:
        for subscriber in self._subscribers.candidates(record.topic):
            if not subscriber.closed and subscriber.pattern.matches(record.topic):
                try:
                    subscriber.sink.deliver(record)
                except Exception:
                    # The record is stored: one broken watcher must not fail the
                    # publisher's notify, nor starve the other watchers.
                    logger.exception("live delivery to a watcher failed")

    async def fetch_batch(self, pattern: TopicPattern, start: StartCursor, limit: int) -> Batch:
        logs = self._logs.values() if pattern.base is None else (self._logs.get(pattern.base),)
        page: list[StoredNotification] = []
        has_more = False
        alive = self._alive
        # Records of one topic repeat throughout a log, and decoding a topic to match it is
        # most of a page's cost, so each topic is matched once per page. The cache holds at
        # most the retained topics (dead records are skipped before matching) and lives
        # only as long as this call.
        matched: dict[str, bool] = {}
        for log in logs:
            if log is None:
                continue
            records = log.records
            # Each log contributes up to ``limit`` records of its own: when several logs are
            # merged, the page is the first ``limit`` of their union, which can interleave.
            taken = 0
            # Indexing rather than slicing: a slice would copy the rest of the log per page.
            for index in range(log.start_index(start), len(records)):
                record = records[index]
                if record.sequence not in alive:
                    continue
                topic = record.topic
                accepted = matched.get(topic)
                if accepted is None:
                    accepted = matched[topic] = pattern.matches(topic)
                if not accepted:
                    continue
                if taken == limit:
                    has_more = True
                    break
                page.append(record)
                taken += 1
        if pattern.base is None:
            page.sort(key=lambda record: record.sequence)
            has_more = has_more or len(page) > limit
            page = page[:limit]
        return Batch(
            messages=page,
            has_more=has_more,
            next_sequence=page[-1].sequence + 1 if page else None,
        )

    def _logs_of(self, pattern: TopicPattern) -> list[_StreamLog]:
        if pattern.base is None:
            return list(self._logs.values())
        log = self._logs.get(pattern.base)
        return [log] if log is not None else []

    async def history_bound(self, pattern: TopicPattern) -> int:
        # A log ends with its stream's newest record; compaction may have dropped dead
        # records above what is left, but nothing replayable.
        logs = self._logs_of(pattern)
        return max((log.sequences[-1] for log in logs if log.sequences), default=0)

    async def first_sequence_after(self, pattern: TopicPattern, time_ns: int) -> int | None:
        # Answered for the whole stream: a bisect over its storage times, never a scan.
        firsts = []
        for log in self._logs_of(pattern):
            index = bisect_right(log.times, time_ns)
            if index < len(log.sequences):
                firsts.append(log.sequences[index])
        return min(firsts, default=None)

    async def subscribe(self, pattern: TopicPattern, sink: LiveSink) -> _Subscription:
        subscriber = _Subscriber(pattern, sink)
        self._subscribers.add(pattern, subscriber)
        return _Subscription(self, subscriber)

    def _unsubscribe(self, subscriber: _Subscriber) -> None:
        subscriber.closed = True
        self._subscribers.discard(subscriber.pattern, subscriber)

    async def wipe_stream(self, name: str) -> None:
        prefix = encode_token(name.lower()) + "."
        for topic in [topic for topic in self._topics if topic.lower().startswith(prefix)]:
            self._forget(self._topics.pop(topic))

    async def wipe_all(self) -> None:
        self._forget(tuple(self._alive.values()))
        self._topics.clear()
        self._logs.clear()

    async def pruned_through(self, stream: str) -> int:
        return self._pruned.get(stream.lower(), 0)

    async def delete_message(self, stream: str, sequence: int) -> bool:
        key = encode_token(stream.lower())
        record = self._alive.get(sequence)
        if record is None:
            return False
        topic = record.topic.lower()
        if topic != key and not topic.startswith(key + "."):
            return False
        history = self._topics[record.topic]
        history.remove(record)
        self._forget((record,))
        if not history:
            # An emptied topic counts as the newest, so it is the last to be evicted.
            self._topics.move_to_end(record.topic)
        return True


@hookimpl
def aviso_storage_backends() -> list[type[StorageBackend]]:
    return [InMemoryBackend]
