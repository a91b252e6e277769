"""JSON as aviso writes and reads it: compact, sorted keys, raw UTF-8, finite numbers only."""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
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


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Brackets become +1 / -1 (as signed bytes), everything else is deleted.
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def nesting_exceeds(data: bytes, limit: int) -> bool:
    """Whether the arrays/objects of a JSON text nest deeper than ``limit``, found without
    parsing it (the parser recurses and fails with ``RecursionError`` near 1,000 levels).

    A text with no more brackets than ``limit`` cannot nest deeper: counting them is one C
    pass, which is all an ordinary body costs. Only bracket-rich texts are scanned: strings
    removed, then a running sum over the brackets.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", data).translate(_BRACKETS, _NOT_BRACKETS)
    return max(accumulate(memoryview(brackets).cast("b")), default=0) > limit
