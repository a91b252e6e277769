"""``spark.read.format("aviso")``: a server's stored history as a DataFrame.

Options (keys are case-insensitive):

- ``event_type`` (required) and ``url`` (required): the event type, or several separated by
  commas, and the server's base URL.
- ``identifier.<field>``: the identifier filter, as in a replay request: a value, ``*`` for
  any, or a constraint object as JSON text (``{"gte": 6}``). A field neither given nor
  filtered in Spark is unconstrained (a required one included: no ``=*`` needed). A value
  the server cannot honour, such as a prefix wildcard (``foo-*``), fails the read naming
  the option. With several event types the filter applies to each type declaring the field.
- ``from_id`` or ``from_date``: where history starts; neither means all of it.
- ``to_id`` or ``to_date``: where it ends (inclusive); neither means the last notification
  stored when the read is planned.
- ``numPartitions``: how many Spark tasks read it (default: the partition count
  ``aviso_spark.register`` found or was given).
- ``authorization``: an ``Authorization`` header value passed through as is (a bulk reader's
  credentials: see the server's ``watch_endpoint.bulk_readers``).
- ``identifier_columns``: comma-separated fields to make columns of; default every field
  of the event types' schemas (read from the server's public schema endpoint).
- ``typed_columns`` (default ``true``): identifier columns typed by their field's handler
  (integers as ``bigint``, floats as ``double``, dates as ``date``, the rest as text);
  ``false``: every identifier column is text, as stored.
- ``payload_schema``: a Spark DDL type (``STRUCT<path: STRING, size: BIGINT>``) or field
  list (``path STRING, size BIGINT``): the payload column parsed from its JSON with it
  (absent keys are null); default: the payload as JSON text.
- ``timeout_seconds`` (default 60): the read timeout of one replay request.

Columns: ``sequence`` (long), ``time`` (timestamp), ``event_type`` (string), one column per
identifier field (a field named like a fixed column, such as ``time``, becomes
``identifier_<field>``), ``payload`` (JSON text, or parsed; null when the notification has
none).

``.where()`` filters reach the server (``aviso_spark.pushdown``; the session needs
``spark.sql.python.filterPushdown.enabled``, which ``aviso_spark.register`` sets).

Planning makes one cheap replay request per event type (per pushed alternative) that
resolves the bounds: the end as the server resolves ``to_id`` / ``to_date`` (or the last
sequence stored), and the first matching sequence at or after ``from_id`` / ``from_date``
(the request is closed at its first notification). ``first .. end`` is split into adjacent
sequence ranges (``numPartitions`` in all, shared between event types by their width), each
read by one task with a bounded replay (``from_id`` .. ``to_id``, paging past the server's
replay limit), so the partitions hold exactly the rows of one replay: nothing at a border is
read twice or lost, and notifications stored while the job runs are not read (the end was
fixed when the read was planned). A ``from_date`` start assumes, as the server's date
resolution does, that storage times grow with sequences.
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow
import pyarrow.compute
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aviso_spark import positive_integer
from aviso_spark.fields import FieldSpec, UnreadableValue, converter, merged_fields
from aviso_spark.partitioning import SequenceRange, split
from aviso_spark.pushdown import Pushed, push
from aviso_spark.replay import (
    ReplayRequest,
    replay,
    resolve_bounds,
    schema_fields,
    stream_extent,
)

IDENTIFIER_PREFIX = "identifier."
FIXED_COLUMNS = ("sequence", "time", "event_type", "payload")
ARROW_ROWS = 2000
"""Rows per Arrow batch a read task hands to Spark."""
ONE_MICROSECOND = datetime.timedelta(microseconds=1)


@dataclass(frozen=True)
class ReadOptions:
    request: ReplayRequest
    """The read's replay (of its first event type)."""
    identifier_columns: tuple[str, ...] | None
    partitions: int = 1
    event_types: tuple[str, ...] = ()
    typed: bool = True
    payload_schema: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], default_partitions: int = 1) -> ReadOptions:
        for key in ("event_type", "url"):
            if not options.get(key):
                raise ValueError(f"reading from the aviso data source needs the option '{key}'")
        if options.get("from_id") and options.get("from_date"):
            raise ValueError("give from_id or from_date, not both")
        if options.get("to_id") and options.get("to_date"):
            raise ValueError("give to_id or to_date, not both")
        partitions = positive_option(options, "numPartitions", default_partitions)
        event_types = _names(options["event_type"])
        if not event_types or len(set(event_types)) != len(event_types):
            raise ValueError(
                f"event_type must name distinct event types, got {options['event_type']!r}"
            )
        columns = options.get("identifier_columns")
        request = ReplayRequest(
            url=options["url"],
            event_type=event_types[0],
            identifier={
                key[len(IDENTIFIER_PREFIX) :]: _filter_value(key, value)
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
            _names(columns) if columns else None,
            partitions,
            event_types,
            _flag(options, "typed_columns", True),
            options.get("payload_schema") or None,
        )

    def requests(self) -> dict[str, ReplayRequest]:
        """One replay per event type, in the order given."""
        return {name: replace(self.request, event_type=name) for name in self.event_types}


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _flag(options: Mapping[str, str], key: str, default: bool) -> bool:
    text = (options.get(key) or str(default)).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{key} must be true or false, got {text!r}")
    return text == "true"


def _filter_value(option: str, value: str) -> Any:
    """An ``identifier.<field>`` option as the request's value: JSON text of an object is a
    constraint; text holding ``*`` must be exactly ``*`` (the server has no prefix or
    infix wildcards: such a value would match nothing)."""
    if value.lstrip().startswith("{"):
        try:
            constraint = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"option '{option}': {value!r} is not a JSON object ({exc})") from None
        if isinstance(constraint, dict):
            return constraint
    if "*" in value and value.strip() != "*":
        raise ValueError(
            f"option '{option}' = {value!r}: the server matches a whole value or '*' (any), "
            "not a pattern; give the whole value, or filter in Spark "
            "(for example .where(col(...).startswith(...)))"
        )
    return value


def positive_option(options: Mapping[str, str], key: str, default: int) -> int:
    text = options.get(key)
    return positive_integer(text, key) if text else default


def identifier_column(field: str) -> str:
    """The column of an identifier field: its name, unless a fixed column has it already
    (the dissemination schema's ``time``), then ``identifier_<field>``."""
    return f"identifier_{field}" if field in FIXED_COLUMNS else field


def described_fields(options: ReadOptions) -> dict[str, dict[str, FieldSpec]]:
    """Each event type's identifier fields, from the server."""
    return {name: schema_fields(options.request.url, name) for name in options.event_types}


def history_schema(
    options: ReadOptions, described: Mapping[str, Mapping[str, FieldSpec]]
) -> StructType | str:
    """The read's schema; a DDL string when the payload is parsed with ``payload_schema``
    (Spark parses it, the Python workers cannot)."""
    fields = merged_fields(described)
    names = options.identifier_columns if options.identifier_columns is not None else fields
    schema = StructType(
        [
            StructField("sequence", LongType(), nullable=False),
            StructField("time", TimestampType(), nullable=False),
            StructField("event_type", StringType(), nullable=False),
            *(
                StructField(identifier_column(name), _column_type(fields.get(name), options))
                for name in names
            ),
            StructField("payload", StringType()),
        ]
    )
    if options.payload_schema is None:
        return schema
    columns = ", ".join(
        f"`{column.name}` {column.dataType.simpleString().upper()}"
        + ("" if column.nullable else " NOT NULL")
        for column in schema.fields[:-1]
    )
    return f"{columns}, `payload` {_payload_type(options.payload_schema)}"


def _column_type(spec: FieldSpec | None, options: ReadOptions) -> DataType:
    return spec.spark_type() if spec is not None and options.typed else StringType()


def _payload_type(text: str) -> str:
    """A DDL type as is; a field list (``a INT, b STRING``) as the struct of those fields."""
    stripped = text.strip()
    head = stripped.split("<", 1)[0].strip().upper()
    if ("<" in stripped and head in ("STRUCT", "ARRAY", "MAP")) or " " not in stripped:
        return stripped
    return f"STRUCT<{stripped}>"


class AvisoReader(DataSourceReader):
    def __init__(
        self,
        options: ReadOptions,
        schema: StructType,
        described: Mapping[str, Mapping[str, FieldSpec]],
    ) -> None:
        self.requests = options.requests()
        self.partition_count = options.partitions
        self.schema = schema
        self.described = {name: dict(fields) for name, fields in described.items()}
        self.pushed = Pushed()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Keep what the replay can do (``aviso_spark.pushdown``); hand the rest back."""
        fields = merged_fields(self.described)
        columns = {identifier_column(name): name for name in fields}
        self.pushed, remaining = push(filters, fields, columns)
        return remaining

    def partitions(self) -> list[InputPartition]:
        """Planned on the driver: the bounds are resolved (and the end fixed) here."""
        spans: dict[str, tuple[int, int]] = {}
        if not self.pushed.empty:
            for event_type, request in self.requests.items():
                if (
                    self.pushed.event_types is not None
                    and event_type not in self.pushed.event_types
                ):
                    continue
                span = self._span(event_type, request)
                if span is not None:
                    spans[event_type] = span
        ranges: list[SequenceRange] = []
        for event_type, count in partition_shares(spans, self.partition_count).items():
            first, last = spans[event_type]
            for part in split(first, last, count):
                ranges.append(replace(part, index=len(ranges), event_type=event_type))
        # An empty history still needs one partition (which reads nothing).
        return list(ranges) or [SequenceRange(0, 1, 0)]

    def _span(self, event_type: str, request: ReplayRequest) -> tuple[int, int] | None:
        """The sequences of ``event_type`` the read covers (``None``: nothing matches)."""
        firsts: list[int] = []
        ends: list[int] = []
        for alternative in self._alternatives(event_type, request):
            if alternative.from_date is None:
                # Sequences only: the start needs no search, and the probe sends nothing.
                retained, end = stream_extent(alternative)
                if alternative.to_id is not None:
                    end = min(end, int(alternative.to_id))
                firsts.append(max(retained, int(alternative.from_id or 1)))
                ends.append(end)
                continue
            bounds = resolve_bounds(alternative)
            ends.append(bounds.end)
            if bounds.first is not None:
                firsts.append(bounds.first)
        if not firsts:
            return None
        first, last = min(firsts), max(ends)
        if self.pushed.first is not None:
            first = max(first, self.pushed.first)
        if self.pushed.last is not None:
            last = min(last, self.pushed.last)
        return (first, last) if first <= last else None

    def _alternatives(self, event_type: str, request: ReplayRequest) -> list[ReplayRequest]:
        """The replays of ``event_type`` the pushed filters ask for (one, unless an IN or a
        date range fans out), each starting and ending as narrowly as known."""
        pushed = self.pushed
        request = _narrowed(request, pushed)
        asked = {*pushed.identifier, *pushed.choices}
        base = unconstrained(request.identifier, self.described.get(event_type, {}), asked)
        return [replace(request, identifier=item) for item in pushed.alternatives(base)]

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        assert isinstance(partition, SequenceRange)
        if partition.last < partition.first:
            return
        request = self.requests[partition.event_type]
        streams = [
            replay(alternative.between(partition.first, partition.last))
            for alternative in self._alternatives(partition.event_type, request)
        ]
        events = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=_sequence)
        yield from event_batches(events, self.schema, partition.event_type)


def unconstrained(
    identifier: Mapping[str, Any], specs: Mapping[str, FieldSpec], asked: Iterable[str] = ()
) -> dict[str, Any]:
    """``identifier`` with every required field it leaves out (and ``asked`` does not name)
    matching anything: a read names only the fields it filters on."""
    named = {*identifier, *asked}
    filled = dict(identifier)
    for name, spec in specs.items():
        if spec.required and name not in named and (anything := spec.anything()) is not None:
            filled[name] = anything
    return filled


def _sequence(event: dict[str, Any]) -> int:
    return int(event["sequence"])


def _narrowed(request: ReplayRequest, pushed: Pushed) -> ReplayRequest:
    """``request`` starting and ending where the pushed bounds say, when its options do not
    say already (the ranges are clamped to the pushed sequences anyway; time bounds only
    save reading, Spark checks them)."""
    if request.from_id is None and request.from_date is None:
        if pushed.first is not None:
            request = replace(request, from_id=str(max(pushed.first, 1)))
        elif pushed.from_time is not None:
            request = replace(request, from_date=_rfc3339(pushed.from_time))
    if request.to_id is None and request.to_date is None:
        if pushed.last is not None:
            request = replace(request, to_id=str(pushed.last))
        elif pushed.to_time is not None:
            # The server keeps nanoseconds, Spark microseconds: a time Spark reads as
            # to_time may be stored up to a microsecond later.
            request = replace(request, to_date=_rfc3339(pushed.to_time + ONE_MICROSECOND))
    return request


def _rfc3339(moment: datetime.datetime) -> str:
    if moment.tzinfo is None:  # Spark hands naive timestamps in the session's local time
        moment = moment.astimezone()
    return moment.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")


def partition_shares(spans: Mapping[str, tuple[int, int]], count: int) -> dict[str, int]:
    """``count`` partitions shared between event types by the width of their spans (at
    least one each)."""
    total = sum(last - first + 1 for first, last in spans.values())
    return {
        name: max(1, round(count * (last - first + 1) / total))
        for name, (first, last) in spans.items()
    }


def event_batches(
    events: Iterable[dict[str, Any]], schema: StructType, event_type: str
) -> Iterator[pyarrow.RecordBatch]:
    """Replayed CloudEvents of ``event_type`` as Arrow record batches of ``schema``: Spark
    takes them whole instead of unpickling a tuple per row. The Arrow schema is the one
    Spark checks them against (timestamps in UTC)."""
    columns = ColumnBuilder(schema, event_type)
    iterator = iter(events)
    while chunk := list(itertools.islice(iterator, ARROW_ROWS)):
        yield columns.batch(chunk)


class ColumnBuilder:
    """Replayed CloudEvents as Arrow columns of a schema: text converted column by column
    by Arrow's casts, a value by value conversion only to name a value that does not fit."""

    def __init__(self, schema: StructType, event_type: str) -> None:
        self.event_type = event_type
        self.arrow = to_arrow_schema(schema, timezone="UTC")
        self.types = {column.name: column.dataType for column in schema.fields}
        self.fields: dict[str, str] = {}
        """Identifier column to field."""
        for name in schema.fieldNames():
            if name not in FIXED_COLUMNS:
                field = name.removeprefix("identifier_")
                self.fields[name] = field if identifier_column(field) == name else name
        payload = self.types.get("payload", StringType())
        self.parse_payload = not isinstance(payload, StringType)

    def batch(self, chunk: list[dict[str, Any]]) -> pyarrow.RecordBatch:
        identifiers = [event["data"].get("identifier") or {} for event in chunk]
        arrays = []
        for column in self.arrow:
            name = column.name
            if name == "sequence":
                array = pyarrow.array([event["sequence"] for event in chunk], type=column.type)
            elif name == "time":
                array = _times([event["time"] for event in chunk], column.type)
            elif name == "event_type":
                array = pyarrow.array([self.event_type] * len(chunk), type=column.type)
            elif name == "payload":
                array = self._payloads(chunk, column.type)
            else:
                field = self.fields[name]
                values = [identifier.get(field) for identifier in identifiers]
                array = self._identifiers(values, column.type, self.types[name], field, chunk)
            arrays.append(array)
        return pyarrow.RecordBatch.from_arrays(arrays, schema=self.arrow)

    def _payloads(self, chunk: list[dict[str, Any]], arrow_type: pyarrow.DataType) -> Any:
        payloads = [event["data"].get("payload") for event in chunk]
        if self.parse_payload:
            try:
                return pyarrow.array(payloads, type=arrow_type)
            except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError) as exc:
                raise ValueError(
                    f"a payload of '{self.event_type}' does not fit payload_schema "
                    f"({arrow_type}): {exc}"
                ) from None
        text = [None if value is None else json.dumps(value, sort_keys=True) for value in payloads]
        return pyarrow.array(text, type=arrow_type)

    def _identifiers(
        self,
        values: list[Any],
        arrow_type: pyarrow.DataType,
        spark_type: DataType,
        field: str,
        chunk: list[dict[str, Any]],
    ) -> Any:
        texts = all(value is None or isinstance(value, str) for value in values)
        if texts:
            try:
                return _cast_text(values, arrow_type)
            except (pyarrow.ArrowInvalid, pyarrow.ArrowNotImplementedError, ValueError):
                pass  # found below, value by value
        convert = converter(spark_type)
        converted = []
        for value, event in zip(values, chunk, strict=True):
            try:
                converted.append(convert(value))
            except UnreadableValue as exc:
                raise ValueError(
                    f"notification {event['sequence']} of '{self.event_type}': field "
                    f"'{field}' {exc}; read it as text with the option typed_columns=false"
                ) from None
        return pyarrow.array(converted, type=arrow_type)


def _times(values: list[str], arrow_type: pyarrow.DataType) -> Any:
    """RFC 3339 storage times (nanoseconds) as the schema's microsecond timestamps."""
    nanoseconds = pyarrow.array(values, type=pyarrow.string()).cast(
        pyarrow.timestamp("ns", tz="UTC")
    )
    return nanoseconds.cast(arrow_type, safe=False)


def _cast_text(values: list[str | None], arrow_type: pyarrow.DataType) -> Any:
    """Canonical text as ``arrow_type``; raises when a value does not fit."""
    text = pyarrow.array(values, type=pyarrow.string())
    if pyarrow.types.is_string(arrow_type):
        return text
    if pyarrow.types.is_date32(arrow_type):
        # The date handler's canonical forms: YYYYMMDD (its default) or YYYY-MM-DD.
        sample = next((value for value in values if value), "")
        if len(sample) == 8:
            parsed = pyarrow.compute.strptime(text, format="%Y%m%d", unit="s")
            return parsed.cast(pyarrow.date32())
    return text.cast(arrow_type)
