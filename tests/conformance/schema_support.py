"""Shared configuration and HTTP helpers for the schema conformance tests.

Everything here talks to a real uvicorn server over HTTP: notify through
``POST /api/v1/notification``, observe canonical values through a replay's
``data.identifier`` and filtering through replay/watch streams. The only in-process access
is through :meth:`Harness.stored` / :meth:`Harness.inject`, used where the contract talks
about the encoded wire topic or stored metadata, which no HTTP response exposes.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import httpx

from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import StartCursor, StoredNotification
from tests.support.server import RunningServer, running_server
from tests.support.sse import DEFAULT_TIMEOUT, Event, Stream

NOTIFY = "/api/v1/notification"
WATCH = "/api/v1/watch"
REPLAY = "/api/v1/replay"

NOTIFY_CODE = "INVALID_NOTIFICATION_REQUEST"
WATCH_CODE = "INVALID_WATCH_REQUEST"
REPLAY_CODE = "INVALID_REPLAY_REQUEST"

# The notification polygon of the spatial filtering tests: the square lat 0..10, lon 0..10.
SQUARE = "(0,0,0,10,10,10,10,0,0,0)"
SQUARE_ARRAY = [[0.0, 0.0], [0.0, 10.0], [10.0, 10.0], [10.0, 0.0], [0.0, 0.0]]
"""``SQUARE`` as delivered: CloudEvents show spatial values as JSON arrays (0.11+)."""

_BASE_DOCUMENT: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {
        "kind": "in_memory",
        "in_memory": {"max_history_per_topic": 1000},
    },
}


def _tagged(base: str, key_order: list[str], **fields: dict[str, Any]) -> dict[str, Any]:
    """An auxiliary event type: a required ``tag`` (isolation key) plus ``fields``."""
    return {
        "topic": {"base": base, "key_order": ["tag", *key_order]},
        "identifier": {"tag": {"type": "StringHandler", "required": True}, **fields},
        "payload": {"required": False},
    }


# aviso-server's example schema, verbatim, plus the auxiliary event types some tests need.
GAUGE_SCHEMAS: dict[str, Any] = {
    "river_gauge": {
        "topic": {
            "base": "gauge",
            "key_order": ["basin", "station", "obs_date", "level_band", "stage_m"],
        },
        "identifier": {
            "basin": {
                "type": "EnumHandler",
                "values": ["Danube", "Rhine", "Elbe"],
                "required": True,
            },
            "station": {"type": "StringHandler", "max_length": 8, "required": True},
            "obs_date": {"type": "DateHandler", "canonical_format": "%Y%m%d", "required": False},
            "obs_time": {"type": "TimeHandler", "required": False},
            "level_band": {"type": "IntHandler", "range": [0, 9], "required": False},
            "stage_m": {"type": "FloatHandler", "range": [-5.0, 40.0], "required": False},
            "quality": {"type": "IntHandler", "range": [0, 3], "required": False},
            "run": {"type": "ExpverHandler", "default": "0001", "required": False},
            "polygon": {"type": "PolygonHandler", "required": False},
        },
        "payload": {"required": False},
    },
    # StringHandler with max_length 2.
    "short_code": _tagged(
        "shortcode", ["code"], code={"type": "StringHandler", "max_length": 2, "required": False}
    ),
    # DateHandler with canonical_format %Y-%m-%d.
    "dash_date": _tagged(
        "dashdate",
        ["day"],
        day={"type": "DateHandler", "canonical_format": "%Y-%m-%d", "required": False},
    ),
    # DateHandler without canonical_format.
    "plain_date": _tagged("plaindate", ["day"], day={"type": "DateHandler", "required": False}),
    # IntHandler without range.
    "counter": _tagged("counter", ["count"], count={"type": "IntHandler", "required": False}),
    # ExpverHandler with default "1" / without default.
    "expver_default": _tagged(
        "expdef", ["run"], run={"type": "ExpverHandler", "default": "1", "required": False}
    ),
    "expver_plain": _tagged("expplain", ["run"], run={"type": "ExpverHandler", "required": False}),
    # A polygon declared with required: true.
    "zone": _tagged("zone", [], polygon={"type": "PolygonHandler", "required": True}),
    # A schema without a polygon field.
    "plain_reading": _tagged("reading", ["level"], level={"type": "IntHandler", "required": False}),
    # Payload required.
    "strict_payload": {
        "topic": {"base": "strictpayload", "key_order": ["tag"]},
        "identifier": {"tag": {"type": "StringHandler", "required": True}},
        "payload": {"required": True},
    },
}

GAUGE_CONFIG: dict[str, Any] = {**_BASE_DOCUMENT, "notification_schema": GAUGE_SCHEMAS}

# Schema-less event types: no schemas and strict mode unset => permissive.
PERMISSIVE_CONFIG: dict[str, Any] = {**_BASE_DOCUMENT, "notification_schema_strict": False}


def config(document: dict[str, Any]) -> dict[str, Any]:
    """A deep copy, so that no test can alter the shared documents."""
    return copy.deepcopy(document)


# -- unique isolation values -------------------------------------------------------------

_COUNTER = itertools.count(1)


def unique_station() -> str:
    """A fresh 8-character station (the example schema's max_length is 8)."""
    return f"s{next(_COUNTER):07d}"


def unique_tag() -> str:
    return f"tag{next(_COUNTER):06d}"


def unique_date() -> str:
    """A fresh valid date (``YYYY-MM-DD``), canonical form ``YYYYMMDD``."""
    return (date(1901, 1, 1) + timedelta(days=next(_COUNTER))).isoformat()


def gauge_identifier(**overrides: Any) -> dict[str, Any]:
    """A complete, valid ``river_gauge`` identifier (notify needs every declared field)."""
    identifier: dict[str, Any] = {
        "basin": "Rhine",
        "station": unique_station(),
        "obs_date": "2025-07-06",
        "obs_time": "12",
        "level_band": 4,
        "stage_m": 3.5,
        "quality": 1,
        "run": "1",
        "polygon": SQUARE,
    }
    identifier.update(overrides)
    return identifier


def canonical_date(text: str) -> str:
    return text.replace("-", "")


# -- the harness -------------------------------------------------------------------------


@dataclass
class LiveWatch:
    """An open watch stream; events are read on demand (the server runs in its own thread)."""

    events: Iterator[Event]
    first: Event

    def notifications_until(self, is_last: Any, limit: int = 200) -> list[dict[str, Any]]:
        """Read ``live-notification`` CloudEvents until ``is_last(cloudevent)`` is true.

        Bounded: at most ``limit`` events, and every read has the client's read timeout.
        """
        received: list[dict[str, Any]] = []
        for count, event in enumerate(self.events):
            assert count < limit, "sentinel never arrived"
            if event.kind == "heartbeat":
                continue
            assert event.kind == "live-notification", event.raw
            received.append(event.data)
            if is_last(event.data):
                return received
        raise AssertionError(f"stream ended before the sentinel; got {received}")


@dataclass
class Harness:
    server: RunningServer
    client: httpx.Client

    # -- raw requests

    def post(self, path: str, body: Any) -> httpx.Response:
        return self.client.post(path, content=json.dumps(body))

    def notify(self, event_type: str, identifier: dict[str, Any], **extra: Any) -> httpx.Response:
        return self.post(NOTIFY, {"event_type": event_type, "identifier": identifier, **extra})

    def notify_ok(self, event_type: str, identifier: dict[str, Any], **extra: Any) -> None:
        response = self.notify(event_type, identifier, **extra)
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "success", response.text

    # -- streams

    def replay_events(
        self, event_type: str, identifier: dict[str, Any], from_id: str = "1"
    ) -> list[Event]:
        """Every event of a replay stream (it must close with ``end_of_stream``)."""
        body = {"event_type": event_type, "identifier": identifier, "from_id": from_id}
        with self.client.stream(
            "POST", REPLAY, content=json.dumps(body), timeout=DEFAULT_TIMEOUT
        ) as response:
            assert response.status_code == 200, response.read().decode()
            events: list[Event] = []
            for event in Stream(response).events():
                events.append(event)
                assert len(events) < 5000, "replay did not end"
                if event.kind == "connection-closing":
                    break
        assert events, "empty replay stream"
        assert events[-1].kind == "connection-closing", events[-1].raw
        assert events[-1].data["reason"] == "end_of_stream", events[-1].raw
        return events

    def replay(
        self, event_type: str, identifier: dict[str, Any], from_id: str = "1"
    ) -> list[dict[str, Any]]:
        """The CloudEvents a replay delivers, in order."""
        events = self.replay_events(event_type, identifier, from_id)
        return [event.data for event in events if event.kind == "replay"]

    def replay_identifiers(
        self, event_type: str, identifier: dict[str, Any], from_id: str = "1"
    ) -> list[dict[str, str]]:
        return [ce["data"]["identifier"] for ce in self.replay(event_type, identifier, from_id)]

    def replay_values(self, event_type: str, identifier: dict[str, Any], field: str) -> list[str]:
        return [ident[field] for ident in self.replay_identifiers(event_type, identifier)]

    def stream_status(self, path: str, event_type: str, identifier: dict[str, Any]) -> int:
        """Status of a watch/replay request; on 200 the first SSE event is read and checked."""
        body: dict[str, Any] = {"event_type": event_type, "identifier": identifier}
        if path == REPLAY:
            body["from_id"] = "1"
        with self.client.stream(
            "POST", path, content=json.dumps(body), timeout=DEFAULT_TIMEOUT
        ) as response:
            if response.status_code != 200:
                response.read()
                return response.status_code
            first = next(Stream(response).events())
            expected = (
                "live-notification/connection_established"
                if path == WATCH
                else "replay-control/replay_started"
            )
            assert first.kind == expected, first.raw
            return 200

    def rejected(
        self, path: str, event_type: str, identifier: dict[str, Any], **extra: Any
    ) -> dict[str, Any]:
        """Assert a 400 with the endpoint's code and return the error body."""
        body: dict[str, Any] = {"event_type": event_type, "identifier": identifier, **extra}
        if path == REPLAY:
            body.setdefault("from_id", "1")
        response = self.post(path, body)
        code = {NOTIFY: NOTIFY_CODE, WATCH: WATCH_CODE, REPLAY: REPLAY_CODE}[path]
        assert response.status_code == 400, (response.status_code, response.text)
        error = response.json()
        assert error["code"] == code, error
        return error

    @contextmanager
    def live(self, event_type: str, identifier: dict[str, Any]) -> Iterator[LiveWatch]:
        """A live-only watch, returned once its ``connection_established`` event arrived."""
        body = {"event_type": event_type, "identifier": identifier}
        with self.client.stream(
            "POST", WATCH, content=json.dumps(body), timeout=DEFAULT_TIMEOUT
        ) as response:
            assert response.status_code == 200, response.read().decode()
            events = Stream(response).events()
            first = next(events)
            assert first.kind == "live-notification/connection_established", first.raw
            yield LiveWatch(events, first)

    # -- canonical values through a round trip

    def gauge_canonical(self, field: str, value: Any) -> Any:
        """Notify ``river_gauge`` with ``field = value``; return the replayed canonical value."""
        identifier = gauge_identifier(**{field: value})
        if field != "obs_date":
            identifier["obs_date"] = unique_date()
        self.notify_ok("river_gauge", identifier)
        query = {
            "basin": identifier["basin"],
            "station": identifier["station"],
            "obs_date": identifier["obs_date"],
        }
        if field == "obs_date":
            del query["obs_date"]
        delivered = self.replay_identifiers("river_gauge", query)
        assert len(delivered) == 1, delivered
        return delivered[0][field]

    def tagged_canonical(self, event_type: str, field: str, value: Any) -> str:
        """Same round trip for an auxiliary ``tag``-keyed event type."""
        tag = unique_tag()
        self.notify_ok(event_type, {"tag": tag, field: value})
        delivered = self.replay_identifiers(event_type, {"tag": tag})
        assert len(delivered) == 1, delivered
        return delivered[0][field]

    # -- backend access (encoded topics and message metadata are not visible over HTTP)

    def stored(self, tokens: list[str | None]) -> list[StoredNotification]:
        """Stored records whose topic matches the decoded ``tokens`` (``None`` = wildcard)."""
        pattern = TopicPattern(tuple(tokens))
        backend = self.server.service.backend
        batch = self.server.call(
            lambda: backend.fetch_batch(pattern, StartCursor(from_sequence=1), 10_000)
        )
        return list(batch.messages)

    def inject(self, topic: str, metadata: dict[str, str], payload: str = "null") -> int:
        """Store a record as a backend would hold it (e.g. a legacy or foreign record)."""
        backend = self.server.service.backend
        record = self.server.call(lambda: backend.publish(topic, payload, metadata))
        return record.sequence


@contextmanager
def serve(document: dict[str, Any]) -> Iterator[Harness]:
    with (
        running_server(config(document)) as server,
        httpx.Client(base_url=server.url, timeout=DEFAULT_TIMEOUT) as client,
    ):
        yield Harness(server, client)
