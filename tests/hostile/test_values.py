"""Hostile values a request carries: identifier values, payloads, admin names, JWTs.

Every attack is answered with its documented 4xx before the backend is touched, the same on
both backends, and the service keeps serving. "Acknowledged means readable": a notify
answered 200 is returned unchanged by a replay, a filtered replay and a filtered watch.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.conformance.auth_support import document as auth_document
from tests.conformance.helpers import (
    REPLAY,
    WATCH,
    is_ce,
    open_stream,
    read_stream,
    unique_basin,
    unique_date,
)
from tests.hostile.support import VALID_NOTIFY, assert_client_error, assert_still_serving
from tests.support.configs import API_EXAMPLE, ForBackend, with_changes
from tests.support.server import running_server
from tests.support.tokens import claims_for, sign, sign_raw

NOTIFY = "/api/v1/notification"
AGGREGATE = "/api/v1/aggregate"
NOTIFY_INVALID = "INVALID_NOTIFICATION_REQUEST"
CODES = {
    NOTIFY: NOTIFY_INVALID,
    WATCH: "INVALID_WATCH_REQUEST",
    REPLAY: "INVALID_REPLAY_REQUEST",
    AGGREGATE: "INVALID_AGGREGATE_REQUEST",
}
HUGE = "x" * 5_000
VALUE_LIMIT = "limits.max_identifier_value_bytes"
PAYLOAD_LIMIT = 4_096


@pytest.fixture(scope="module")
def lenient(for_backend: ForBackend) -> Iterator[httpx.Client]:
    """Schema-less event types allowed (non-strict) and a small payload limit."""
    config = with_changes(
        API_EXAMPLE,
        notification_schema_strict=False,
        limits={"max_payload_bytes": PAYLOAD_LIMIT},
    )
    with (
        running_server(for_backend(config)) as server,
        httpx.Client(base_url=server.url, timeout=30.0) as client,
    ):
        yield client


def _stream_body(path: str, identifier: dict[str, Any], event_type: str = "river_gauge") -> Any:
    """A read-only request of ``path``; a watch with a cursor, as the attack used."""
    body: dict[str, Any] = {"event_type": event_type, "identifier": identifier, "from_id": "1"}
    if path == AGGREGATE:
        body["group_by"] = ["level"]
    return body


def _refused(client: httpx.Client, path: str, body: Any, *needles: str) -> dict[str, Any]:
    answer = client.post(path, content=json.dumps(body))
    assert_client_error(answer, 400, CODES[path])
    error = answer.json()
    for needle in needles:
        assert needle in error["message"], error
    return error


# -- identifier values: size -------------------------------------------------------------


def test_a_5000_byte_identifier_value_is_refused_on_notify(hostile: httpx.Client) -> None:
    body = {**VALID_NOTIFY, "identifier": {**VALID_NOTIFY["identifier"], "basin": HUGE}}
    _refused(hostile, NOTIFY, body, "'basin'", "1024 bytes", VALUE_LIMIT)
    assert_still_serving(hostile)


def test_a_value_at_the_limit_is_stored(hostile: httpx.Client) -> None:
    # 1024 bytes made of 2-byte characters: the limit counts UTF-8 bytes, not characters.
    basin = "é" * 512
    body = {**VALID_NOTIFY, "identifier": {**VALID_NOTIFY["identifier"], "basin": basin}}
    assert hostile.post(NOTIFY, json=body).status_code == 200
    over = {**body, "identifier": {**body["identifier"], "basin": basin + "a"}}
    _refused(hostile, NOTIFY, over, "'basin'", VALUE_LIMIT)
    assert_still_serving(hostile)


@pytest.mark.parametrize("path", [REPLAY, WATCH, AGGREGATE])
def test_a_5000_byte_filter_value_is_refused(hostile: httpx.Client, path: str) -> None:
    _refused(hostile, path, _stream_body(path, {"basin": HUGE}), "'basin'", VALUE_LIMIT)
    assert_still_serving(hostile)


@pytest.mark.parametrize("path", [REPLAY, WATCH, AGGREGATE])
def test_a_5000_byte_constraint_operand_is_refused(hostile: httpx.Client, path: str) -> None:
    identifier = {"basin": unique_basin(), "level": {"in": [1, "9" * 5_000]}}
    _refused(hostile, path, _stream_body(path, identifier), "'level'", VALUE_LIMIT)
    assert_still_serving(hostile)


@pytest.mark.parametrize("path", [NOTIFY, REPLAY, WATCH])
def test_schema_less_values_and_keys_are_limited_too(lenient: httpx.Client, path: str) -> None:
    # Many values each under the limit still make a topic NATS could not carry.
    many = {f"k{index:02d}": "v" * 1_000 for index in range(8)}
    for identifier, needle in (
        ({"k": HUGE}, VALUE_LIMIT),
        ({HUGE: "v"}, "identifier key"),
        (many, "topics are limited"),
    ):
        body = (
            {"event_type": "freeform", "identifier": identifier}
            if path == NOTIFY
            else _stream_body(path, identifier, "freeform")
        )
        error = _refused(lenient, path, body, needle)
        assert HUGE not in json.dumps(error)
    assert_still_serving(lenient)


# -- identifier values: characters (acknowledged means readable) ---------------------------

PRINTABLE = "".join(chr(code) for code in range(0x21, 0x7F))
CARRIED = {
    "ascii-printable": PRINTABLE,
    "encoded-reserved": "1.5*x>y%25%",
    "space": "a b",
    "tab": "a\tb",
    "cr": "a\rb",
    "lf": "a\nb",
    "crlf-and-space": " a\r\n b ",
    "nul": "a\x00b",
    "c0-soh": "a\x01b",
    "c0-escape": "a\x1bb",
    "c0-unit-separator": "a\x1fb",
    "c1-pad": "a\x80b",
    "c1-next-line": "a\x85b",
    "c1-apc": "a\x9fb",
    "nbsp": "a\xa0b",
    "bmp": "Zürich-東京-\u2028",
    "astral-emoji": "a😀b\U0001f30a",
    "u-fffe-ffff": "a\ufffe\uffffb",
}
REFUSED = {
    "vertical-tab": "a\x0bb",
    "form-feed": "a\x0cb",
    "del": "a\x7fb",
}


def _notifications(events: list[Any]) -> list[dict[str, Any]]:
    return [event.data for event in events if is_ce(event)]


@pytest.mark.parametrize("label", sorted(CARRIED))
def test_an_acknowledged_value_is_readable(hostile: httpx.Client, label: str) -> None:
    basin = f"{unique_basin()}{CARRIED[label]}"
    day = unique_date()
    identifier = {"basin": basin, "date": day, "level": 4}
    exact = {"event_type": "river_gauge", "identifier": {"basin": basin}}
    with open_stream(hostile, WATCH, exact) as live:
        live.until_kind("live-notification/connection_established")
        answer = hostile.post(NOTIFY, json={"event_type": "river_gauge", "identifier": identifier})
        assert answer.status_code == 200, answer.text
        event = live.until(is_ce)
        assert event.data["data"]["identifier"]["basin"] == basin

    everything_that_day = {"event_type": "river_gauge", "identifier": {"basin": "*", "date": day}}
    for body in (exact, everything_that_day):
        events = read_stream(hostile, REPLAY, {**body, "from_id": "1"}).events
        [data] = _notifications(events)
        assert data["data"]["identifier"]["basin"] == basin
    with open_stream(hostile, WATCH, {**exact, "from_id": "1"}) as watch:
        event = watch.until(is_ce)
        assert event.data["data"]["identifier"]["basin"] == basin


@pytest.mark.parametrize("label", sorted(REFUSED))
@pytest.mark.parametrize("path", [NOTIFY, REPLAY, WATCH])
def test_characters_no_backend_can_filter_on_are_refused(
    hostile: httpx.Client, label: str, path: str
) -> None:
    identifier = {"basin": f"{unique_basin()}{REFUSED[label]}"}
    body = (
        {"event_type": "river_gauge", "identifier": identifier}
        if path == NOTIFY
        else _stream_body(path, identifier)
    )
    _refused(hostile, path, body, "'basin'", "may not contain")
    assert_still_serving(hostile)


@pytest.mark.parametrize("path", [NOTIFY, REPLAY])
def test_a_lone_surrogate_is_refused(hostile: httpx.Client, path: str) -> None:
    text = json.dumps(_stream_body(path, {"basin": "PLACEHOLDER"}))
    answer = hostile.post(path, content=text.replace("PLACEHOLDER", "a\\ud800b"))
    assert_client_error(answer, 400, "INVALID_JSON")
    assert_still_serving(hostile)


# -- event types that cannot be a topic base (schema-less, non-strict mode) -----------------


@pytest.mark.parametrize("event_type", ["a b", "mars.x", "*", ">", "-lead", "a%b", "e" * 300])
@pytest.mark.parametrize("path", [NOTIFY, REPLAY, WATCH, AGGREGATE])
def test_an_event_type_that_is_no_topic_base_is_refused(
    lenient: httpx.Client, event_type: str, path: str
) -> None:
    identifier = {"k": "v"}
    body = (
        {"event_type": event_type, "identifier": identifier}
        if path == NOTIFY
        else _stream_body(path, identifier, event_type)
    )
    if path == AGGREGATE:
        body["group_by"] = ["k"]
    _refused(lenient, path, body, "not a valid topic base")
    assert_still_serving(lenient)


# -- unknown identifier keys on reads --------------------------------


@pytest.mark.parametrize("path", [REPLAY, WATCH, AGGREGATE])
@pytest.mark.parametrize("value", ["high", {"gte": 3}])
def test_an_unknown_filter_key_is_refused(hostile: httpx.Client, path: str, value: Any) -> None:
    operation = {REPLAY: "replay", WATCH: "watch", AGGREGATE: "aggregate"}[path]
    identifier = {"basin": unique_basin(), "severtiy": value}
    error = _refused(hostile, path, _stream_body(path, identifier))
    assert error["message"] == f"Unknown field 'severtiy' provided for {operation} operation"
    assert_still_serving(hostile)


# -- payload size ----------------------------------------------------------------------------


def test_a_payload_over_the_limit_is_refused(lenient: httpx.Client) -> None:
    basin = unique_basin()
    identifier = {"basin": basin, "date": "20260402", "level": 1}
    # The serialised JSON counts in UTF-8 bytes: 4090 + 2 quotes fit, 2048 "é" + 2 do not.
    for text, accepted in (("x" * 4_090, True), ("é" * 2_048, False), ("x" * 5_000, False)):
        answer = lenient.post(
            NOTIFY, json={"event_type": "river_gauge", "identifier": identifier, "payload": text}
        )
        if accepted:
            assert answer.status_code == 200, answer.text
        else:
            assert_client_error(answer, 400, NOTIFY_INVALID)
            assert "limits.max_payload_bytes" in answer.json()["message"]
    events = read_stream(
        lenient,
        REPLAY,
        {"event_type": "river_gauge", "identifier": {"basin": basin}, "from_id": "1"},
    ).events
    assert len(_notifications(events)) == 1, "only the payload under the limit was stored"
    assert_still_serving(lenient)


# -- admin names -----------------------------------------------------------------------------

BAD_NAMES = ["*", ">", "a b", "mars.x", "gauge.>", "", HUGE]


def _wipe(client: httpx.Client, content: bytes) -> httpx.Response:
    return client.request(
        "DELETE",
        "/api/v1/admin/wipe/stream",
        content=content,
        headers={"Content-Type": "application/json"},
    )


def _admin_refusal(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["success"] is False, body
    assert body["request_id"] == answer.headers["x-request-id"]
    return body


@pytest.mark.parametrize(
    "content",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"stream_name":' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        b'{"stream_name":[["gauge"]]}',
        b'{"stream_name":{"name":"gauge"}}',
        b'{"stream_name":null}',
        *(json.dumps({"stream_name": name}).encode() for name in BAD_NAMES),
    ],
    ids=[
        *("nested-arrays", "nested-name", "array-name", "object-name", "null"),
        *("star", "gt", "space", "dot", "wildcard-tail", "empty", "5000-chars"),
    ],
)
def test_wipe_stream_refuses_what_cannot_name_a_stream(
    hostile: httpx.Client, content: bytes
) -> None:
    body = _admin_refusal(_wipe(hostile, content), 400)
    assert HUGE not in body["message"]
    assert_still_serving(hostile)


def test_wipe_stream_body_is_bounded(hostile: httpx.Client) -> None:
    padding = b" " * 300_000  # over limits.max_body_bytes (256 KiB), valid JSON otherwise
    answer = _wipe(hostile, b'{"stream_name":"nosuchstream"' + padding + b"}")
    assert answer.status_code == 413
    assert_still_serving(hostile)


def test_wipe_of_an_unknown_stream_is_404(hostile: httpx.Client) -> None:
    body = _admin_refusal(_wipe(hostile, b'{"stream_name":"nosuchstream"}'), 404)
    assert body["message"] == "Stream not found"
    assert_still_serving(hostile)


@pytest.mark.parametrize("name", ["*", ">", "a b", "mars.x", "gauge.>", HUGE])
def test_delete_refuses_what_cannot_name_a_stream(hostile: httpx.Client, name: str) -> None:
    answer = hostile.delete(f"/api/v1/admin/notification/{quote(name, safe='')}@1")
    body = _admin_refusal(answer, 400)
    assert body["message"].startswith("notification_id stream must be a topic base")
    assert_still_serving(hostile)


@pytest.mark.parametrize(
    ("sequence", "message"),
    [
        ("9" * 50, "notification_id sequence must be a positive integer"),
        ("9" * 5_000, "notification_id sequence must be a positive integer"),
        ("0" * 5_000 + "7" * 5_000, "notification_id sequence must be a positive integer"),
        (str(2**64), "notification_id sequence must be a positive integer"),
        ("-1", "notification_id sequence must be a positive integer"),
        ("1e3", "notification_id sequence must be a positive integer"),
        ("0", "notification_id sequence must be greater than zero"),
    ],
)
def test_delete_refuses_a_sequence_beyond_u64_or_malformed(
    hostile: httpx.Client, sequence: str, message: str
) -> None:
    body = _admin_refusal(hostile.delete(f"/api/v1/admin/notification/mars@{sequence}"), 400)
    assert body["message"] == message
    assert_still_serving(hostile)


@pytest.mark.parametrize("target", ["nosuchstream@1", "river_gauge@18446744073709551615"])
def test_delete_of_an_unknown_stream_or_sequence_is_404(hostile: httpx.Client, target: str) -> None:
    body = _admin_refusal(hostile.delete(f"/api/v1/admin/notification/{target}"), 404)
    assert body["message"] == "Notification not found"
    assert_still_serving(hostile)


# -- JWTs (trusted_proxy mode: the token is checked locally) ---------------------------------


@pytest.fixture(scope="module")
def guarded() -> Iterator[httpx.Client]:
    with (
        running_server(auth_document("trusted_proxy")) as server,
        httpx.Client(base_url=server.url, timeout=30.0) as client,
    ):
        yield client


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _read_protected(client: httpx.Client, headers: dict[str, str]) -> httpx.Response:
    body = {"event_type": "protected_feed", "identifier": {"name": "n"}, "from_id": "1"}
    return client.post(REPLAY, json=body, headers=headers)


@pytest.mark.parametrize(
    "token",
    [
        sign({"alg": "HS256"}, claims_for("alice", nbf=int(time.time()) + 3_600)),
        sign({"alg": "HS256"}, claims_for("alice", iat=int(time.time()) + 365 * 86_400)),
        sign({"alg": "HS256"}, claims_for("alice", nbf="soon")),
        sign_raw(b"[" * 20_000 + b"]" * 20_000),
        sign_raw(b'{"sub":"a","exp":9999999999,"x":' + b"[" * 65 + b"]" * 65 + b"}"),
        sign_raw(b"not json at all"),
        sign_raw(b'{"sub":"a","exp":9999999999,"roles":{"a":1}}'),
    ],
    ids=["nbf-future", "iat-future", "nbf-string", "deep", "depth-65", "non-json", "bad-roles"],
)
def test_a_token_not_valid_or_malformed_is_401(guarded: httpx.Client, token: str) -> None:
    answer = _read_protected(guarded, _bearer(token))
    assert answer.status_code == 401, answer.text
    assert answer.json()["code"] == "UNAUTHORIZED"
    valid = sign({"alg": "HS256"}, claims_for("alice", nbf=int(time.time()) - 10))
    assert _read_protected(guarded, _bearer(valid)).status_code == 200


def test_unknown_keys_are_refused_only_after_stream_auth(guarded: httpx.Client) -> None:
    body = {
        "event_type": "admin_read_feed",
        "identifier": {"name": "n", "severtiy": "high"},
        "from_id": "1",
    }
    reader = _bearer(sign({"alg": "HS256"}, claims_for("bob", roles=["reader"])))
    admin = _bearer(sign({"alg": "HS256"}, claims_for("root", roles=["admin"])))
    assert guarded.post(REPLAY, json=body).status_code == 401
    assert guarded.post(REPLAY, json=body, headers=reader).status_code == 403
    answer = guarded.post(REPLAY, json=body, headers=admin)
    assert_client_error(answer, 400, "INVALID_REPLAY_REQUEST")
    assert answer.json()["message"] == "Unknown field 'severtiy' provided for replay operation"
    assert answer.headers["content-type"].split(";")[0] == "application/json"


def test_the_guarded_server_still_serves(guarded: httpx.Client) -> None:
    token = sign({"alg": "HS256"}, claims_for("alice"))
    name = uuid.uuid4().hex
    notify = {"event_type": "public_feed", "identifier": {"name": name}}
    assert guarded.post(NOTIFY, json=notify, headers=_bearer(token)).status_code == 200
    assert guarded.get("/health").status_code == 200


LONG = 100_000
ECHO_LIMIT = 200  # characters of a rejected value an answer repeats


def _echo_cases() -> list[tuple[str, str, dict[str, Any]]]:
    base = {"event_type": "river_gauge", "identifier": {"basin": "x"}}
    long_text, long_digits = "q" * LONG, "9" * LONG
    cases = [
        (REPLAY, f"{name}-{kind}", {**base, "from_id": "1", name: value})
        for name in ("from_id", "from_date", "to_id", "to_date")
        for kind, value in (("text", long_text), ("digits", long_digits))
    ]
    return [
        *cases,
        (REPLAY, "unknown-member", {**base, "from_id": "1", long_text: 1}),
        (REPLAY, "unknown-event-type", {**base, "from_id": "1", "event_type": long_text}),
        (AGGREGATE, "group-by", {**base, "group_by": [long_text]}),
        (AGGREGATE, "debounce", {**base, "group_by": ["basin"], "debounce_ms": long_text}),
    ]


@pytest.mark.parametrize(
    ("path", "body"),
    [(path, body) for path, _, body in _echo_cases()],
    ids=[label for _, label, _ in _echo_cases()],
)
def test_a_long_rejected_value_is_echoed_cut_short(
    hostile: httpx.Client, path: str, body: dict[str, Any]
) -> None:
    """A 100,000-character value is refused with at most its first 200 characters in the
    message (and ``details``, which repeats it), never the whole value again."""
    answer = hostile.post(path, content=json.dumps(body))
    assert answer.status_code == 400, answer.text[:500]
    assert len(answer.content) < 3_000, len(answer.content)
    message = answer.json()["message"]
    assert ("q" * ECHO_LIMIT in message) or ("9" * ECHO_LIMIT in message), message
    assert "more characters]" in message, message
    assert_still_serving(hostile)
