"""``spark.read.format("aviso")``: a server's stored history as a DataFrame.

Options (keys are case-insensitive):

- ``event_type`` (required) and ``url`` (required): the event type and the server's base URL.
- ``identifier.<field>``: the identifier filter, as in a replay request (wildcards and
  constraints included); fields the schema requires must be given.
- ``from_id`` or ``from_date``: where history starts; neither means all of it.
- ``to_id`` or ``to_date``: where it ends (inclusive); neither means the last notification
  stored when the read is planned.
- ``numPartitions``: how many Spark tasks read it (default: the session's default
  parallelism, as known when ``aviso_spark.register`` ran).
- ``authorization``: an ``Authorization`` header value passed through as is.
- ``identifier_columns``: comma-separated fields to make columns of; default every field
  of the event type's schema (read from the server's public schema endpoint).
- ``timeout_seconds`` (default 60): the read timeout of one replay request.

Columns: ``sequence`` (long), ``time`` (timestamp), one string column per identifier
field (non-text values as JSON; a field named like a fixed column, such as ``time``, becomes
``identifier_<field>``), ``payload`` (the payload as a JSON string, null when the
notification has none).

Planning makes one cheap replay request that resolves the bounds: the end as the server
resolves ``to_id`` / ``to_date`` (or the last sequence stored), and the first matching
sequence at or after ``from_id`` / ``from_date`` (the request is closed at its first
notification). ``first .. end`` is split into ``numPartitions`` adjacent sequence ranges, each
read by one task with a bounded replay (``from_id`` .. ``to_id``, paging past the server's
replay limit), so the partitions hold exactly the rows of one replay: nothing at a border is
read twice or lost, and notifications stored while the job runs are not read (the end was
fixed when the read was planned). A ``from_date`` start assumes, as the server's date
resolution does, that storage times grow with sequences.
"""

from __future__ import annotations

import datetime
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from aviso_spark.partitioning import SequenceRange, split
from aviso_spark.replay import ReplayRequest, identifier_fields, replay, resolve_bounds

IDENTIFIER_PREFIX = "identifier."
FIXED_COLUMNS = ("sequence", "time", "payload")
ARROW_ROWS = 2000
"""Rows per Arrow batch a read task hands to Spark."""


@dataclass(frozen=True)
class ReadOptions:
    request: ReplayRequest
    identifier_columns: tuple[str, ...] | None
    partitions: int = 1

    @classmethod
    def parse(cls, options: Mapping[str, str], default_partitions: int = 1) -> ReadOptions:
        for key in ("event_type", "url"):
            if not options.get(key):
                raise ValueError(f"reading from the aviso data source needs the option '{key}'")
        if options.get("from_id") and options.get("from_date"):
            raise ValueError("give from_id or from_date, not both")
        if options.get("to_id") and options.get("to_date"):
            raise ValueError("give to_id or to_date, not both")
        partitions = _positive(options, "numPartitions", default_partitions)
        columns = options.get("identifier_columns")
        request = ReplayRequest(
            url=options["url"],
            event_type=options["event_type"],
            identifier={
                key[len(IDENTIFIER_PREFIX) :]: value
                for key, value in options.items()
                if key.lower().startswith(IDENTIFIER_PREFIX)
            },
            from_id=options.get("from_id") or None,
            from_date=options.get("from_date") or None,
            to_id=options.get("to_id") or None,
            to_date=options.get("to_date") or None,
            authorization=options.get("authorization") or None,
            timeout_seconds=float(options.get("timeout_seconds", "60")),
        )
        return cls(
            request,
            tuple(name.strip() for name in columns.split(",") if name.strip()) if columns else None,
            partitions,
        )


def _positive(options: Mapping[str, str], key: str, default: int) -> int:
    text = options.get(key)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{key} must be a positive integer, got {text!r}")
    return value


def identifier_column(field: str) -> str:
    """The column of an identifier field: its name, unless a fixed column has it already
    (the dissemination schema's ``time``), then ``identifier_<field>``."""
    return f"identifier_{field}" if field in FIXED_COLUMNS else field


def history_schema(options: ReadOptions) -> StructType:
    fields = options.identifier_columns
    if fields is None:
        fields = tuple(identifier_fields(options.request.url, options.request.event_type))
    return StructType(
        [
            StructField("sequence", LongType(), nullable=False),
            StructField("time", TimestampType(), nullable=False),
            *(StructField(identifier_column(name), StringType()) for name in fields),
            StructField("payload", StringType()),
        ]
    )


class AvisoReader(DataSourceReader):
    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.request = options.request
        self.partition_count = options.partitions
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        """Planned on the driver: the bounds are resolved (and the end fixed) here."""
        bounds = resolve_bounds(self.request)
        ranges = (
            [] if bounds.first is None else split(bounds.first, bounds.end, self.partition_count)
        )
        # An empty history still needs one partition (which reads nothing).
        return list(ranges) or [SequenceRange(0, 1, 0)]

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        assert isinstance(partition, SequenceRange)
        if partition.last < partition.first:
            return
        yield from event_batches(
            replay(self.request.between(partition.first, partition.last)), self.schema
        )


def event_batches(
    events: Iterable[dict[str, Any]], schema: StructType
) -> Iterator[pyarrow.RecordBatch]:
    """Replayed CloudEvents as Arrow record batches of the history schema: Spark takes
    them whole instead of unpickling a tuple per row. The Arrow schema is the one Spark
    checks them against (timestamps in UTC)."""
    arrow = to_arrow_schema(schema, timezone="UTC")
    columns = schema.fieldNames()
    rows = iter(events)
    while chunk := [event_row(event, columns) for event in itertools.islice(rows, ARROW_ROWS)]:
        arrays = [
            pyarrow.array(values, type=field.type)
            for values, field in zip(zip(*chunk, strict=True), arrow, strict=True)
        ]
        yield pyarrow.RecordBatch.from_arrays(arrays, schema=arrow)


def event_row(event: dict[str, Any], columns: list[str]) -> tuple[Any, ...]:
    """A replayed CloudEvent as a row of the history schema (``columns`` in its order)."""
    data = event["data"]
    payload = data.get("payload")
    values: dict[str, Any] = {
        identifier_column(name): _text(value)
        for name, value in (data.get("identifier") or {}).items()
    }
    values["sequence"] = event["sequence"]
    values["time"] = datetime.datetime.fromisoformat(event["time"])
    values["payload"] = None if payload is None else json.dumps(payload, sort_keys=True)
    return tuple(values.get(column) for column in columns)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)
