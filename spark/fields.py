"""What a read knows of an event type's identifier fields (from the server's public schema
endpoint), and how a stored canonical value becomes a typed Spark value.

A field's Spark type follows its handler's ``value_kind``: ``integer`` is a long, ``float`` a
double, ``date`` a date, anything else (text, enum, time, expver, spatial, a plugin's own kind)
a string. Conversion is driven by the read's final schema, so a schema given with
``spark.read.schema(...)`` (a string column where the server has an integer, say) is honoured.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.types import (
    DataType,
    DateType,
    DoubleType,
    LongType,
    StringType,
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
PUSHABLE_HANDLERS = frozenset(
    {"StringHandler", "EnumHandler", "IntHandler", "FloatHandler", "DateHandler"}
)
"""The shipped handlers whose validation a read knows: only their fields get Spark's filters
(a plugin's handler might refuse a value, failing the read instead of matching nothing)."""
MAX_PUSHED_TEXT_BYTES = 256


class UnreadableValue(ValueError):
    """A stored identifier value does not convert to its column's type."""


@dataclass(frozen=True)
class FieldSpec:
    """One identifier field as the schema endpoint describes it."""

    name: str
    kind: str
    handler: str = ""
    """The handler's ``type`` (``StringHandler``, ...)."""
    required: bool = False
    operators: frozenset[str] = frozenset()
    bounds: tuple[float, float] | None = None
    """The handler's ``range`` (inclusive), when it has one."""
    values: tuple[str, ...] | None = None
    """An enum's allowed values."""
    max_length: int | None = None

    @classmethod
    def describe(cls, name: str, view: Mapping[str, Any]) -> FieldSpec:
        bounds = view.get("range")
        values = view.get("values")
        max_length = view.get("max_length")
        return cls(
            name=name,
            kind=str(view.get("value_kind") or "text"),
            handler=str(view.get("type") or ""),
            required=bool(view.get("required")),
            operators=frozenset(view.get("operators") or ()),
            bounds=(bounds[0], bounds[1])
            if isinstance(bounds, list) and len(bounds) == 2
            else None,
            values=tuple(str(value) for value in values) if isinstance(values, list) else None,
            max_length=max_length if isinstance(max_length, int) else None,
        )

    def spark_type(self) -> DataType:
        if self.kind == "integer":
            return LongType()
        if self.kind == "float":
            return DoubleType()
        if self.kind == "date":
            return DateType()
        return StringType()

    @property
    def pushable(self) -> bool:
        return self.handler in PUSHABLE_HANDLERS

    def accepts_text(self, value: str) -> bool:
        """Whether the field's handler takes ``value`` (else no stored value equals it)."""
        if self.kind == "enum":
            return self.values is not None and value.lower() in (v.lower() for v in self.values)
        size = len(value.encode("utf-8", "surrogatepass"))
        return bool(value) and (self.max_length is None or size <= self.max_length)

    def integer_bounds(self) -> tuple[int, int]:
        if self.bounds is None:
            return INT64_MIN, INT64_MAX
        return math.ceil(self.bounds[0]), math.floor(self.bounds[1])

    def float_bounds(self) -> tuple[float, float]:
        if self.bounds is None:
            return -math.inf, math.inf
        return float(self.bounds[0]), float(self.bounds[1])

    def anything(self) -> Any:
        """A filter value matching every stored value of this field (``None``: the field's
        handler has none), for a required field the read does not constrain."""
        if self.kind == "text":
            return "*"
        if self.kind == "integer" and {"gte", "between"} & self.operators:
            low, high = self.integer_bounds()
            return {"between": [low, high]} if self.bounds else {"gte": low}
        if self.kind == "float" and "gte" in self.operators:
            bottom, top = self.float_bounds()
            return {"between": [bottom, top]} if self.bounds else {"gte": -1.7976931348623157e308}
        if self.kind == "enum" and "in" in self.operators and self.values:
            return {"in": list(self.values)}
        return None


def merged_fields(described: Mapping[str, Mapping[str, FieldSpec]]) -> dict[str, FieldSpec]:
    """The identifier fields of several event types as one set of columns: a field whose
    Spark type differs between them becomes text; one whose description differs otherwise
    (another range, say) keeps its type but gets no filters pushed."""
    fields: dict[str, FieldSpec] = {}
    for specs in described.values():
        for name, spec in specs.items():
            seen = fields.get(name)
            if seen is None:
                fields[name] = spec
            elif seen.spark_type() != spec.spark_type():
                fields[name] = FieldSpec(name, "text")
            elif seen != spec:
                fields[name] = replace(seen, handler="", required=False)
    return fields


def converter(data_type: DataType) -> Callable[[Any], Any]:
    """From a stored identifier value (text, or a JSON value) to a value of ``data_type``;
    raises :class:`UnreadableValue`."""
    if isinstance(data_type, LongType):
        return _integer
    if isinstance(data_type, DoubleType):
        return _float
    if isinstance(data_type, DateType):
        return _date
    return _text


def _integer(value: Any) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise UnreadableValue(f"{value!r} is not an integer")
    try:
        return int(value)
    except ValueError:
        raise UnreadableValue(f"{value!r} is not an integer") from None


def _float(value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UnreadableValue(f"{value!r} is not a number")
    try:
        return float(value)
    except ValueError:
        raise UnreadableValue(f"{value!r} is not a number") from None


def _date(value: Any) -> datetime.date | None:
    """The date handler's canonical forms: ``YYYYMMDD`` and ``YYYY-MM-DD``."""
    if value is None or value == "":
        return None
    text = str(value)
    try:
        if len(text) == 8 and text.isdigit():
            return datetime.date(int(text[:4]), int(text[4:6]), int(text[6:]))
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise UnreadableValue(f"{value!r} is not a date") from None


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)
