"""Constraint objects (``{"gte": 2}``) compiled into predicates over stored canonical values.

A handler describes how its operands and stored values are read with an
:class:`OperandDomain` and delegates to :func:`compile_constraint`. Operands are checked
once, when the watch/replay request arrives; the returned predicate only parses the stored
value and compares, because it runs for every candidate notification.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from aviso_plugins._shared.numbers import INT64_MAX, INT64_MIN, parse_finite_decimal, parse_int_text
from aviso_plugins.types import ConstraintPredicate, InvalidValue

NUMERIC_OPERATORS = frozenset({"eq", "in", "gt", "gte", "lt", "lte", "between"})
ENUM_OPERATORS = frozenset({"eq", "in"})

_SINGLE_VALUE: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


class _Orderable(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...

    def __le__(self, other: Any, /) -> bool: ...


V = TypeVar("V", bound=_Orderable)


@dataclass(frozen=True, slots=True)
class OperandDomain(Generic[V]):
    """How one field's constraint operands and stored values become comparable values.

    Values must be hashable (``in`` builds a set).
    """

    parse_operand: Callable[[Any], V]
    """A JSON operand -> value; raises ``ValueError`` with a client-safe reason."""
    parse_stored: Callable[[str], V | None]
    """A stored canonical text -> value, ``None`` when unreadable (it then never matches)."""


Bounds = tuple[Any, Any]
"""An inclusive ``(min, max)`` range as configured."""


def compile_constraint(
    field: str, operator_name: str, operand: Any, domain: OperandDomain[V]
) -> ConstraintPredicate:
    """Check ``{operator_name: operand}`` and return the predicate it stands for.

    Shapes: ``eq``/``gt``/``gte``/``lt``/``lte`` take one value, ``in`` a non-empty array,
    ``between`` an array ``[min, max]`` with ``min <= max`` (inclusive). Raises
    :class:`InvalidValue` naming the field.
    """
    try:
        test = _compile_test(operator_name, operand, domain)
    except ValueError as exc:
        raise InvalidValue(
            f"Field '{field}' constraint '{operator_name}': {exc}", str(exc)
        ) from exc
    parse_stored = domain.parse_stored

    def predicate(stored: str) -> bool:
        value = parse_stored(stored)
        return value is not None and test(value)

    return predicate


def integer_domain(bounds: Bounds | None = None) -> OperandDomain[int]:
    """JSON integers within signed 64 bits (and ``bounds``); stored values read as INT."""

    def parse_operand(operand: Any) -> int:
        if isinstance(operand, bool) or not isinstance(operand, int):
            raise ValueError(f"operand must be an integer, got: {_show(operand)}")
        if not INT64_MIN <= operand <= INT64_MAX:
            raise ValueError(f"operand {operand} is outside the signed 64-bit range")
        _check_bounds(operand, bounds, operand)
        return operand

    return OperandDomain(parse_operand, _lenient(parse_int_text))


def float_domain(bounds: Bounds | None = None) -> OperandDomain[float]:
    """Finite JSON numbers, integers included (and within ``bounds``); stored values read as DEC.

    Comparison is exact: ``0.3`` does not equal ``0.30000000000000004``.
    """

    def parse_operand(operand: Any) -> float:
        if isinstance(operand, bool) or not isinstance(operand, int | float):
            raise ValueError(f"operand must be a number, got: {_show(operand)}")
        try:
            number = float(operand)
        except OverflowError:  # an integer beyond the double range
            number = math.inf
        if not math.isfinite(number):
            raise ValueError(f"operand must be finite, got: {_show(operand)}")
        _check_bounds(number, bounds, operand)
        return number

    return OperandDomain(parse_operand, _lenient(parse_finite_decimal))


def enum_domain(values: Sequence[str]) -> OperandDomain[str]:
    """JSON strings naming one of ``values`` (case-insensitive); everything compared lower-case."""
    allowed = frozenset(value.lower() for value in values)

    def parse_operand(operand: Any) -> str:
        if not isinstance(operand, str):
            raise ValueError(f"operand must be a string, got: {_show(operand)}")
        lowered = operand.lower()
        if lowered not in allowed:
            raise ValueError(f"operand {_show(operand)} is not one of {_show(list(values))}")
        return lowered

    return OperandDomain(parse_operand, str.lower)


def _compile_test(
    operator_name: str, operand: Any, domain: OperandDomain[V]
) -> Callable[[V], bool]:
    if operator_name in _SINGLE_VALUE:
        if isinstance(operand, list | dict):
            raise ValueError(f"expects a single value, got: {_show(operand)}")
        target = domain.parse_operand(operand)
        compare = _SINGLE_VALUE[operator_name]
        return lambda value: compare(value, target)
    if operator_name == "in":
        if not isinstance(operand, list) or not operand:
            raise ValueError(f"expects a non-empty array, got: {_show(operand)}")
        return frozenset(map(domain.parse_operand, operand)).__contains__
    if operator_name == "between":
        if not isinstance(operand, list) or len(operand) != 2:
            raise ValueError(f"expects an array [min, max], got: {_show(operand)}")
        low, high = map(domain.parse_operand, operand)
        if not low <= high:
            raise ValueError(f"requires min <= max, got: {_show(operand)}")
        return lambda value: low <= value <= high
    raise ValueError("unsupported operator")


def _check_bounds(value: Any, bounds: Bounds | None, shown: Any) -> None:
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        low, high = bounds
        raise ValueError(
            f"operand {_show(shown)} is outside the field's range [{_show(low)}, {_show(high)}]"
        )


def _lenient(parse: Callable[[str], V]) -> Callable[[str], V | None]:
    def attempt(text: str) -> V | None:
        try:
            return parse(text)
        except ValueError:
            return None

    return attempt


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
