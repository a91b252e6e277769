"""JSON as aviso writes and reads it: compact, sorted keys, raw UTF-8, finite numbers only."""

from __future__ import annotations

import json
import math
from typing import Any

# Encoder and decoder instances are built once: json.dumps/json.loads with options build a
# new one per call, which shows up on the notify path.
_SORTED = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, sort_keys=True)
_DECLARED = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any, *, sort_keys: bool = True) -> str:
    """Compact JSON; keys sorted at every level unless a typed body fixes the order."""
    return (_SORTED if sort_keys else _DECLARED).encode(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _bounded_int(text: str) -> int:
    value = int(text)
    if not -(2**63) <= value < 2**64 and not math.isfinite(float(text)):
        raise ValueError("number out of range")
    return value


_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int
)


def loads(data: bytes | str) -> Any:
    """Parse strict JSON: ``NaN``/``Infinity``, numbers overflowing a double and lone
    surrogate escapes (text that could never be written back as UTF-8) are errors."""
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    value = _DECODER.decode(data)
    if "\\u" in data:
        try:
            dumps(value).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError("lone surrogate in string escape") from exc
    return value
