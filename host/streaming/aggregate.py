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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aviso_host.auth.reauthorise import Reauthorisation
from aviso_host.cloudevents import CloudEventRenderer
from aviso_host.config.settings import WatchSettings
from aviso_host.cursors import now_whole_seconds
from aviso_host.encoding import dumps
from aviso_host.filtering import StreamFilter, stored_identifier
from aviso_host.metrics import SseConnection
from aviso_host.schemas import EventSchema
from aviso_host.streaming import frames
from aviso_host.streaming.control import LiveQueue, StreamControl, StreamRegistry
from aviso_host.streaming.stream import EventStream, ReplayStart
from aviso_plugins.topics import TopicDecodeError, decode_token
from aviso_plugins.types import InvalidValue, StorageBackend, StoredNotification, Subscription

AGGREGATE = b"aggregate"
DEFAULT_DEBOUNCE_MS = 1000
MAX_DEBOUNCE_MS = 60_000

GroupKey = tuple[str | None, ...]


def _value_order(value: str | None) -> tuple[int, int, str]:
    """Missing values first, then whole numbers numerically (steps 6 before 12), then text."""
    if value is None:
        return (0, 0, "")
    if value.isascii() and value.isdigit():
        return (1, int(value), value)
    return (2, 0, value)


class GroupCounts:
    """Distinct notifications per group of ``group_by`` values."""

    def __init__(self, group_by: Sequence[str], positions: Mapping[str, int]) -> None:
        self.group_by = tuple(group_by)
        # Topic token index of each grouped field in the topic: the fallback for records
        # stored without an identifier (other writers), as CloudEvents rebuild it.
        self._positions = {field: positions[field] for field in group_by if field in positions}
        self._seen: set[tuple[str, ...]] = set()
        self._counts: dict[GroupKey, int] = {}
        self.last_sequence: int | None = None

    def add(self, record: StoredNotification) -> bool:
        """Count ``record``; ``True`` when a count changed (its identifier is new)."""
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
        self._seen.add(identity)
        key = self._group_of(record)
        self._counts[key] = self._counts.get(key, 0) + 1
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

    def body(self) -> dict[str, Any]:
        ordered = sorted(self._counts.items(), key=lambda item: [_value_order(v) for v in item[0]])
        return {
            "group_by": list(self.group_by),
            "groups": [
                {"count": count, "values": dict(zip(self.group_by, key, strict=True))}
                for key, count in ordered
            ],
            "total": len(self._seen),
            "last_sequence": self.last_sequence,
        }


def plan_group_counts(
    schema: EventSchema | None, identifier: Mapping[str, Any], group_by: Sequence[str]
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
                f"group_by field '{field}' is not an identifier field of {owner}. "
                f"Allowed fields: {', '.join(allowed)}"
            )
        if field in group_by[:index]:
            raise InvalidValue(f"group_by names field '{field}' more than once")
    return GroupCounts(group_by, positions)


def check_debounce(debounce_ms: int) -> None:
    if not 0 <= debounce_ms <= MAX_DEBOUNCE_MS:
        raise InvalidValue(
            f"debounce_ms must be between 0 and {MAX_DEBOUNCE_MS}. Got: {debounce_ms}"
        )


class AggregateStream(EventStream):
    """ASGI app answering one aggregate request with ``text/event-stream``.

    Shape: ``aggregate``/``snapshot`` first (held back while history is counted, so any
    ``history_gap``, ``notification_replay_limit_reached`` or ``stream_processing_failed``
    of the count follows it), then ``heartbeat`` and ``aggregate``/``update`` events, then
    ``connection-closing`` as on a watch.
    """

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
        high_water = await self._replay_history(self._cursor)
        self._holding = False
        self._next_heartbeat = first_heartbeat
        if high_water is None:  # stopped while counting: end with only the close event
            self._out.clear()
            return await self._close()
        self._out[:0] = self._aggregate("snapshot")
        if self._live is None:  # no live feed: the snapshot is all there is
            self._control.stop("end_of_stream")
            return await self._close()
        await self._follow_live(high_water)
        await self._close()

    def _emit(self, event: bytes, records: Iterable[StoredNotification]) -> None:
        """Count instead of render (history pages and live records both come through here,
        selected by the stream filter).

        Live, the first change after an update opens the debounce window: a timer wakes the
        watch's live loop at its end, and :meth:`_tick` then writes one update for it.
        """
        for record in records:  # already selected by the stream filter
            self._changed |= self._counts.add(record)
            self._through = record.sequence
        if self._changed and self._window is None and self._live is not None and self._live.live:
            self._due = self._now() + self._debounce
            self._window = asyncio.get_running_loop().call_at(self._due, self._control.wake)

    def _tick(self) -> None:
        """The update of a debounce window that has ended, then the heartbeat if due."""
        if self._window is not None and self._now() >= self._due:
            self._window.cancel()
            self._window = None
            self._out += self._aggregate("update")
        super()._tick()

    async def _close(self) -> None:
        if self._window is not None:
            self._window.cancel()
        await super()._close()

    def _aggregate(self, kind: str) -> bytes:
        self._changed = False
        body = {
            **self._counts.body(),
            "type": kind,
            "topic": self._topic,
            "timestamp": now_whole_seconds(),
            "request_id": self._control.request_id,
        }
        return frames.frame(AGGREGATE, dumps(body).encode())

    async def _flush(self) -> None:
        if not self._holding:
            await super()._flush()
