"""``spark.readStream.format("aviso")``: notifications as they are stored, micro-batch by
micro-batch.

The options are those of ``spark.read.format("aviso")`` (``aviso_spark.reader``) except the
end (``to_id`` / ``to_date``: a stream has none), plus:

- ``from_id`` / ``from_date``: where a new query starts; neither means after the last
  notification stored when it starts. A query restarted from its checkpoint ignores them.
- ``numPartitions``: the Spark tasks of one micro-batch.
- ``accept_history_gap`` (default ``false``): go on past notifications that retention removed
  before the query read them, instead of failing.
- ``maxNotificationsPerTrigger``: at most this many notifications in one micro-batch (Spark's
  admission control), shared between the event types; ``Trigger.AvailableNow`` reads what
  was stored when the query started in micro-batches of that size.

Several event types (``event_type=a,b``) are read in one query, each with its own offset.
Offsets are sequences: ``{"<event_type>": <last sequence read>, ...}``. A micro-batch is the
bounded replay of ``(previous offset, end]`` of each type, where end is the last sequence
stored when the batch was planned (one empty replay announcing it), or, under a limit, the
sequence of the last notification that fits (counted by sequence on an unfiltered read, by
reading the matches on the driver otherwise), split into ``numPartitions`` sequence ranges.
The progress's ``latestOffset`` is the last sequence stored per type: minus ``endOffset`` it
is the source's lag (``source_lag``).

Spark writes a batch's offsets to the checkpoint before running it and
re-runs the same range after a failure, so a restarted query resumes exactly after the last
committed sequence: nothing twice, nothing skipped.

A history gap, notifications gone before the query read them, fails the batch with
:class:`HistoryGap`: the server's ``history_gap`` event (the start of the range was pruned),
or, on an unfiltered read (no ``identifier.*`` option, so every sequence must arrive), a
sequence missing from the range.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from aviso_spark.fields import FieldSpec
from aviso_spark.partitioning import SequenceRange, split
from aviso_spark.reader import (
    ReadOptions,
    event_batches,
    partition_shares,
    positive_option,
    unconstrained,
)
from aviso_spark.replay import (
    HISTORY_GAP,
    MAX_SEQUENCE,
    ReplayRequest,
    first_sequences,
    latest_sequence,
    replay,
    resolve_bounds,
)

ACCEPT_GAP = "accept_history_gap"
MAX_PER_TRIGGER = "maxNotificationsPerTrigger"


class HistoryGap(RuntimeError):
    """Notifications the query had not read yet are no longer stored."""


@dataclass(frozen=True)
class StreamOptions:
    read: ReadOptions
    accept_gap: bool
    max_per_trigger: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], default_partitions: int = 1) -> StreamOptions:
        for key in ("to_id", "to_date"):
            if options.get(key):
                raise ValueError(f"a streaming read has no end: remove the option '{key}'")
        accept = (options.get(ACCEPT_GAP) or "false").strip().lower()
        if accept not in ("true", "false"):
            raise ValueError(f"{ACCEPT_GAP} must be true or false, got {accept!r}")
        limit = options.get(MAX_PER_TRIGGER)
        return cls(
            ReadOptions.parse(options, default_partitions),
            accept == "true",
            positive_option(options, MAX_PER_TRIGGER, 0) if limit else None,
        )


class AvisoStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(
        self,
        options: StreamOptions,
        schema: StructType,
        described: Mapping[str, Mapping[str, FieldSpec]],
    ) -> None:
        self.requests = {
            name: replace(request, identifier=unconstrained(request.identifier, described[name]))
            for name, request in options.read.requests().items()
        }
        # Unfiltered: every sequence must arrive (the gap check), and a span of sequences
        # holds exactly as many notifications (admission control counts without reading).
        self.unfiltered = not options.read.request.identifier
        self.partition_count = options.read.partitions
        self.accept_gap = options.accept_gap
        self.max_per_trigger = options.max_per_trigger
        self.schema = schema
        self.target: dict[str, int] | None = None
        """Trigger.AvailableNow: the latest offset when the query started, never passed."""
        self.latest: dict[str, int] | None = None

    def initialOffset(self) -> dict[str, int]:
        """Per event type, before the first sequence to read: ``from_id`` - 1, before the
        first notification stored at or after ``from_date``, else the last one stored now."""
        return {name: _initial(request) for name, request in self.requests.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.max_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._stored()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        latest = self.target if self.target is not None else self._stored()
        # Never behind the start: a wiped stream restarts its sequences, the query does not.
        after = {name: self._sequence(start, name) for name in self.requests}
        latest = {name: max(latest[name], after[name]) for name in self.requests}
        self.latest = latest
        if isinstance(limit, ReadMaxRows):
            return self._admitted(after, latest, limit.max_rows)
        return latest

    def reportLatestOffset(self) -> dict[str, int] | None:
        """The progress's ``latestOffset``: with ``endOffset`` it gives the source's lag
        (:func:`source_lag`)."""
        return self.latest

    def _stored(self) -> dict[str, int]:
        return {name: latest_sequence(request) for name, request in self.requests.items()}

    def _admitted(
        self, after: dict[str, int], latest: dict[str, int], budget: int
    ) -> dict[str, int]:
        """The end of a micro-batch of at most ``budget`` notifications, shared fairly
        between the event types that have some (the smallest backlogs first, whatever they
        leave going to the others)."""
        waiting: dict[str, list[int] | int] = {}
        for name, request in self.requests.items():
            if self.unfiltered:
                waiting[name] = min(latest[name] - after[name], budget)
            else:
                window = request.between(after[name] + 1, latest[name])
                found = first_sequences(window, budget) if latest[name] > after[name] else []
                waiting[name] = found
        end = dict(after)
        order = sorted(waiting, key=lambda name: _count(waiting[name]))
        left = budget
        for position, name in enumerate(order):
            available = waiting[name]
            take = min(_count(available), left // (len(order) - position))
            left -= take
            if isinstance(available, int):
                end[name] = after[name] + take
            elif take == len(available) and take < budget:
                end[name] = latest[name]  # every match up to latest fits
            elif take:
                end[name] = available[take - 1]
        return end

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        spans = {
            name: (self._sequence(start, name) + 1, self._sequence(end, name))
            for name in self.requests
        }
        spans = {name: span for name, span in spans.items() if span[0] <= span[1]}
        ranges: list[InputPartition] = []
        for name, count in partition_shares(spans, self.partition_count).items():
            for part in split(*spans[name], count):
                ranges.append(replace(part, index=len(ranges), event_type=name))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        assert isinstance(partition, SequenceRange)
        yield from event_batches(self._checked(partition), self.schema, partition.event_type)

    def _checked(self, partition: SequenceRange) -> Iterator[dict[str, Any]]:
        request = self.requests[partition.event_type]
        check = GapCheck(request, partition, unfiltered=self.unfiltered)
        for event in replay(request.between(partition.first, partition.last), check.control):
            if not self.accept_gap:
                check.delivered(event["sequence"])
            yield event
        if not self.accept_gap:
            check.finished()

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the checkpoint is the only state, replays are stateless."""

    def _sequence(self, offset: Mapping[str, Any], name: str) -> int:
        if name not in offset:
            raise ValueError(
                f"the checkpoint's offset {dict(offset)} has no event type '{name}': a query's "
                "event types cannot change once it has a checkpoint"
            )
        return int(offset[name])


def _initial(request: ReplayRequest) -> int:
    if request.from_id is not None:
        return int(request.from_id) - 1
    if request.from_date is None:
        return latest_sequence(request)
    bounds = resolve_bounds(replace(request, to_id=str(MAX_SEQUENCE)))
    return bounds.end if bounds.first is None else bounds.first - 1


def _count(available: list[int] | int) -> int:
    return available if isinstance(available, int) else len(available)


def source_lag(source: Any) -> dict[str, int]:
    """Per event type, the sequences stored but not yet read (latest minus the batch's end)
    of one entry of a streaming query's progress ``sources`` (a ``SourceProgress``, or its
    JSON as a mapping)."""

    def offsets(key: str) -> dict[str, int]:
        value = source.get(key) if isinstance(source, Mapping) else getattr(source, key, None)
        if isinstance(value, str):
            value = json.loads(value)
        return {str(name): int(sequence) for name, sequence in (value or {}).items()}

    latest, end = offsets("latestOffset"), offsets("endOffset")
    return {name: max(0, latest[name] - end.get(name, latest[name])) for name in latest}


class GapCheck:
    """Fails a range's read when history it should deliver is gone (see the module)."""

    def __init__(self, request: ReplayRequest, expected: SequenceRange, unfiltered: bool) -> None:
        self.request = request
        self.range = expected
        self.unfiltered = unfiltered
        self.next = expected.first
        self.gap_seen: dict[str, Any] | None = None

    def control(self, kind: str, data: dict[str, Any]) -> None:
        if kind == HISTORY_GAP and self.gap_seen is None:
            self.gap_seen = data

    def delivered(self, sequence: int) -> None:
        if self.gap_seen is not None:
            self._fail(
                int(self.gap_seen.get("requested_from_sequence", self.range.first)),
                int(self.gap_seen.get("first_available_sequence", sequence)),
            )
        if self.unfiltered and sequence != self.next:
            self._fail(self.next, sequence)
        self.next = sequence + 1

    def finished(self) -> None:
        if self.gap_seen is not None:
            self._fail(
                int(self.gap_seen.get("requested_from_sequence", self.range.first)),
                int(self.gap_seen.get("first_available_sequence", self.range.last + 1)),
            )
        if self.unfiltered and self.next <= self.range.last:
            self._fail(self.next, None)

    def _fail(self, expected: int, observed: int | None) -> None:
        found = f"sequence {observed} came next" if observed else "nothing more came"
        raise HistoryGap(
            f"history gap in '{self.request.event_type}': the query expected sequence "
            f"{expected} (reading {self.range.first}..{self.range.last}) but {found}; "
            "retention removed notifications before the query read them. Set the option "
            f"{ACCEPT_GAP}=true to go on without them."
        )
