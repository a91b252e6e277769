"""JSON as aviso writes and reads it: compact, sorted keys, raw UTF-8, finite numbers only."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

# typeshed does not declare the C encoder json.encoder exposes (None without the C module).
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

import orjson

# Encoder and decoder instances are built once: json.dumps/json.loads with options build a
# new one per call, which shows up on the notify path.
_SORTED = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, sort_keys=True)
_DECLARED = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _c_encoder(sort_keys: bool) -> Any:
    """The C encoder ``JSONEncoder.encode`` builds on every call, built once instead.

    Without the circular-reference markers: what aviso encodes is a parsed JSON document or
    a mapping the host built, never a cycle. Output is byte for byte ``JSONEncoder``'s.
    """
    if c_make_encoder is None:
        return None
    encoder = _SORTED if sort_keys else _DECLARED
    return c_make_encoder(
        None, encoder.default, encode_basestring, None, ":", ",", sort_keys, False, True
    )


_C_SORTED = _c_encoder(True)
_C_DECLARED = _c_encoder(False)


def dumps(value: Any, *, sort_keys: bool = True) -> str:
    """Compact JSON; keys sorted at every level unless a typed body fixes the order."""
    encoder = _C_SORTED if sort_keys else _C_DECLARED
    if encoder is None:
        return (_SORTED if sort_keys else _DECLARED).encode(value)
    return "".join(encoder(value, 0))


def dumps_sorted_texts(mapping: Mapping[str, str]) -> str:
    """``dumps(mapping)`` of text keys and values, by orjson: the same text (orjson sorts
    keys by code point too) at a fifth of the cost; a lone surrogate, which orjson refuses,
    goes to the standard encoder."""
    try:
        return orjson.dumps(mapping, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:
        return dumps(mapping)


def dumps_texts(mapping: Mapping[str, Any]) -> bytes:
    """``dumps(mapping, sort_keys=False)`` as UTF-8, by orjson when every value is a string:
    for string keys and values (lone surrogates aside, which it refuses) its output is byte
    for byte the standard encoder's, at a fifth of the cost."""
    if all(type(value) is str for value in mapping.values()):
        try:
            return orjson.dumps(mapping)
        except orjson.JSONEncodeError:
            pass
    return dumps(mapping, sort_keys=False).encode()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


_MAX_FINITE_INT_DIGITS = 309
"""Digits of the largest integer a double holds (about 1.8e308)."""


def _bounded_int(text: str) -> int:
    # Counted first: int() refuses thousands of digits with a message of its own.
    if len(text.lstrip("-")) > _MAX_FINITE_INT_DIGITS:
        raise ValueError("number out of range")
    value = int(text)
    if not -(2**63) <= value < 2**64 and not math.isfinite(float(text)):
        raise ValueError("number out of range")
    return value


_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int
)
# orjson reads integers beyond 64 bits as floats where the standard parser keeps them exact:
# a text holding 19 digits in a row (inside a string or not) is left to the standard parser.
# Bytes are searched for them as a run in the text with every digit made "0" and every other
# byte a space: a table lookup per byte and a substring search, a third of a regex search.
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_DIGITS = b"0" * 19
_LONG_DIGITS_TEXT = re.compile(r"[0-9]{19}", re.ASCII)


def loads(data: bytes | str) -> Any:
    """Parse strict JSON: ``NaN``/``Infinity``, numbers overflowing a double and lone
    surrogate escapes (text that could never be written back as UTF-8) are errors."""
    # orjson accepts exactly these documents (and parses them to the same values) except
    # integers beyond 64 bits; whatever it refuses is parsed again below, so every error
    # keeps the standard parser's wording.
    if (
        _LONG_DIGITS not in data.translate(_DIGITS_AS_ZERO)
        if isinstance(data, bytes)
        else _LONG_DIGITS_TEXT.search(data) is None
    ):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    value = _DECODER.decode(data)
    if "\\u" in data:
        try:
            dumps(value).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError("lone surrogate in string escape") from exc
    return value
