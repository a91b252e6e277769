"""Text-valued identifier fields: free strings, enumerations and experiment versions."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from aviso_plugins import hookimpl
from aviso_plugins._shared.constraints import ENUM_OPERATORS, compile_constraint, enum_domain
from aviso_plugins.types import ConstraintPredicate, FieldHandler, InvalidValue

_NUMERIC_EXPVER = re.compile(r"\+?([0-9]+)")
_EXPVER_MAX = 2**32 - 1
_EXPVER_WIDTH = 4
_EXAMPLE_TEXT = "example"


class StringHandler(FieldHandler):
    """Any non-empty text, optionally limited to ``max_length`` UTF-8 bytes; kept unchanged."""

    type_name = "StringHandler"
    value_kind = "text"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "max_length": {"type": "integer", "minimum": 0},
    }

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        self.max_length: int | None = definition.get("max_length")

    def canonicalise(self, text: str) -> str:
        if not text:
            raise InvalidValue(f"Field '{self.field}' cannot be empty")
        if self.max_length is not None:
            # surrogatepass: a lone surrogate (legal in Python's JSON parser) must be
            # counted, not crash the request.
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > self.max_length:
                raise InvalidValue(
                    f"Field '{self.field}' must be at most {self.max_length} bytes long "
                    f"(UTF-8), got {size} bytes"
                )
        return text

    def example_value(self) -> str | None:
        if self.max_length == 0:
            return None  # no text fits, and empty text is refused
        return _EXAMPLE_TEXT[: self.max_length]


class EnumHandler(FieldHandler):
    """One of ``values``, compared and canonicalised in Unicode lower case."""

    type_name = "EnumHandler"
    value_kind = "enum"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "values": {"type": "array", "items": {"type": "string"}},
    }
    required_options = frozenset({"values"})
    operators = ENUM_OPERATORS

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        self.values: list[str] = list(definition["values"])
        if not self.values:
            raise ValueError("EnumHandler 'values' must not be empty")
        self._allowed = frozenset(value.lower() for value in self.values)
        self._domain = enum_domain(self.values)

    def canonicalise(self, text: str) -> str:
        lowered = text.lower()
        if lowered not in self._allowed:
            raise InvalidValue(
                f"Field '{self.field}' must be one of "
                f"{json.dumps(self.values, ensure_ascii=False)}, got: '{text}'"
            )
        return lowered

    def compile_constraint(self, operator: str, operand: Any) -> ConstraintPredicate:
        return compile_constraint(self.field, operator, operand, self._domain)

    def example_value(self) -> str:
        return self.values[0]


class ExpverHandler(FieldHandler):
    """Experiment versions: numbers zero-padded to four digits, anything else lower-cased.

    An empty value stands for ``default`` when one is configured.
    """

    type_name = "ExpverHandler"
    value_kind = "text"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {"default": {"type": "string"}}

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        default: str | None = definition.get("default")
        if default == "":
            raise ValueError("ExpverHandler 'default' must not be empty")
        self._default = None if default is None else _expver_canonical(default)

    def canonicalise(self, text: str) -> str:
        if text:
            return _expver_canonical(text)
        if self._default is None:
            raise InvalidValue(f"Field '{self.field}' cannot be empty")
        return self._default

    def example_value(self) -> str:
        return self._default or "0001"


def _expver_canonical(text: str) -> str:
    match = _NUMERIC_EXPVER.fullmatch(text)
    if match is not None:
        significant = match.group(1).lstrip("0") or "0"
        # The length test keeps int() off arbitrarily long digit strings.
        if len(significant) <= len(str(_EXPVER_MAX)) and int(significant) <= _EXPVER_MAX:
            return significant.zfill(_EXPVER_WIDTH)
    return text.lower()


@hookimpl
def aviso_field_handlers() -> list[type[FieldHandler]]:
    return [StringHandler, EnumHandler, ExpverHandler]
