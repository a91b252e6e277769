"""Property tests (hypothesis) of the topic codec, the start cursors and every field handler.

Budgets are bounded (``max_examples``) so they run in CI; a failure here is a bug to fix
with a regression test next to the unit tests of the module concerned.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aviso_host.cursors import CursorError, parse_from_date, parse_from_id
from aviso_host.plugins import discover
from aviso_plugins._shared.numbers import json_scalar_text, parse_finite_decimal
from aviso_plugins.topics import (
    TopicDecodeError,
    TopicPattern,
    build_topic,
    decode_token,
    decode_topic,
    encode_token,
)
from aviso_plugins.types import FieldHandler, InvalidValue

BUDGET = settings(max_examples=300, deadline=None)
HANDLERS = discover().field_handlers
DEFINITIONS: dict[str, dict[str, Any]] = {
    "StringHandler": {"required": True, "max_length": 16},
    "EnumHandler": {"required": True, "values": ["Danube", "Rhine", "*", "1"]},
    "ExpverHandler": {"required": True, "default": "0001"},
    "DateHandler": {"required": True},
    "TimeHandler": {"required": True},
    "IntHandler": {"required": True, "range": [-1000, 1000]},
    "FloatHandler": {"required": True, "range": [-5.0, 40.0]},
    "PolygonHandler": {"required": True},
}
SCALARS = st.one_of(
    st.text(max_size=24),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)


def _handler(type_name: str) -> FieldHandler:
    return HANDLERS[type_name]("field", {"type": type_name, **DEFINITIONS[type_name]})


@BUDGET
@given(st.text())
def test_token_encoding_round_trips(token: str) -> None:
    encoded = encode_token(token)
    assert not set(encoded) & {".", "*", ">", " ", "\t", "\r", "\n"}
    assert decode_token(encoded) == token


@BUDGET
@given(st.lists(st.text(), min_size=1, max_size=6))
def test_topics_round_trip_and_match_their_own_pattern(tokens: list[str]) -> None:
    topic = build_topic(tokens)
    assert decode_topic(topic) == tuple(tokens)
    assert TopicPattern(tuple(tokens)).matches(topic)
    assert TopicPattern((tokens[0], *[None] * (len(tokens) - 1))).matches(topic)


@BUDGET
@given(st.text())
def test_decoding_arbitrary_text_fails_only_cleanly(text: str) -> None:
    with contextlib.suppress(TopicDecodeError):
        decode_topic(text)


@BUDGET
@given(st.sampled_from(sorted(DEFINITIONS)), SCALARS)
def test_handlers_reject_cleanly_or_canonicalise_idempotently(type_name: str, value: Any) -> None:
    handler = _handler(type_name)
    try:
        canonical = handler.canonicalise(json_scalar_text(value))
    except InvalidValue:
        return
    assert handler.canonicalise(canonical) == canonical


@BUDGET
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_text_round_trips(value: float) -> None:
    assert parse_finite_decimal(json_scalar_text(value)) == value or (
        value == 0 and math.copysign(1, value) < 0
    )


@BUDGET
@given(st.floats(min_value=-5.0, max_value=40.0, allow_nan=False))
def test_float_handler_keeps_the_value(value: float) -> None:
    canonical = _handler("FloatHandler").canonicalise(json_scalar_text(value))
    assert parse_finite_decimal(canonical) == value


@BUDGET
@given(st.text(max_size=30))
def test_cursors_fail_only_with_a_client_error(text: str) -> None:
    for parse in (parse_from_id, parse_from_date):
        with contextlib.suppress(CursorError):
            parse(text)
