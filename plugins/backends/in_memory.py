"""The embedded default backend: process-local history and fan-out.

Sequences are numbered per stream (topic base, compared case-insensitively like JetStream's
upper-cased stream names): an unfiltered reader of one event type sees 1, 2, 3, ... with no
holes other than removed history, as on JetStream. Numbering never restarts: wipes and
deletes remove messages, the stream and its counter stay (a JetStream purge).

Retention is kept per encoded topic (a bounded deque each), and over all retained records a
byte budget (``max_bytes``) evicts the oldest first. For paging, every stream also has an
append-only log in sequence order, so a replay batch is a bisect plus a short forward scan
instead of a sort of everything retained; records that retention dropped are skipped and
compacted away lazily. Live subscribers are indexed by their pattern's literal leading
tokens (``aviso_plugins._shared.fanout``) so a publish only looks at the watchers that could
match it.

A publish carrying a message id (``Nats-Msg-Id``) already seen on the same stream within
``duplicate_window`` is dropped and answered with the stored record (``replayed``) when it
is the same notification and that record is still retained, refused otherwise
(:class:`MessageIdReused`, :class:`MessageIdNotRetained`). The remembered ids are bounded
in time, per writer and stream (``duplicate_window_max_keys_per_writer``: a writer only
ever evicts its own) and in total (``duplicate_window_max_keys``: the writer holding the
most gives up its oldest).

Beyond the window, ``idempotency_index`` (default on) keeps each stream's retained keyed
records by message id: a re-send of a notification still retained is answered with it
(``replayed``) however long ago it was stored, and one that says something else is refused.
The index holds exactly the retained records that carry an id (an entry leaves with its
record), so it is bounded by retention (``max_history_per_topic``, ``max_topics``,
``max_bytes``), not by ``duplicate_window_max_keys``.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left, bisect_right
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Annotated, Any, ClassVar

from pydantic import Field

from aviso_plugins import hookimpl
from aviso_plugins._shared.fanout import SubscriberIndex
from aviso_plugins._shared.idempotency import RememberedIds
from aviso_plugins._shared.literals import parse_duration
from aviso_plugins.shapes import read_shape, shape, shape_schema
from aviso_plugins.storage import notification_fingerprint
from aviso_plugins.topics import TopicPattern, decode_token
from aviso_plugins.types import (
    MESSAGE_ID_METADATA,
    BackendContext,
    Batch,
    ConfigurationProblem,
    LiveSink,
    MessageIdNotRetained,
    MessageIdReused,
    StartCursor,
    StorageBackend,
    StoredNotification,
    UnknownStream,
    Writer,
    publishing_writer,
)

logger = logging.getLogger("aviso.in_memory")

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_DUPLICATE_WINDOW = "2m"
"""JetStream's own default window, so that both backends drop the same re-sends."""
DEFAULT_DUPLICATE_WINDOW_MAX_KEYS = 100_000
DEFAULT_DUPLICATE_WINDOW_MAX_KEYS_PER_WRITER = 10_000
"""A tenth of the total: one writer (any anonymous address) cannot fill the total alone."""
RECORD_OVERHEAD_BYTES = 256
"""What one retained record costs beyond its text (objects, index entries), for the budget."""
_MAX_WINDOW_SECONDS = (2**63 - 1) // 1_000_000_000
_STREAM_KEYS = 1_024
"""Topic bases whose stream is remembered (event types are few; past it, forgotten)."""
MAX_EXAMINED_PER_PAGE = 65_536
"""Records one ``fetch_batch`` looks at before returning, matching or not: a sparse filter
over a long stream is read in several pages, each a bounded slice of the event loop."""


Count = Annotated[int, Field(ge=0)]


@shape()
@dataclass(frozen=True, slots=True)
class InMemoryOptions:
    """``notification_backend.in_memory``."""

    max_history_per_topic: Count = 1
    """Notifications retained per topic; the oldest go first."""
    max_topics: Count = 10_000
    """Topics retained; the one whose newest notification is oldest goes first."""
    max_bytes: Count = DEFAULT_MAX_BYTES
    """Bytes all retained notifications may take (``RECORD_OVERHEAD_BYTES`` each included)."""
    duplicate_window: str = DEFAULT_DUPLICATE_WINDOW
    """How long a ``Nats-Msg-Id`` / ``Idempotency-Key`` is remembered to drop a re-send."""
    duplicate_window_max_keys: Count = DEFAULT_DUPLICATE_WINDOW_MAX_KEYS
    duplicate_window_max_keys_per_writer: Count = DEFAULT_DUPLICATE_WINDOW_MAX_KEYS_PER_WRITER
    idempotency_index: bool = True
    """Beyond the duplicate window, a re-sent key is matched against the retained record
    stored under it (so a re-run never stores twice while the notification is retained)."""
    enable_metrics: bool | None = None
    """Accepted for aviso-server compatibility; the host's metrics cover this backend."""


# Limits this backend cannot honour at 0 (aviso-server silently treats 0 as 1).
_POSITIVE = (
    "max_history_per_topic",
    "max_topics",
    "max_bytes",
    "duplicate_window_max_keys",
    "duplicate_window_max_keys_per_writer",
)


def stream_key(topic: str) -> str:
    """The stream a topic (or a stream name) belongs to: its decoded base, in lower case."""
    return decode_token(topic.partition(".")[0]).lower()


def record_bytes(record: StoredNotification) -> int:
    """A record's charge against ``max_bytes``: its UTF-8 text plus a fixed overhead."""
    # One text, measured in C: a third of the cost of measuring each part (every publish
    # pays for it, and again when the record is evicted); concatenated, which for the
    # usual one or two metadata entries costs half of joining a tuple built for it.
    text = record.payload + record.topic
    for key, value in record.metadata.items():
        text += key + value
    return RECORD_OVERHEAD_BYTES + (len(text) if text.isascii() else len(text.encode()))


def duplicate_window_seconds(options: Mapping[str, Any]) -> int:
    """``duplicate_window`` checked as ``notification_backend.jetstream.duplicate_window`` is."""

    def fail(reason: str) -> ValueError:
        return ValueError(f"notification_backend.in_memory.duplicate_window: {reason}")

    try:
        seconds = parse_duration(options.get("duplicate_window", DEFAULT_DUPLICATE_WINDOW))
    except ValueError as exc:
        raise fail(str(exc)) from exc
    if seconds <= 0:
        raise fail("must be greater than 0")
    if seconds > _MAX_WINDOW_SECONDS:
        raise fail("too long (JetStream counts it in int64 nanoseconds)")
    return seconds


_TIME_NS = attrgetter("time_ns")


class _StreamLog:
    """One stream: its records in sequence (and so storage-time) order, dead ones included
    until compaction, the live ones by sequence, and its own sequence counter."""

    __slots__ = ("alive", "keyed", "last_sequence", "pruned", "records", "sequences", "times")

    def __init__(self) -> None:
        self.records: list[StoredNotification] = []
        self.sequences: list[int] = []
        self.times: list[int] = []
        self.alive: dict[int, StoredNotification] = {}
        self.keyed: dict[str, StoredNotification] = {}
        """The retained records carrying a message id, by id (the idempotency index)."""
        self.last_sequence = 0
        self.pruned = 0
        """The highest sequence removed from this stream's history (0: none)."""

    def append(self, record: StoredNotification) -> None:
        self.records.append(record)
        self.sequences.append(record.sequence)
        self.times.append(record.time_ns)

    def start_index(self, start: StartCursor) -> int:
        index = bisect_left(self.sequences, start.from_sequence or 0)
        if start.from_time_ns is not None:
            index = max(index, bisect_left(self.times, start.from_time_ns))
        return index

    def forget(self, record: StoredNotification) -> None:
        self.alive.pop(record.sequence, None)
        message_id = record.metadata.get(MESSAGE_ID_METADATA)
        if message_id is not None and self.keyed.get(message_id) is record:
            del self.keyed[message_id]
        self.pruned = max(self.pruned, record.sequence)
        # Compact once dead entries dominate, keeping the log's size proportional to what
        # is retained (amortised O(1) per removal).
        if len(self.records) > 2 * len(self.alive) + 1024:
            # ``alive`` holds the live records in sequence order (each added once, as it was
            # published), so the compacted log is three C passes over it.
            self.records[:] = self.alive.values()
            self.sequences[:] = self.alive
            self.times[:] = map(_TIME_NS, self.records)


class _Subscriber:
    __slots__ = ("closed", "pattern", "sink")

    def __init__(self, pattern: TopicPattern, sink: LiveSink) -> None:
        self.pattern = pattern
        self.sink = sink
        self.closed = False


class _Subscription:
    __slots__ = ("_backend", "_subscriber")

    def __init__(self, backend: InMemoryBackend, subscriber: _Subscriber) -> None:
        self._backend = backend
        self._subscriber = subscriber

    async def close(self) -> None:
        self._backend._unsubscribe(self._subscriber)


class InMemoryBackend(StorageBackend):
    kind: ClassVar[str] = "in_memory"
    options_schema: ClassVar[Mapping[str, Any]] = shape_schema(InMemoryOptions)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        for key in _POSITIVE:
            if options.get(key) == 0:
                raise ConfigurationProblem(
                    ("notification_backend", cls.kind, key), "must be greater than 0"
                )

    def __init__(self, context: BackendContext) -> None:
        super().__init__(context)
        options = read_shape(InMemoryOptions, context.options)
        # Constructed in code, the limits may be 0; aviso-server reads 0 as 1.
        self._max_history = max(1, options.max_history_per_topic)
        self._max_topics = max(1, options.max_topics)
        self._max_bytes = max(1, options.max_bytes)
        self._ids = RememberedIds(
            float(duplicate_window_seconds(context.options)),
            options.duplicate_window_max_keys,
            options.duplicate_window_max_keys_per_writer,
            context.metrics.message_ids_evicted_early,
        )
        self._key_index = options.idempotency_index
        # Topic -> retained history. Insertion order is refreshed on every publish, so the
        # first entry is always the topic whose newest message is oldest (evicted first).
        self._topics: OrderedDict[str, deque[StoredNotification]] = OrderedDict()
        self._logs: dict[str, _StreamLog] = {}
        # Every retained record in publish order (dead ones skipped lazily): the byte
        # budget evicts from the left.
        # Records alone, not (log, record) pairs: an object less per retained record; the
        # log is looked up (a cached stream key) only when the budget evicts.
        self._by_age: deque[StoredNotification] = deque()
        self._retained = 0
        self._bytes = 0
        self._last_time_ns = 0
        self._subscribers: SubscriberIndex[_Subscriber] = SubscriberIndex()
        self._subscribed = 0
        """Open subscriptions: with none, a publish matches its topic against nothing."""
        self._stream_keys: dict[str, str] = {}
        """:func:`stream_key` by topic base as published (bounded: ``_STREAM_KEYS``)."""

    @property
    def live_buffer_size(self) -> int:
        return min(max(self._max_history * self._max_topics, 1024), 65536)

    @property
    def retained_bytes(self) -> int:
        """What the retained records charge against ``max_bytes``."""
        return self._bytes

    def _stream_key(self, topic: str) -> str:
        base = topic.partition(".")[0]
        key = self._stream_keys.get(base)
        if key is None:
            if len(self._stream_keys) >= _STREAM_KEYS:
                self._stream_keys.clear()
            key = self._stream_keys[base] = stream_key(base)
        return key

    async def publish_from(
        self, writer: Writer, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> StoredNotification:
        # The writer counts only for a message id: without one, and unless publish is
        # overridden (by a subclass or on the instance), the record is stored straight away,
        # without a second coroutine and the context variable naming the writer.
        if (
            MESSAGE_ID_METADATA in metadata
            or getattr(self.publish, "__func__", None) is not InMemoryBackend.publish
        ):
            return await super().publish_from(writer, topic, payload, metadata)
        return self._store(topic, payload, metadata)

    async def publish(
        self, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> StoredNotification:
        return self._store(topic, payload, metadata)

    def _store(self, topic: str, payload: str, metadata: Mapping[str, str]) -> StoredNotification:
        key = self._stream_key(topic)
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = _StreamLog()
        message_id = metadata.get(MESSAGE_ID_METADATA)
        if message_id is not None:
            now = time.monotonic()
            fingerprint = notification_fingerprint(topic, payload, metadata)
            seen = self._ids.get(key, message_id, now)
            if seen is not None:
                if seen.fingerprint != fingerprint:
                    raise MessageIdReused(message_id)
                stored = log.alive.get(seen.sequence)
                if stored is None:
                    # Replaced, deleted or wiped: the re-send is not stored again (as on
                    # JetStream, whose window outlives the message), nor acknowledged.
                    raise MessageIdNotRetained(message_id)
                # The re-send is dropped (not stored, not fanned out).
                return replace(stored, rendered=None, replayed=True)
            if self._key_index:
                stored = log.keyed.get(message_id)
                if stored is not None:
                    # Past the window, still retained: the same notification is answered
                    # with the stored record, another one refused, as inside the window.
                    if notification_fingerprint(stored.topic, stored.payload, stored.metadata) != (
                        fingerprint
                    ):
                        raise MessageIdReused(message_id)
                    return replace(stored, rendered=None, replayed=True)
        log.last_sequence += 1
        # Storage times never go backwards (even if the wall clock does) so that a stream's
        # log stays sorted by time as well as by sequence.
        self._last_time_ns = max(time.time_ns(), self._last_time_ns + 1)
        record = StoredNotification(log.last_sequence, topic, payload, self._last_time_ns, metadata)
        if message_id is not None:
            self._ids.remember(
                key, message_id, publishing_writer(), record.sequence, fingerprint, now
            )
        topics = self._topics
        history = topics.get(topic)
        if history is None:
            if len(topics) >= self._max_topics:
                self._forget(topics.popitem(last=False)[1])
            history = topics[topic] = deque()
        else:
            topics.move_to_end(topic)
        if len(history) >= self._max_history:
            self._forget((history.popleft(),))
        history.append(record)
        log.alive[record.sequence] = record
        if message_id is not None and self._key_index:
            log.keyed[message_id] = record
        log.append(record)
        self._by_age.append(record)
        self._retained += 1
        self._bytes += record_bytes(record)
        if self._bytes > self._max_bytes:
            self._enforce_budget(record)
        if self._subscribed:
            self._fan_out(record)
        return record

    def _enforce_budget(self, newest: StoredNotification) -> None:
        """Evict the oldest records until the budget holds; the newest is always kept (it
        has just been acknowledged as readable)."""
        by_age = self._by_age
        while self._bytes > self._max_bytes and by_age:
            record = by_age[0]
            if record is newest:
                return
            by_age.popleft()
            if not self._retains(record):
                continue  # already removed by other retention
            history = self._topics[record.topic]
            # The oldest retained record is the oldest of its topic too.
            history.popleft()
            if not history:
                del self._topics[record.topic]
            self._forget((record,))

    def _forget(self, records: Iterable[StoredNotification]) -> None:
        topic, log = "", None
        by_age = self._by_age
        for record in records:
            if record.topic != topic or log is None:
                # A topic's records (what most calls remove) share one stream log.
                topic = record.topic
                log = self._logs[self._stream_key(topic)]
            if log.alive.get(record.sequence) is not record:
                continue
            log.forget(record)
            self._retained -= 1
            self._bytes -= record_bytes(record)
            if by_age and by_age[0] is record:
                # The oldest record is the likeliest to go (its topic is the least recently
                # published): leaving at once, it is not left for a compaction to walk.
                by_age.popleft()
        if len(by_age) > 2 * self._retained + 1024:
            self._by_age = deque(record for record in self._by_age if self._retains(record))

    def _retains(self, record: StoredNotification) -> bool:
        """Whether ``record`` is still retained (not removed by any retention or delete)."""
        log = self._logs[self._stream_key(record.topic)]
        return log.alive.get(record.sequence) is record

    def _fan_out(self, record: StoredNotification) -> None:
        for subscriber in self._subscribers.matching(record.topic):
            if not subscriber.closed:
                try:
                    subscriber.sink.deliver(record)
                except Exception:
                    # The record is stored: one broken watcher must not fail the
                    # publisher's notify, nor starve the other watchers.
                    logger.exception("live delivery to a watcher failed")

    async def fetch_batch(self, pattern: TopicPattern, start: StartCursor, limit: int) -> Batch:
        if pattern.base is None:
            raise ValueError("history is read per stream: the pattern's base must be literal")
        log = self._logs.get(pattern.base.lower())
        if log is None:
            return Batch(messages=[], has_more=False, next_sequence=None)
        page: list[StoredNotification] = []
        has_more = False
        alive = log.alive
        # Records of one topic repeat throughout a log, and decoding a topic to match it is
        # most of a page's cost, so each topic is matched once per page. The cache holds at
        # most the retained topics (dead records are skipped before matching) and lives
        # only as long as this call.
        matched: dict[str, bool] = {}
        records = log.records
        first = log.start_index(start)
        end = min(len(records), first + MAX_EXAMINED_PER_PAGE)
        # Indexing rather than slicing: a slice would copy the rest of the log per page.
        for index in range(first, end):
            record = records[index]
            if record.sequence not in alive:
                continue
            topic = record.topic
            accepted = matched.get(topic)
            if accepted is None:
                accepted = matched[topic] = pattern.matches(topic)
            if not accepted:
                continue
            if len(page) == limit:
                has_more = True
                break
            page.append(record)
        else:
            if end < len(records):
                # Stopped at the examination bound: resume after the last record looked at.
                return Batch(page, has_more=True, next_sequence=records[end - 1].sequence + 1)
        return Batch(
            messages=page,
            has_more=has_more,
            next_sequence=page[-1].sequence + 1 if page else None,
        )

    def _logs_of(self, pattern: TopicPattern) -> list[_StreamLog]:
        if pattern.base is None:
            return list(self._logs.values())
        log = self._logs.get(pattern.base.lower())
        return [log] if log is not None else []

    async def history_bound(self, pattern: TopicPattern) -> int:
        # The last number the stream allocated, whatever deletes or eviction removed since.
        return max((log.last_sequence for log in self._logs_of(pattern)), default=0)

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
        self._subscribed += 1
        return _Subscription(self, subscriber)

    def _unsubscribe(self, subscriber: _Subscriber) -> None:
        if not subscriber.closed:
            self._subscribed -= 1
        subscriber.closed = True
        self._subscribers.discard(subscriber.pattern, subscriber)

    async def wipe_stream(self, name: str) -> None:
        key = name.lower()
        if key not in self._logs:
            raise UnknownStream(name)
        for topic in [topic for topic in self._topics if stream_key(topic) == key]:
            self._forget(self._topics.pop(topic))

    async def wipe_all(self) -> None:
        for history in self._topics.values():
            self._forget(history)
        self._topics.clear()

    async def pruned_through(self, stream: str) -> int:
        log = self._logs.get(stream.lower())
        return log.pruned if log is not None else 0

    async def delete_message(self, stream: str, sequence: int) -> bool:
        log = self._logs.get(stream.lower())
        record = log.alive.get(sequence) if log is not None else None
        if record is None:
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
