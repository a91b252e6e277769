"""Sequence ranges: how a bounded history read is shared between Spark tasks."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition


@dataclass(frozen=True)
class SequenceRange(InputPartition):
    """Sequences ``first`` .. ``last`` (inclusive) of one event type's stream."""

    index: int
    first: int
    last: int
    event_type: str = ""


def split(first: int, last: int, count: int) -> list[SequenceRange]:
    """``first`` .. ``last`` in at most ``count`` adjacent ranges of near-equal width.

    Adjacent and inclusive: every sequence is in exactly one range, so the partitions read
    together exactly what one replay of ``first`` .. ``last`` reads.
    """
    if last < first:
        return []
    width = last - first + 1
    count = max(1, min(count, width))
    ranges = []
    start = first
    for index in range(count):
        size = width // count + (1 if index < width % count else 0)
        ranges.append(SequenceRange(index, start, start + size - 1))
        start += size
    return ranges
