"""Spark filters as replay requests: what ``.where()`` on an aviso read asks of the server.

Spark hands the reader the conjuncts of a query's filter (``DataSourceReader.pushFilters``);
each one it can express becomes part of the replay:

- ``sequence`` =, IN, <, <=, >, >=: the read's sequence range (``from_id`` .. ``to_id``),
  exact, so Spark does not evaluate them again;
- ``time`` bounds: ``from_date`` / ``to_date``;
- ``event_type`` = / IN: which event types a read of several reads;
- an identifier column's =, IN, and on integer and float fields <, <=, >, >=: the field's
  replay filter, a scalar (equality) or a constraint (``in``, ``between``, ``gte``, ``lte``)
  where the field's handler accepts one. IN on a field without constraints (text, dates),
  and a bounded date range, become several replays (one per value, at most
  :data:`MAX_ALTERNATIVES` in all), merged by sequence.

Every filter but the sequence ones is also handed back to Spark: the server narrows the read,
Spark keeps the exact semantics (a canonicalised value, a timestamp's precision, ``*``, which
the server reads as a wildcard). A filter that matches nothing the server stores (a value
outside a field's range, an enum value not declared) makes the read empty without a request.
"""

from __future__ import annotations

import datetime
import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from aviso_spark.fields import MAX_PUSHED_TEXT_BYTES, FieldSpec

MAX_ALTERNATIVES = 32
"""The most replays one range of a read fans out to (IN lists and date ranges)."""
MAX_SEQUENCE = 2**64 - 1

_PUSHABLE = (EqualTo, EqualNullSafe, In, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


@dataclass
class Interval:
    """A closed interval built from comparisons (``None``: unbounded on that side)."""

    low: Any = None
    high: Any = None
    values: set[Any] | None = None
    """An equality or IN's values (intersected across filters)."""

    def restrict(self, item: Filter, step: Any) -> None:
        """Narrow by ``item`` (=, IN or a comparison); ``step``: the smallest increment of
        the type (1, one day), or ``None`` for a type without one (strict bounds then stay
        loose, Spark evaluating them)."""
        value: Any = getattr(item, "value", None)
        if isinstance(item, EqualTo | EqualNullSafe):
            self._keep({value})
        elif isinstance(item, In):
            self._keep(set(item.value))
        elif isinstance(item, GreaterThan | GreaterThanOrEqual):
            low = value + step if isinstance(item, GreaterThan) and step is not None else value
            self.low = low if self.low is None else max(self.low, low)
        elif isinstance(item, LessThan | LessThanOrEqual):
            high = value - step if isinstance(item, LessThan) and step is not None else value
            self.high = high if self.high is None else min(self.high, high)

    def _keep(self, values: set[Any]) -> None:
        self.values = values if self.values is None else self.values & values

    def members(self) -> set[Any] | None:
        if self.values is None:
            return None
        return {value for value in self.values if self.contains(value)}

    def contains(self, value: Any) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def empty(self) -> bool:
        members = self.members()
        if members is not None:
            return not members
        return self.low is not None and self.high is not None and self.low > self.high


@dataclass
class Pushed:
    """What a read's filters ask of the server."""

    identifier: dict[str, Any] = field(default_factory=dict)
    """Filters of single values or constraints, field by field."""
    choices: dict[str, list[Any]] = field(default_factory=dict)
    """Fields read one value at a time: one replay per combination."""
    first: int | None = None
    last: int | None = None
    from_time: datetime.datetime | None = None
    to_time: datetime.datetime | None = None
    event_types: set[str] | None = None
    empty: bool = False

    def alternatives(self, base: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The replay identifiers of the read: ``base`` (the options, required fields
        filled) with the pushed filters, once per combination of ``choices``."""
        merged = {**base, **self.identifier}
        names = sorted(self.choices)
        combinations = itertools.product(*(self.choices[name] for name in names))
        return [merged | dict(zip(names, values, strict=True)) for values in combinations]


def push(
    filters: Iterable[Filter], fields: Mapping[str, FieldSpec], columns: Mapping[str, str]
) -> tuple[Pushed, list[Filter]]:
    """The replay that ``filters`` ask for, and the filters Spark must still evaluate.

    ``fields``: the identifier fields the server knows (every event type read has them),
    ``columns``: column name to identifier field.
    """
    pushed = Pushed()
    remaining: list[Filter] = []
    by_field: dict[str, list[Filter]] = {}
    sequence = Interval()
    times = Interval()
    for item in filters:
        attribute = getattr(item, "attribute", None)
        column = attribute[0] if attribute is not None and len(attribute) == 1 else None
        supported = isinstance(item, _PUSHABLE)
        if column == "sequence" and supported and _all_integers(item):
            sequence.restrict(item, 1)
            if isinstance(item, In):
                remaining.append(item)  # pushed as its span only
            continue
        remaining.append(item)
        if not supported or getattr(item, "value", None) is None:
            continue
        if column == "time" and _all_times(item) and not isinstance(item, In):
            times.restrict(item, None)
        elif column == "event_type" and isinstance(item, EqualTo | EqualNullSafe | In):
            values = set(item.value) if isinstance(item, In) else {item.value}
            named = {value for value in values if isinstance(value, str)}
            pushed.event_types = named if pushed.event_types is None else pushed.event_types & named
        elif column is not None and column in columns and columns[column] in fields:
            by_field.setdefault(columns[column], []).append(item)
    if sequence.empty() or times.empty() or pushed.event_types == set():
        pushed.empty = True
    pushed.first = _sequence_bound(sequence, low=True)
    pushed.last = _sequence_bound(sequence, low=False)
    pushed.from_time, pushed.to_time = times.low, times.high
    for name, items in by_field.items():
        _push_field(pushed, fields[name], items)
    _cap_choices(pushed)
    return pushed, remaining


def _sequence_bound(interval: Interval, low: bool) -> int | None:
    members = interval.members()
    if members:
        return int(min(members) if low else max(members))
    bound = interval.low if low else interval.high
    return None if bound is None else max(0, min(int(bound), MAX_SEQUENCE))


def _all_integers(item: Filter) -> bool:
    values = item.value if isinstance(item, In) else (getattr(item, "value", None),)
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _all_times(item: Filter) -> bool:
    return isinstance(getattr(item, "value", None), datetime.datetime)


def _push_field(pushed: Pushed, spec: FieldSpec, items: list[Filter]) -> None:
    if not spec.pushable:
        return
    if spec.kind == "integer":
        _push_number(pushed, spec, items, integer=True)
    elif spec.kind == "float":
        _push_number(pushed, spec, items, integer=False)
    elif spec.kind == "date":
        _push_date(pushed, spec, items)
    elif spec.kind in ("text", "enum"):
        _push_text(pushed, spec, items)


def _push_text(pushed: Pushed, spec: FieldSpec, items: list[Filter]) -> None:
    interval = Interval()
    for item in items:
        if isinstance(item, EqualTo | EqualNullSafe | In):
            interval.restrict(item, None)
    members = interval.members()
    # A value holding '*' is never pushed (the server would read it as a wildcard), nor one
    # so long that the request itself might be refused.
    if members is None or not all(_plain_text(value) for value in members):
        return
    # What the handler would refuse (an undeclared enum value, one past max_length) is
    # never stored: it matches nothing.
    accepted = sorted(value for value in members if spec.accepts_text(value))
    if not accepted:
        pushed.empty = True
    elif len(accepted) == 1:
        pushed.identifier[spec.name] = accepted[0]
    elif spec.kind == "enum" and "in" in spec.operators:
        pushed.identifier[spec.name] = {"in": accepted}
    else:
        pushed.choices[spec.name] = accepted


def _plain_text(value: Any) -> bool:
    if not isinstance(value, str) or "*" in value:
        return False
    return len(value.encode("utf-8", "surrogatepass")) <= MAX_PUSHED_TEXT_BYTES


def _push_number(pushed: Pushed, spec: FieldSpec, items: list[Filter], integer: bool) -> None:
    interval = Interval()
    for item in items:
        if _numeric(getattr(item, "value", None), integer, isinstance(item, In)):
            interval.restrict(item, 1 if integer else None)
    low, high = spec.integer_bounds() if integer else spec.float_bounds()
    interval.low = low if interval.low is None else max(interval.low, low)
    interval.high = high if interval.high is None else min(interval.high, high)
    if interval.empty():
        pushed.empty = True
        return
    members = interval.members()
    operators = spec.operators
    if members is not None:
        ordered = sorted(members)
        if len(ordered) == 1:
            pushed.identifier[spec.name] = ordered[0]
        elif "in" in operators:
            pushed.identifier[spec.name] = {"in": ordered}
        return
    limited = (interval.low > low, interval.high < high)
    if limited == (True, True) and "between" in operators:
        pushed.identifier[spec.name] = {"between": [interval.low, interval.high]}
    elif limited[0] and "gte" in operators:
        pushed.identifier[spec.name] = {"gte": interval.low}
    elif limited[1] and "lte" in operators:
        pushed.identifier[spec.name] = {"lte": interval.high}


def _numeric(value: Any, integer: bool, many: bool) -> bool:
    values = value if many else (value,)
    if integer:
        return all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    return all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values
    )


def _push_date(pushed: Pushed, spec: FieldSpec, items: list[Filter]) -> None:
    interval = Interval()
    for item in items:
        values = item.value if isinstance(item, In) else (getattr(item, "value", None),)
        if all(_is_date(value) for value in values):
            interval.restrict(item, datetime.timedelta(days=1))
    if interval.empty():
        pushed.empty = True
        return
    members = interval.members()
    if members is None and interval.low is not None and interval.high is not None:
        days = (interval.high - interval.low).days + 1
        if days <= MAX_ALTERNATIVES:
            members = {interval.low + datetime.timedelta(days=n) for n in range(days)}
    if members is None:
        return
    ordered = [value.isoformat() for value in sorted(members)]
    if len(ordered) == 1:
        pushed.identifier[spec.name] = ordered[0]
    else:
        pushed.choices[spec.name] = ordered


def _is_date(value: Any) -> bool:
    return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)


def _cap_choices(pushed: Pushed) -> None:
    """Leave the widest fan-outs to Spark until the combinations fit the cap."""
    while math.prod(len(values) for values in pushed.choices.values()) > MAX_ALTERNATIVES:
        widest = max(pushed.choices, key=lambda name: len(pushed.choices[name]))
        del pushed.choices[widest]
