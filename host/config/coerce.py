"""Bring raw values to the types the JSON schema asks for, before it is checked.

Environment overrides are always text and aviso-server accepts ``port: "8000"`` in files,
so wherever the schema expects an integer, number or boolean, text is converted (or
rejected naming the key). The walk follows the schema itself, which gives backend
``options_schema`` sections the same treatment as the host's own keys. Explicit ``null``
means "not set" and is dropped first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from aviso_host.config.errors import KeyPath, at

NO_TEXT_COERCION = "x-aviso-no-text-coercion"
"""Schema annotation: values below stay exactly as written (identifier field definitions)."""

_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_BOOLEANS = {
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}


def drop_nulls(value: Any) -> Any:
    """A copy of ``value`` without mapping entries whose value is ``None``."""
    if isinstance(value, Mapping):
        return {key: drop_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list | tuple):
        return [drop_nulls(item) for item in value]
    return value


def coerce_text(value: Any, schema: Any, path: KeyPath = ()) -> Any:
    """A copy of ``value`` with text converted wherever ``schema`` expects another type."""
    if not isinstance(schema, Mapping) or schema.get(NO_TEXT_COERCION):
        return value
    if isinstance(value, str):
        return _convert(value, schema.get("type"), path)
    if isinstance(value, Mapping):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        return {
            key: coerce_text(item, properties.get(key, extra), (*path, key))
            for key, item in value.items()
        }
    if isinstance(value, list):
        items = schema.get("items", True)
        return [coerce_text(item, items, (*path, index)) for index, item in enumerate(value)]
    return value


def _parse_integer(text: str) -> int | None:
    return int(text) if _INTEGER.fullmatch(text) else None


def _parse_number(text: str) -> int | float | None:
    if _INTEGER.fullmatch(text):
        return int(text)
    if _NUMBER.fullmatch(text):
        number = float(text)
        return number if math.isfinite(number) else None
    return None


def _parse_boolean(text: str) -> bool | None:
    return _BOOLEANS.get(text.lower())


_PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "integer": (_parse_integer, "an integer"),
    "number": (_parse_number, "a number"),
    "boolean": (_parse_boolean, "a boolean (true/false, yes/no, on/off, 1/0)"),
}


def _convert(text: str, declared: Any, path: KeyPath) -> Any:
    types = [declared] if isinstance(declared, str) else list(declared or ())
    wanted = [name for name in types if name in _PARSERS]
    for name in wanted:
        converted = _PARSERS[name][0](text)
        if converted is not None:
            return converted
    # Text stays text when the schema allows it (or says nothing about types).
    if not wanted or "string" in types:
        return text
    expected = " or ".join(_PARSERS[name][1] for name in wanted)
    raise at(path, f"{text!r} is not {expected}")
