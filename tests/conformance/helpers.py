"""Shared helpers for the conformance suite.

Every stream read through :func:`read_stream` / :func:`open_stream` is checked for the
framing and encoding invariants that hold for *all* streams, so each
test that reads a stream also re-proves them.
"""

from __future__ import annotations

import itertools
import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx

from tests.support.sse import DEFAULT_TIMEOUT, Event, Stream

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
SECOND_TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
CLOUDEVENT_TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}|\.\d{6}|\.\d{9})?Z$")

ERROR_KEYS = {"code", "details", "error", "message", "request_id"}
SSE_SETUP_ERROR_KEYS = ERROR_KEYS | {"topic"}
UNKNOWN_EVENT_TYPE_KEYS = {"code", "configured_event_types", "error", "message", "request_id"}
ADMIN_KEYS = ["success", "message", "notification_id", "request_id"]
WIPE_KEYS = ["success", "message", "request_id"]
REPLAY_STARTED_KEYS = {
    "batch_size",
    "end_sequence",
    "from_date",
    "from_sequence",
    "request_id",
    "timestamp",
    "topic",
    "type",
}
"""The fields of a ``replay-control/replay_started`` event."""
CLOUDEVENT_KEYS = [
    "data",
    "datacontenttype",
    "dataschema",
    "id",
    "sequence",
    "source",
    "specversion",
    "time",
    "type",
]
"""The fields of a notification's CloudEvent, in the order they are sent (sorted)."""

NOTIFY = "/api/v1/notification"
WATCH = "/api/v1/watch"
REPLAY = "/api/v1/replay"

# Polygons for storm_cell (lat,lon pairs, closed rings).
POLYGON_AROUND_ZURICH = "(47.0,8.0,47.6,8.0,47.6,8.9,47.0,8.9,47.0,8.0)"
POLYGON_ELSEWHERE = "(10.0,10.0,11.0,10.0,11.0,11.0,10.0,11.0,10.0,10.0)"

_MISSING = object()
_dates = itertools.count(1)


# -- data isolation ------------------------------------------------------------------------


def unique_basin() -> str:
    """A basin no other test uses, so that shared servers need no wiping."""
    return f"b{uuid.uuid4().hex[:12]}"


def unique_date() -> str:
    """A distinct calendar date per call (storm_cell topics are keyed by date)."""
    return (date(2100, 1, 1) + timedelta(days=next(_dates))).isoformat()


# -- compact JSON --------------------------------------------------------------------------


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def assert_compact_sorted(text: str) -> Any:
    """``text`` is one compact JSON document with sorted keys (no space outside strings)."""
    value = json.loads(text)
    assert text == compact(value), f"not compact/sorted JSON: {text!r}"
    return value


# -- plain responses -----------------------------------------------------------------------


def post(client: httpx.Client, path: str, body: Any) -> httpx.Response:
    return client.post(path, content=json.dumps(body))


def request_id_header(response: httpx.Response) -> str:
    value = response.headers.get("x-request-id")
    assert value is not None, "X-Request-ID header missing"
    assert UUID_RE.match(value), value
    return value


def assert_error(
    response: httpx.Response,
    status: int,
    code: str,
    *,
    error: str | None = None,
    message: str | None = None,
    message_prefix: str | None = None,
    keys: set[str] = ERROR_KEYS,
) -> dict[str, Any]:
    """An aviso error object: status, exact keys, compact sorted JSON, request id = header."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].split(";")[0] == "application/json"
    body = assert_compact_sorted(response.text)
    assert isinstance(body, dict)
    assert set(body) == keys, sorted(body)
    assert body["code"] == code, body
    assert body["request_id"] == request_id_header(response)
    if "details" in keys and code in ("INVALID_JSON", "UNKNOWN_FIELD", "INVALID_REQUEST_SHAPE"):
        assert body["details"] == body["message"], body
    if error is not None:
        assert body["error"] == error, body
    if message is not None:
        assert body["message"] == message, body
    if message_prefix is not None:
        assert body["message"].startswith(message_prefix), body
    return body


def admin_body(response: httpx.Response, keys: list[str]) -> dict[str, Any]:
    """An admin body: exactly ``keys`` in declared order, compact, request id = header."""
    assert response.headers["content-type"].split(";")[0] == "application/json"
    pairs = json.loads(response.text, object_pairs_hook=list)
    assert [key for key, _ in pairs] == keys, response.text
    body = dict(pairs)
    assert response.text == json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    assert body["request_id"] == request_id_header(response)
    return body


def wipe_stream(
    client: httpx.Client, content: bytes | None, json_header: bool = True
) -> httpx.Response:
    headers = {"Content-Type": "application/json"} if json_header else {}
    return client.request("DELETE", "/api/v1/admin/wipe/stream", content=content, headers=headers)


def notify(
    client: httpx.Client, event_type: str, identifier: dict[str, Any], payload: Any = _MISSING
) -> httpx.Response:
    body: dict[str, Any] = {"event_type": event_type, "identifier": identifier}
    if payload is not _MISSING:
        body["payload"] = payload
    response = post(client, NOTIFY, body)
    assert response.status_code == 200, response.text
    return response


def gauge(
    client: httpx.Client,
    basin: str,
    level: int = 3,
    payload: Any = _MISSING,
    day: str = "2026-04-02",
) -> httpx.Response:
    """Store one river_gauge notification."""
    return notify(client, "river_gauge", {"basin": basin, "date": day, "level": level}, payload)


# -- streams -------------------------------------------------------------------------------


def check_event_invariants(event: Event) -> None:
    """What holds for every SSE event of every stream."""
    assert event.raw.count("\n") == 1, event.raw
    data_line = event.raw.split("\n")[1]
    assert data_line.startswith("data: ")
    assert_compact_sorted(data_line[len("data: ") :])
    if event.name in ("live-notification", "replay") and "specversion" in event.data:
        assert CLOUDEVENT_TIME_RE.match(event.data["time"]), event.data
    elif "timestamp" in event.data:
        assert SECOND_TS_RE.match(event.data["timestamp"]), event.data


@dataclass
class StreamResult:
    response: httpx.Response
    events: list[Event] = field(default_factory=list)
    raw: str = ""
    ended: bool = False
    """True when the response body ended (rather than the reader stopping early)."""

    @property
    def kinds(self) -> list[str]:
        return [event.kind for event in self.events]

    def notifications(self) -> list[Event]:
        return [e for e in self.events if e.name in ("replay", "live-notification") and is_ce(e)]

    def sequences(self) -> list[int]:
        return [event.data["sequence"] for event in self.notifications()]


def is_ce(event: Event) -> bool:
    return str(event.data.get("type", "")).startswith("int.ecmwf.aviso.")


class LiveStream:
    """An open SSE response being read event by event."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._stream = Stream(response)
        self._events = self._stream.events()
        self.events: list[Event] = []
        self.ended = False

    @property
    def raw(self) -> str:
        return "".join(self._stream.raw_text)

    def next(self) -> Event | None:
        """The next event, or ``None`` once the body has ended."""
        try:
            event = next(self._events)
        except StopIteration:
            self.ended = True
            return None
        check_event_invariants(event)
        self.events.append(event)
        return event

    def until(self, predicate: Any, timeout: float = 10.0, limit: int = 100_000) -> Event:
        """Read until ``predicate(event)`` holds; fail on end of body or timeout."""
        deadline = time.monotonic() + timeout
        for _ in range(limit):
            assert time.monotonic() < deadline, f"timed out; got {[e.kind for e in self.events]}"
            event = self.next()
            assert event is not None, f"stream ended early: {[e.kind for e in self.events]}"
            if predicate(event):
                return event
        raise AssertionError("too many events")

    def until_kind(self, kind: str, timeout: float = 10.0) -> Event:
        return self.until(lambda event: event.kind == kind, timeout)

    def to_end(self, timeout: float = 10.0, limit: int = 100_000) -> list[Event]:
        deadline = time.monotonic() + timeout
        for _ in range(limit):
            assert time.monotonic() < deadline, f"timed out; got {[e.kind for e in self.events]}"
            if self.next() is None:
                return self.events
        raise AssertionError("too many events")


@contextmanager
def open_stream(
    client: httpx.Client, path: str, body: Any, timeout: httpx.Timeout = DEFAULT_TIMEOUT
) -> Iterator[LiveStream]:
    """Open a watch/replay that must answer 200; yield a reader (closed on exit)."""
    with client.stream("POST", path, content=json.dumps(body), timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        yield LiveStream(response)


def read_stream(
    client: httpx.Client, path: str, body: Any, until: str | None = None, timeout: float = 10.0
) -> StreamResult:
    """Read a stream to its end (or to the first event of kind ``until``)."""
    with open_stream(client, path, body) as stream:
        if until is None:
            stream.to_end(timeout)
        else:
            stream.until_kind(until, timeout)
        return StreamResult(stream.response, stream.events, stream.raw, stream.ended)


def replay_all(
    client: httpx.Client, event_type: str, identifier: dict[str, Any], from_id: str = "0"
) -> StreamResult:
    """A replay endpoint stream from ``from_id``, read to its end."""
    body = {"event_type": event_type, "identifier": identifier, "from_id": from_id}
    result = read_stream(client, REPLAY, body)
    assert result.ended
    assert result.kinds[-1] == "connection-closing", result.kinds
    assert result.events[-1].data["reason"] == "end_of_stream"
    return result


def parse_ce_time(text: str) -> datetime:
    """A CloudEvent ``time`` (0/3/6/9 fraction digits) as an aware datetime."""
    match = re.match(r"^(.{19})(?:\.(\d+))?Z$", text)
    assert match, text
    moment = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    fraction = (match.group(2) or "").ljust(6, "0")[:6]
    return moment + timedelta(microseconds=int(fraction))
