"""``spark.read.format("aviso")``: a server's stored history as a DataFrame.

Options (keys are case-insensitive):

- ``event_type`` (required) and ``url`` (required): the event type and the server's base URL.
- ``identifier.<field>``: the identifier filter, as in a replay request (wildcards and
  constraints included); fields the schema requires must be given.
- ``from_id`` or ``from_date``: where history starts; neither means all of it.
- ``authorization``: an ``Authorization`` header value passed through as is.
- ``identifier_columns``: comma-separated fields to make columns of; default every field
  of the event type's schema (read from the server's public schema endpoint).
- ``timeout_seconds`` (default 60): the read timeout of one replay request.

Columns: ``sequence`` (long), ``time`` (timestamp), one string column per identifier
field (non-text values as JSON; a field named like a fixed column, such as ``time``, becomes
``identifier_<field>``), ``payload`` (the payload as a JSON string, null when the
notification has none). One partition reads the history through ``POST /api/v1/replay``,
paging past the server's replay limit.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from aviso_spark.replay import ReplayRequest, identifier_fields, replay

IDENTIFIER_PREFIX = "identifier."
FIXED_COLUMNS = ("sequence", "time", "payload")


@dataclass(frozen=True)
class ReadOptions:
    request: ReplayRequest
    identifier_columns: tuple[str, ...] | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        for key in ("event_type", "url"):
            if not options.get(key):
                raise ValueError(f"reading from the aviso data source needs the option '{key}'")
        if options.get("from_id") and options.get("from_date"):
            raise ValueError("give from_id or from_date, not both")
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
            authorization=options.get("authorization") or None,
            timeout_seconds=float(options.get("timeout_seconds", "60")),
        )
        return cls(
            request,
            tuple(name.strip() for name in columns.split(",") if name.strip()) if columns else None,
        )


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
        self.columns = schema.fieldNames()

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for event in replay(self.request):
            data = event["data"]
            payload = data.get("payload")
            values = {
                identifier_column(name): _text(value)
                for name, value in (data.get("identifier") or {}).items()
            }
            values["sequence"] = event["sequence"]
            values["time"] = datetime.datetime.fromisoformat(event["time"])
            values["payload"] = None if payload is None else json.dumps(payload, sort_keys=True)
            yield tuple(values.get(column) for column in self.columns)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)
