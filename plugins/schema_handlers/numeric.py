"""Integer and floating-point identifier fields, with optional inclusive ranges."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from aviso_plugins import hookimpl
from aviso_plugins._shared.constraints import (
    NUMERIC_OPERATORS,
    compile_constraint,
    float_domain,
    integer_domain,
)
from aviso_plugins._shared.numbers import (
    float_display,
    json_scalar_text,
    parse_finite_decimal,
    parse_int_text,
)
from aviso_plugins.types import ConstraintPredicate, FieldHandler, InvalidValue

_INT64_SAFE_DIGITS = 19
"""Fewer digits than this always fit in a signed 64-bit integer."""


def _range_option(item_type: str) -> Mapping[str, Any]:
    return {"type": "array", "items": {"type": item_type}, "minItems": 2, "maxItems": 2}


class IntHandler(FieldHandler):
    """Signed 64-bit integers in INT syntax; canonical plain decimal (``007`` -> ``7``)."""

    type_name = "IntHandler"
    value_kind = "integer"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {"range": _range_option("integer")}
    operators = NUMERIC_OPERATORS

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        self.bounds: tuple[int, int] | None = _ordered(definition.get("range"))
        self._domain = integer_domain(self.bounds)

    def canonicalise(self, text: str) -> str:
        # Plain ASCII digits short enough for any int64 (what a JSON integer becomes) need
        # no grammar: int() reads them exactly.
        if len(text) < _INT64_SAFE_DIGITS and text.isdigit() and text.isascii():
            value = int(text)
            _check_range(self.field, value, self.bounds, text)
            return str(value)
        try:
            value = parse_int_text(text)
        except ValueError as exc:
            raise InvalidValue(
                f"Field '{self.field}' must be a valid integer, got: '{text}'", str(exc)
            ) from exc
        _check_range(self.field, value, self.bounds, text)
        return str(value)

    def compile_constraint(self, operator: str, operand: Any) -> ConstraintPredicate:
        return compile_constraint(self.field, operator, operand, self._domain)

    def example_value(self) -> int:
        example: int = _clamped(1, self.bounds)
        return example


class FloatHandler(FieldHandler):
    """Finite numbers in DEC syntax; canonical FLOAT DISPLAY (``3.50`` -> ``3.5``)."""

    type_name = "FloatHandler"
    value_kind = "float"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {"range": _range_option("number")}
    operators = NUMERIC_OPERATORS

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        configured = definition.get("range")
        self.bounds: tuple[float, float] | None = (
            None if configured is None else _ordered(_finite_floats(configured))
        )
        self._domain = float_domain(self.bounds)

    def canonicalise(self, text: str) -> str:
        try:
            value = parse_finite_decimal(text)
        except ValueError as exc:
            raise InvalidValue(
                f"Field '{self.field}' must be a valid finite number, got: '{text}'", str(exc)
            ) from exc
        _check_range(self.field, value, self.bounds, text)
        return float_display(value)

    def compile_constraint(self, operator: str, operand: Any) -> ConstraintPredicate:
        return compile_constraint(self.field, operator, operand, self._domain)

    def example_value(self) -> float:
        example: float = _clamped(1.5, self.bounds)
        return example


def _clamped(value: Any, bounds: tuple[Any, Any] | None) -> Any:
    return value if bounds is None else min(max(value, bounds[0]), bounds[1])


def _finite_floats(configured: Sequence[int | float]) -> list[float]:
    # A non-finite bound would also break the public schema view (JSON has no Infinity).
    message = f"FloatHandler 'range' bounds must be finite, got {configured}"
    try:
        bounds = [float(bound) for bound in configured]
    except OverflowError as exc:
        raise ValueError(message) from exc
    if not all(map(math.isfinite, bounds)):
        raise ValueError(message)
    return bounds


def _ordered(configured: Sequence[Any] | None) -> tuple[Any, Any] | None:
    if configured is None:
        return None
    low, high = configured
    if low > high:
        raise ValueError(f"'range' minimum {low} exceeds maximum {high}")
    return low, high


def _check_range(field: str, value: float, bounds: tuple[Any, Any] | None, text: str) -> None:
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        low, high = (json_scalar_text(bound) for bound in bounds)
        raise InvalidValue(f"Field '{field}' must be within range [{low}, {high}], got: {text}")


@hookimpl
def aviso_field_handlers() -> list[type[FieldHandler]]:
    return [IntHandler, FloatHandler]
