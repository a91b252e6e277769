"""``spark.readStream.format("aviso")``: notifications as they are stored, micro-batch by
micro-batch.

The options are those of ``spark.read.format("aviso")`` (``aviso_spark.reader``) except the
end (``to_id`` / ``to_date``: a stream has none), plus:

- ``from_id`` / ``from_date``: where a new query starts; neither means after the last
  notification stored when it starts. A query restarted from its checkpoint ignores them.
- ``numPartitions``: the Spark tasks of one micro-batch.
- ``accept_history_gap`` (default ``false``): go on past notifications that retention removed
  before the query read them, instead of failing.

Offsets are sequences: ``{"<event_type>": <last sequence read>}``. A micro-batch is the
bounded replay of ``(previous offset, latest]``, where latest is the last sequence stored
when the batch was planned (one empty replay announcing it), split into ``numPartitions``
sequence ranges. Spark writes a batch's offsets to the checkpoint before running it and
re-runs the same range after a failure, so a restarted query resumes exactly after the last
committed sequence: nothing twice, nothing skipped.

A history gap, notifications gone before the query read them, fails the batch with
:class:`HistoryGap`: the server's ``history_gap`` event (the start of the range was pruned),
or, on an unfiltered read (no ``identifier.*`` option, so every sequence must arrive), a
sequence missing from the range.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from aviso_spark.partitioning import SequenceRange, split
from aviso_spark.reader import ReadOptions, event_batches
from aviso_spark.replay import (
    HISTORY_GAP,
    MAX_SEQUENCE,
    ReplayRequest,
    latest_sequence,
    replay,
    resolve_bounds,
)

ACCEPT_GAP = "accept_history_gap"


class HistoryGap(RuntimeError):
    """Notifications the query had not read yet are no longer stored."""


@dataclass(frozen=True)
class StreamOptions:
    read: ReadOptions
    accept_gap: bool

    @classmethod
    def parse(cls, options: Mapping[str, str], default_partitions: int = 1) -> StreamOptions:
        for key in ("to_id", "to_date"):
            if options.get(key):
                raise ValueError(f"a streaming read has no end: remove the option '{key}'")
        accept = (options.get(ACCEPT_GAP) or "false").strip().lower()
        if accept not in ("true", "false"):
            raise ValueError(f"{ACCEPT_GAP} must be true or false, got {accept!r}")
        return cls(ReadOptions.parse(options, default_partitions), accept == "true")


class AvisoStreamReader(DataSourceStreamReader):
    def __init__(self, options: StreamOptions, schema: StructType) -> None:
        self.request = options.read.request
        self.partition_count = options.read.partitions
        self.accept_gap = options.accept_gap
        self.schema = schema
        self.key = self.request.event_type

    def initialOffset(self) -> dict[str, int]:
        """Before the first sequence to read: ``from_id`` - 1, before the first notification
        stored at or after ``from_date``, else the last one stored now."""
        request = self.request
        if request.from_id is not None:
            return {self.key: int(request.from_id) - 1}
        if request.from_date is None:
            return {self.key: latest_sequence(request)}
        bounds = resolve_bounds(replace(request, to_id=str(MAX_SEQUENCE)))
        return {self.key: bounds.end if bounds.first is None else bounds.first - 1}

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        latest = latest_sequence(self.request)
        # Never behind the start: a wiped stream restarts its sequences, the query does not.
        return {self.key: max(latest, self._sequence(start)) if start else latest}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return list(split(self._sequence(start) + 1, self._sequence(end), self.partition_count))

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        assert isinstance(partition, SequenceRange)
        yield from event_batches(self._checked(partition), self.schema)

    def _checked(self, partition: SequenceRange) -> Iterator[dict[str, Any]]:
        check = GapCheck(self.request, partition, unfiltered=not self.request.identifier)
        for event in replay(self.request.between(partition.first, partition.last), check.control):
            if not self.accept_gap:
                check.delivered(event["sequence"])
            yield event
        if not self.accept_gap:
            check.finished()

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the checkpoint is the only state, replays are stateless."""

    def _sequence(self, offset: Mapping[str, Any]) -> int:
        if self.key not in offset:
            raise ValueError(
                f"the checkpoint's offset {dict(offset)} is not of event type '{self.key}'"
            )
        return int(offset[self.key])


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
