"""Aggregate watch: counts of matching notifications grouped by identifier fields.

The stream is a watch whose notifications are counted instead of delivered. It reuses the
watch machinery of :class:`EventStream` (history paging, the live queue and the replay-to-
live seam, heartbeats, maximum duration, shutdown, backpressure) and replaces only what is
emitted: one ``aggregate`` snapshot once history is counted, then an ``aggregate`` update
at most once per debounce window, and none when no count changed.

What is counted: distinct notifications, identified by their stored identifier (the
CloudEvent's ``data.identifier``). A re-publish of an identifier already counted changes
nothing, whether the backend kept both messages or only the newest one per subject, so the
counts read the same on every backend ("how many steps of this forecast have arrived").
"""

from __future__ import annotations

import asyncio
import math
from bisect import insort
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from aviso_host.auth.reauthorise import Reauthorisation
from aviso_host.cloudevents import CloudEventRenderer
from aviso_host.config.settings import WatchSettings
from aviso_host.cursors import now_whole_seconds
from aviso_host.encoding import dumps
from aviso_host.filtering import StreamFilter, stored_identifier
from aviso_host.logs import echoed
from aviso_host.metrics import SseConnection
from aviso_host.schemas import EventSchema
from aviso_host.streaming import frames
from aviso_host.streaming.control import LiveQueue, StreamControl, StreamRegistry
from aviso_host.streaming.stream import EventStream, ReplayOutcome, ReplayStart
from aviso_plugins.topics import TopicDecodeError, decode_token
from aviso_plugins.types import InvalidValue, StorageBackend, StoredNotification, Subscription

AGGREGATE = b"aggregate"
DEFAULT_DEBOUNCE_MS = 1000
MAX_DEBOUNCE_MS = 60_000
GROUP_LIMIT_REACHED = frames.GROUP_LIMIT_REACHED

GroupKey = tuple[str | None, ...]


class GroupLimitReached(Exception):
    """Counting a notification would create one group more than the stream may hold."""


def _value_order(value: str | None) -> tuple[int, int, str]:
    """Missing values first, then whole numbers numerically (steps 6 before 12), then text."""
    if value is None:
        return (0, 0, "")
    if value.isascii() and value.isdigit():
        return (1, int(value), value)
    return (2, 0, value)


def _group_order(key: GroupKey) -> tuple[tuple[int, int, str], ...]:
    return tuple(_value_order(value) for value in key)


class GroupCounts:
    """Distinct notifications per group of ``group_by`` values, at most ``max_groups``.

    Rendering costs what changed, not what is held: groups are kept in their output order
    as they appear, and each group's JSON is rebuilt only when its count changed, so an
    update is a join of cached texts.
    """

    def __init__(
        self, group_by: Sequence[str], positions: Mapping[str, int], max_groups: int
    ) -> None:
        self.group_by = tuple(group_by)
        self.max_groups = max_groups
        # Topic token index of each grouped field in the topic: the fallback for records
        # stored without an identifier (other writers), as CloudEvents rebuild it.
        self._positions = {field: positions[field] for field in group_by if field in positions}
        self._seen: set[tuple[str, ...]] = set()
        self._counts: dict[GroupKey, int] = {}
        self._order: list[GroupKey] = []
        self._texts: dict[GroupKey, str] = {}
        self._dirty: set[GroupKey] = set()
        self.last_sequence: int | None = None

    def add(self, record: StoredNotification) -> bool:
        """Count ``record``; ``True`` when a count changed (its identifier is new).

        Raises :class:`GroupLimitReached` instead of creating group ``max_groups + 1``.
        """
        self.last_sequence = record.sequence
        metadata = record.metadata
        # Spatial values are stored apart from the identifier entry.
        identity = (
            record.topic,
            metadata.get("identifier", ""),
            metadata.get("spatial_geometry", ""),
            metadata.get("spatial_point_cloud", ""),
        )
        if identity in self._seen:
            return False
        key = self._group_of(record)
        count = self._counts.get(key)
        if count is None:
            if len(self._counts) >= self.max_groups:
                raise GroupLimitReached
            insort(self._order, key, key=_group_order)
            count = 0
        self._seen.add(identity)
        self._counts[key] = count + 1
        self._dirty.add(key)
        return True

    def _group_of(self, record: StoredNotification) -> GroupKey:
        identifier = stored_identifier(record)
        tokens = record.topic.split(".")
        values: list[str | None] = []
        for field in self.group_by:
            value = identifier.get(field)
            position = self._positions.get(field)
            if value is None and position is not None and position < len(tokens):
                try:
                    value = decode_token(tokens[position]) or None
                except TopicDecodeError:
                    value = None
            values.append(value)
        return tuple(values)

    def json_text(self, extra: Mapping[str, Any]) -> str:
        """The event's JSON (compact, keys sorted, as :func:`dumps` writes it): the counts
        plus ``extra`` members, whose keys must sort after ``groups``."""
        for key in self._dirty:
            values = dict(zip(self.group_by, key, strict=True))
            self._texts[key] = dumps({"count": self._counts[key], "values": values})
        self._dirty.clear()
        tail = dumps({**extra, "last_sequence": self.last_sequence, "total": len(self._seen)})
        groups = ",".join([self._texts[key] for key in self._order])
        return f'{{"group_by":{dumps(list(self.group_by))},"groups":[{groups}],{tail[1:]}'


def plan_group_counts(
    schema: EventSchema | None,
    identifier: Mapping[str, Any],
    group_by: Sequence[str],
    max_groups: int,
) -> GroupCounts:
    """Validate ``group_by`` against the event type's identifier fields.

    Schema-backed: any declared identifier field. Schema-less (permissive mode): a key of
    the request's own identifier, since those keys are what positions a generic topic.
    """
    if schema is not None:
        allowed = list(schema.fields)
        positions = {field: index + 1 for index, field in enumerate(schema.topic_fields)}
        owner = f"event type '{schema.event_type}'"
    else:
        allowed = sorted(identifier)
        positions = {field: index + 1 for index, field in enumerate(allowed)}
        owner = "the request identifier"
    if not group_by:
        raise InvalidValue("group_by must name at least one identifier field")
    for index, field in enumerate(group_by):
        if field not in allowed:
            raise InvalidValue(
                f"group_by field '{echoed(field)}' is not an identifier field of {owner}. "
                f"Allowed fields: {', '.join(allowed)}"
            )
        if field in group_by[:index]:
            raise InvalidValue(f"group_by names field '{field}' more than once")
    return GroupCounts(group_by, positions, max_groups)


def check_debounce(debounce_ms: int, minimum: int) -> None:
    """``minimum`` is ``limits.min_aggregate_debounce_ms``: a shorter window would let one
    stream render its counts for every notification."""
    if not minimum <= debounce_ms <= MAX_DEBOUNCE_MS:
        raise InvalidValue(
            f"debounce_ms must be between {minimum} and {MAX_DEBOUNCE_MS}. Got: {debounce_ms}"
        )


class AggregateStream(EventStream):
    """ASGI app answering one aggregate request with ``text/event-stream``.

    Shape: ``aggregate``/``snapshot`` first (held back while history is counted, so any
    ``history_gap``, ``notification_replay_limit_reached`` or ``stream_processing_failed``
    of the count follows it), then ``heartbeat`` and ``aggregate``/``update`` events, then
    ``connection-closing`` as on a watch. A count that was capped or failed is not continued
    live: its snapshot and flag are followed by ``end_of_stream``.
    """

    # Live records are counted and debounced by the task, never written as they are.
    writes_live_events_directly: ClassVar[bool] = False

    def __init__(
        self,
        *,
        counts: GroupCounts,
        debounce_ms: int,
        backend: StorageBackend,
        renderer: CloudEventRenderer,
        settings: WatchSettings,
        streams: StreamRegistry,
        control: StreamControl,
        stream_filter: StreamFilter,
        replay: ReplayStart,
        live: LiveQueue | None,
        subscription: Subscription | None,
        metrics: SseConnection,
        reauthorisation: Reauthorisation | None,
    ) -> None:
        super().__init__(
            backend=backend,
            renderer=renderer,
            settings=settings,
            streams=streams,
            control=control,
            stream_filter=stream_filter,
            replay=replay,
            live=live,
            subscription=subscription,
            is_watch=True,
            metrics=metrics,
            reauthorisation=reauthorisation,
        )
        self._counts = counts
        self._replay_start = replay
        self._cursor = replay.cursor
        self._debounce = debounce_ms / 1000
        self._changed = False
        self._window: asyncio.TimerHandle | None = None
        self._due = math.inf
        self._holding = False
        """Set while history is counted: nothing is written before the snapshot."""

    async def _run(self) -> None:
        if self._control.stop_reason is not None:
            return await self._close()
        first_heartbeat, self._next_heartbeat = self._next_heartbeat, math.inf
        self._holding = True
        try:
            end = await self._resolve_end(self._replay_start)
        except Exception as exc:
            self._replay_failed(exc)
            outcome = ReplayOutcome.FAILED
        else:
            outcome = await self._replay_through(self._cursor, end)
        self._holding = False
        self._next_heartbeat = first_heartbeat
        if outcome is ReplayOutcome.STOPPED or self._control.stop_reason == GROUP_LIMIT_REACHED:
            # Stopped while counting: no snapshot, only why the stream ends.
            self._out.clear()
            return await self._close()
        self._out[:0] = self._aggregate("snapshot")
        # No live feed, a capped or a failed count: the snapshot is all there is (counts
        # that go on from an incomplete history would be wrong without saying so).
        if self._live is None or outcome is not ReplayOutcome.COMPLETED:
            self._control.stop("end_of_stream")
            return await self._close()
        await self._follow_live(self._seam())
        await self._close()

    def _emit(
        self, event: bytes, records: Iterable[StoredNotification], budget: int | None = None
    ) -> int:
        """Count instead of render (history pages and live records both come through here,
        selected by the stream filter).

        Live, the first change after an update opens the debounce window: a timer wakes the
        watch's live loop at its end, and :meth:`_tick` then writes one update for it.
        """
        counted = 0
        try:
            for record in records:
                self._changed |= self._counts.add(record)
                self._through = record.sequence
                counted += 1
                if counted == budget:
                    break
        except GroupLimitReached:
            self._control.stop(GROUP_LIMIT_REACHED)
            return counted
        if self._changed and self._window is None and self._live is not None and self._live.live:
            self._due = self._now() + self._debounce
            self._window = asyncio.get_running_loop().call_at(self._due, self._control.wake)
        return counted

    def _tick(self) -> None:
        """The update of a debounce window that has ended, then the heartbeat if due."""
        if self._window is not None and self._now() >= self._due:
            self._window.cancel()
            self._window = None
            self._out += self._aggregate("update")
        super()._tick()

    def _wake_at(self) -> float:
        # The group limit stops the stream from inside the live loop's own counting, where
        # no wake-up follows: the loop must not sleep until its next timer.
        if self._control.stop_reason is not None:
            return -math.inf
        # An open debounce window is due too: its timer may fire a little before ``_due``
        # (uvloop's timers count whole milliseconds), and ``_tick`` then leaves the update
        # for later; without this the loop would sleep on to the next heartbeat.
        due = self._due if self._window is not None else math.inf
        return min(super()._wake_at(), due)

    async def _close(self) -> None:
        if self._window is not None:
            self._window.cancel()
        if self._control.stop_reason == GROUP_LIMIT_REACHED:
            # No counts follow (one missing a group would read as complete); the error
            # says which limit was reached and what to change.
            self._out += frames.aggregate_group_limit_reached(
                self._topic, self._counts.max_groups, self._control.request_id
            )
        await super()._close()

    def _aggregate(self, kind: str) -> bytes:
        self._changed = False
        text = self._counts.json_text(
            {
                "type": kind,
                "topic": self._topic,
                "timestamp": now_whole_seconds(),
                "request_id": self._control.request_id,
            }
        )
        return frames.frame(AGGREGATE, text.encode())

    async def _flush(self) -> None:
        if not self._holding:
            await super()._flush()
