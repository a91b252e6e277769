"""The notify path's quick routes answer exactly as the full ones.

A notify is planned in one pass when its schema's values are all scalars, its body parsed by
orjson and its JSON written by reusable C encoders; whatever the quick route does not accept
goes through the full checks and the standard parser, so every answer and every error must be
the same either way.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aviso_host.config import settings_from_document
from aviso_host.cursors import now_whole_seconds
from aviso_host.encoding import dumps, dumps_sorted_texts, dumps_texts, loads
from aviso_host.errors import ApiError, Endpoint
from aviso_host.identifiers import (
    check_identifier_values,
    check_payload_size,
    check_topic_size,
    plan_checked_notification,
    plan_notification,
)
from aviso_host.plugins import discover
from aviso_host.request_id import new_request_id, with_request_id
from aviso_host.requests import ALLOWED_FIELDS, _parse_standard, parse_body
from aviso_host.routes.notify import stored_body
from aviso_host.schemas import SchemaCatalog
from aviso_plugins.types import PlannedNotification
from tests.support.configs import API_EXAMPLE

MAX_VALUE, MAX_TOPIC, MAX_PAYLOAD = 16, 64, 32


@pytest.fixture(scope="module")
def catalog() -> SchemaCatalog:
    registry = discover()
    return SchemaCatalog(settings_from_document(API_EXAMPLE, registry), registry.field_handlers)


def outcome(call: Any) -> tuple[str, Any]:
    try:
        planned: PlannedNotification = call()
    except Exception as exc:
        return ("refused", type(exc).__name__, str(exc), getattr(exc, "details", None))
    return ("planned", planned.topic, planned.payload, planned.metadata)


def full_checks(schema: Any, identifier: dict[str, Any], payload: Any) -> PlannedNotification:
    check_identifier_values(schema, identifier, MAX_VALUE)
    planned = plan_notification(schema, "river_gauge", identifier, payload)
    check_topic_size(planned.topic, MAX_TOPIC)
    check_payload_size(planned.payload, MAX_PAYLOAD)
    return planned


VALID = {"basin": "Danube", "date": "20250101", "level": 3}
IDENTIFIERS = [
    VALID,
    {**VALID, "level": "007"},
    {**VALID, "level": True},
    {**VALID, "level": 3.0},
    {**VALID, "level": 2**70},
    {**VALID, "level": 11},
    {**VALID, "level": "+3"},
    {**VALID, "level": "٣"},
    {**VALID, "basin": "Dünaü.river*>%"},
    {**VALID, "basin": "é" * 8},
    {**VALID, "basin": "é" * 9},
    {**VALID, "basin": "a" * 17},
    {**VALID, "basin": "a\x7fb"},
    {**VALID, "basin": "a\x0bb"},
    {**VALID, "basin": "\ud800"},
    {**VALID, "basin": ""},
    {**VALID, "basin": None},
    {**VALID, "basin": ["a"]},
    {**VALID, "basin": {"eq": "a"}},
    # The handler refuses the date, a later value breaks a limit: the limit is reported.
    {**VALID, "date": "not a date", "level": "1" * 40},
    {**VALID, "date": "not a date"},
    {"basin": "Danube", "date": "20250101"},
    {**VALID, "other": 1},
    {"basin": "Danube", "date": "20250101", "lvl": 3},
    {**VALID, "basin": "a" * 16, "date": "2025-01-01"},
]


@pytest.mark.parametrize("identifier", IDENTIFIERS)
@pytest.mark.parametrize("payload", [None, {"n": 1}, "x" * 40])
def test_the_one_pass_plan_answers_as_the_full_checks(
    catalog: SchemaCatalog, identifier: dict[str, Any], payload: Any
) -> None:
    schema = catalog.get("river_gauge")
    assert schema is not None and schema.notify_layout.scalar_only
    quick = outcome(
        lambda: plan_checked_notification(
            schema, "river_gauge", identifier, payload, MAX_VALUE, MAX_TOPIC, MAX_PAYLOAD
        )
    )
    assert quick == outcome(lambda: full_checks(schema, identifier, payload))


def test_spatial_schemas_take_the_full_checks(catalog: SchemaCatalog) -> None:
    schema = catalog.get("storm_cell")
    assert schema is not None and not schema.notify_layout.scalar_only


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"18446744073709551616", 18446744073709551616),
        (b"-9223372036854775809", -9223372036854775809),
        (b'{"a":[123456789012345678901234567890]}', {"a": [123456789012345678901234567890]}),
        (b'{"a":1,"a":2}', {"a": 2}),
        (b'"\\ud83d\\ude00"', "\U0001f600"),
        (b"-0", 0),
        (b"[0.1,1E2,-0.0]", [0.1, 100.0, -0.0]),
    ],
)
def test_parsed_values_are_the_standard_parsers(text: bytes, expected: Any) -> None:
    parsed = loads(text)
    assert parsed == expected and repr(parsed) == repr(expected)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (b"1e400", "number 1e400 is out of range"),
        (b"NaN", "NaN is not valid JSON"),
        (b'"\\ud800"', "lone surrogate in string escape"),
        (b"\xef\xbb\xbf{}", "Expecting value: line 1 column 1 (char 0)"),
        (b'"a\x01b"', "Invalid control character at: line 1 column 3 (char 2)"),
        (b"[1,]", "Expecting value: line 1 column 4 (char 3)"),
        (b"", "Expecting value: line 1 column 1 (char 0)"),
        (b'"\xff"', "'utf-8' codec can't decode byte 0xff in position 1: invalid start byte"),
    ],
)
def test_parse_errors_keep_the_standard_parsers_words(text: bytes, error: str) -> None:
    with pytest.raises(ValueError) as raised:
        loads(text)
    assert str(raised.value) == error


def test_written_json_is_the_standard_encoders() -> None:
    generator = random.Random(16)

    def document(depth: int = 0) -> Any:
        pick = generator.random()
        if depth > 3 or pick < 0.5:
            return generator.choice(
                [
                    None,
                    True,
                    2**70,
                    -(2**63),
                    1e16,
                    1e-7,
                    -0.0,
                    float("nan"),
                    generator.random() * 10 ** generator.randint(-20, 20),
                    "".join(chr(generator.randint(0, 0x2FFF)) for _ in range(5)),
                ]
            )
        if pick < 0.75:
            return [document(depth + 1) for _ in range(3)]
        return {chr(generator.randint(32, 0x2FFF)) * 2: document(depth + 1) for _ in range(3)}

    for _ in range(2000):
        value = document()
        for sort_keys in (True, False):
            expected = json.dumps(
                value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys
            )
            assert dumps(value, sort_keys=sort_keys) == expected


@pytest.mark.parametrize(
    "mapping",
    [
        {"status": "success", "request_id": "0f6b7f3e", "processed_at": "2026-11-26T09:57:20Z"},
        {chr(code): "".join(map(chr, range(code, code + 64))) for code in range(0, 0x3000, 64)},
        {"a": '\U0001f600\u2028\x7f"\\'},
        {"lone": "\ud800"},
        {"n": 1, "f": 1e16, "x": None, "nested": {"b": "1", "a": "2"}},
    ],
)
def test_written_text_maps_are_the_standard_encoders(mapping: dict[str, Any]) -> None:
    expected = json.dumps(mapping, separators=(",", ":"), ensure_ascii=False)
    try:
        written = expected.encode()
    except UnicodeEncodeError:  # a lone surrogate: refused either way
        with pytest.raises(UnicodeEncodeError):
            dumps_texts(mapping)
    else:
        assert dumps_texts(mapping) == written


@pytest.mark.parametrize(
    "text", [b'{"a":"1234567890123456789"}', b"[12345678901234567890]", b'{"a":123456789012345678}']
)
def test_runs_of_digits_parse_as_the_standard_parser(text: bytes) -> None:
    parsed = loads(text)
    assert parsed == json.loads(text) and repr(parsed) == repr(json.loads(text))


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
_MEMBERS = st.dictionaries(
    st.sampled_from([*ALLOWED_FIELDS, "delivery", "extra"]), _JSON_VALUES, max_size=5
)


def _outcome(parse: Any) -> tuple[Any, ...]:
    try:
        body = parse()
    except ApiError as error:
        return ("refused", error.status, error.code, error.message)
    return (
        "parsed",
        body.event_type,
        body.identifier,
        body.payload,
        body.from_id,
        body.from_date,
        body.to_id,
        body.to_date,
        dict(body.extras),
    )


@settings(max_examples=300, deadline=None)
@given(_MEMBERS, st.integers(min_value=0, max_value=40), st.binary(max_size=2))
def test_bodies_parse_as_the_standard_parser_reads_them(
    members: dict[str, Any], cut: int, splice: bytes
) -> None:
    """Whatever the one-pass decoder accepts, it reads as the standard parser does; what it
    refuses gets the standard parser's answer (any member of any type, duplicates, broken
    and non-UTF-8 texts)."""
    text = json.dumps(members, ensure_ascii=bool(cut % 2)).encode()
    texts = [text, text[:cut] + splice + text[cut:], text.replace(b"}", b', "event_type": 1}', 1)]
    for raw in texts:
        assert _outcome(lambda raw=raw: parse_body(raw, Endpoint.NOTIFY)) == _outcome(
            lambda raw=raw: _parse_standard(raw, Endpoint.NOTIFY, ())
        ), raw


def test_the_stored_answer_is_the_encoders() -> None:
    request_id, processed_at = new_request_id(), now_whole_seconds()
    assert stored_body(request_id, processed_at) == dumps_texts(
        {"status": "success", "request_id": request_id, "processed_at": processed_at}
    )


def test_request_ids_are_distinct_canonical_version_4_uuids() -> None:
    ids = [new_request_id() for _ in range(3 * 256 + 7)]  # across batches
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


@pytest.mark.parametrize(
    "mapping",
    [
        {"step": "12", "run": "rps"},
        {chr(code): "".join(map(chr, range(code, code + 64))) for code in range(0, 0x3000, 64)},
        {"\U0001f600": '\u2028\x7f"\\', "é": "\x00\x1f", "z": ""},
        {"lone": "\ud800", "a": "b"},
    ],
)
def test_sorted_text_maps_are_the_standard_encoders(mapping: dict[str, str]) -> None:
    assert dumps_sorted_texts(mapping) == json.dumps(
        mapping, separators=(",", ":"), ensure_ascii=False, sort_keys=True
    )


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"content-type", b"application/json")],
        [(b"X-Request-ID", b"forged"), (b"a", b"1"), (b"x-request-id", b"again"), (b"b", b"2")],
    ],
)
def test_the_request_id_field_replaces_any_the_app_set(headers: list[tuple[bytes, bytes]]) -> None:
    message = {"type": "http.response.start", "status": 200, "headers": headers}
    header = (b"x-request-id", b"server-made")
    sent = list(headers)
    stamped = with_request_id(message, header)
    kept = [field for field in sent if field[0].lower() != b"x-request-id"]
    assert stamped["headers"] == [*kept, header]
    assert message["headers"] == sent  # the app's message is left as it was
