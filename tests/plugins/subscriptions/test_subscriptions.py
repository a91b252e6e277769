"""Named subscriptions on a real server: definitions validated as a watch's, a cursor the
server keeps, and their events over Server-Sent Events from that cursor."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from aviso_builtins.subscriptions.store import valid_name
from aviso_plugins.service import AVISO_LOGGER
from aviso_plugins.testing import AvisoClient, ConfigError, EventStream, build_app, serve
from tests.conformance.auth_support import document as auth_document
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.fake_auth_o_tron import fake_auth_o_tron
from tests.support.refusing_subscriptions import RefusingSubscriptionsPlugin
from tests.support.server import running_server
from tests.support.tokens import mint

SUBSCRIPTIONS = "/api/v1/subscriptions"
RHINE = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}}
CONFIG = with_changes(API_EXAMPLE, watch_endpoint={"replay_batch_delay_ms": 0})


def _notify(aviso: httpx.Client, level: int, basin: str = "rhine") -> None:
    body = {
        "event_type": "river_gauge",
        "identifier": {"basin": basin, "date": "20260402", "level": level},
        "payload": {"level": level},
    }
    response = aviso.post("/api/v1/notification", json=body)
    assert response.status_code == 200, response.text


@contextmanager
def _events(
    client: httpx.Client, name: str, headers: dict[str, str] | None = None
) -> Iterator[EventStream]:
    with client.stream("GET", f"{SUBSCRIPTIONS}/{name}/events", headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "text/event-stream"
        yield EventStream(response)


def _sequences(stream: EventStream, count: int) -> list[int]:
    return [stream.until(lambda e: e.is_notification).data["sequence"] for _ in range(count)]


def _error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    assert body["request_id"] == response.headers["x-request-id"]
    return body


@pytest.fixture
def aviso() -> Iterator[AvisoClient]:
    with serve(CONFIG) as client:
        yield client


def test_put_creates_confirms_and_refuses_a_different_definition(aviso: AvisoClient) -> None:
    created = aviso.put(f"{SUBSCRIPTIONS}/rhine", json=RHINE)
    assert created.status_code == 201, created.text
    state = created.json()
    assert state["name"] == "rhine" and state["event_type"] == "river_gauge"
    assert state["identifier"] == {"basin": "rhine"}
    assert state["acknowledged_sequence"] is None
    assert state["pending"] == 0 and state["lag_seconds"] is None
    assert state["delivery"] is None
    again = aviso.put(f"{SUBSCRIPTIONS}/rhine", json=RHINE)
    assert again.status_code == 200 and again.json()["created_at"] == state["created_at"]
    other = {"event_type": "river_gauge", "identifier": {"basin": "elbe"}}
    _error(aviso.put(f"{SUBSCRIPTIONS}/rhine", json=other), 409, "SUBSCRIPTION_CONFLICT")
    listed = aviso.get(SUBSCRIPTIONS).json()["subscriptions"]
    assert [entry["name"] for entry in listed] == ["rhine"]
    assert aviso.delete(f"{SUBSCRIPTIONS}/rhine").status_code == 204
    _error(aviso.get(f"{SUBSCRIPTIONS}/rhine"), 404, "SUBSCRIPTION_NOT_FOUND")
    _error(aviso.delete(f"{SUBSCRIPTIONS}/rhine"), 404, "SUBSCRIPTION_NOT_FOUND")
    assert aviso.put(f"{SUBSCRIPTIONS}/rhine", json=other).status_code == 201


@pytest.mark.parametrize("name", ["a" * 65, "a%20b", "caf%C3%A9", "a%00", "a%0A"])
def test_names_outside_the_rule_are_refused(aviso: AvisoClient, name: str) -> None:
    _error(aviso.put(f"{SUBSCRIPTIONS}/{name}", json=RHINE), 400, "INVALID_SUBSCRIPTION_NAME")
    _error(aviso.get(f"{SUBSCRIPTIONS}/{name}"), 400, "INVALID_SUBSCRIPTION_NAME")


def test_dot_segments_are_no_names() -> None:
    # HTTP clients resolve them before sending, so only a raw request line could carry one.
    assert not valid_name(".") and not valid_name("..")
    assert valid_name("...") and valid_name(".a")


def test_every_allowed_character_and_the_longest_name(aviso: AvisoClient) -> None:
    for name in ("Az09-_.x", "a" * 64, "..."):
        assert aviso.put(f"{SUBSCRIPTIONS}/{name}", json=RHINE).status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        {"event_type": "river_gauge", "identifier": {}},
        {"event_type": "river_gauge", "identifier": {"basin": "rhine", "level": 11}},
        {"event_type": "river_gauge", "identifier": {"basin": "rhine", "level": {"gt": "x"}}},
        {"event_type": "river_gauge", "identifier": {"basin": "rhine"}, "from_id": "x"},
        {
            "event_type": "river_gauge",
            "identifier": {"basin": "rhine"},
            "from_id": "1",
            "from_date": "2026-01-01T00:00:00Z",
        },
        {"event_type": "storm_cell", "identifier": {"polygon": [[0, 0], [1, 1]]}},
        {"event_type": "river_gauge", "identifier": {"basin": "rhine", "bogus": "1"}},
    ],
)
def test_a_definition_is_validated_exactly_as_a_watch(
    aviso: AvisoClient, body: dict[str, Any]
) -> None:
    refused = _error(
        aviso.put(f"{SUBSCRIPTIONS}/x", json=body), 400, "INVALID_SUBSCRIPTION_REQUEST"
    )
    watch = aviso.post("/api/v1/watch", json=body)
    assert watch.status_code == 400
    assert refused["message"] == watch.json()["message"]
    assert refused["error"] == "Invalid Subscription Request"
    _error(aviso.get(f"{SUBSCRIPTIONS}/x"), 404, "SUBSCRIPTION_NOT_FOUND")


def test_what_a_subscription_cannot_hold(aviso: AvisoClient) -> None:
    url = f"{SUBSCRIPTIONS}/x"
    delivery = {**RHINE, "delivery": {"kind": "carrier-pigeon", "url": "https://example.org"}}
    _error(aviso.put(url, json=delivery), 400, "UNSUPPORTED_DELIVERY")
    _error(aviso.put(url, json={**RHINE, "to_id": "5"}), 400, "INVALID_SUBSCRIPTION_REQUEST")
    _error(aviso.put(url, json={**RHINE, "payload": 1}), 400, "INVALID_SUBSCRIPTION_REQUEST")
    _error(aviso.put(url, json={**RHINE, "colour": 1}), 400, "UNKNOWN_FIELD")
    _error(aviso.put(url, content=b"{"), 400, "INVALID_JSON")
    unknown = {"event_type": "tide", "identifier": {}}
    _error(aviso.put(url, json=unknown), 400, "UNKNOWN_EVENT_TYPE")
    assert aviso.get(SUBSCRIPTIONS).json()["subscriptions"] == []


def test_events_start_after_creation_carry_ids_and_resume_after_the_cursor(
    aviso: AvisoClient,
) -> None:
    _notify(aviso, 1)  # before the subscription: never delivered
    assert aviso.put(f"{SUBSCRIPTIONS}/rhine", json=RHINE).status_code == 201
    _notify(aviso, 2)
    _notify(aviso, 3, basin="elbe")  # does not match
    _notify(aviso, 4)
    state = aviso.get(f"{SUBSCRIPTIONS}/rhine").json()
    assert state["start_sequence"] == 2
    assert state["pending"] == 2 and state["lag_seconds"] >= 0
    _error(
        aviso.post(f"{SUBSCRIPTIONS}/rhine/ack", json={"sequence": 2}),
        400,
        "INVALID_ACKNOWLEDGEMENT",
    )
    with _events(aviso, "rhine") as stream:
        first = stream.until(lambda e: e.is_notification)
        assert (first.name, first.id, first.data["sequence"]) == ("replay", "2", 2)
        assert _sequences(stream, 1) == [4]
        stream.until("replay-control/replay_completed")
        _notify(aviso, 5)
        live = stream.until(lambda e: e.is_notification)
        assert (live.name, live.id, live.data["sequence"]) == ("live-notification", "5", 5)
    acked = aviso.post(f"{SUBSCRIPTIONS}/rhine/ack", json={"sequence": 4})
    assert acked.status_code == 200
    assert acked.json()["acknowledged_sequence"] == 4 and acked.json()["pending"] == 1
    # Never backwards.
    assert aviso.post(f"{SUBSCRIPTIONS}/rhine/ack", json={"sequence": 2}).status_code == 200
    assert aviso.get(f"{SUBSCRIPTIONS}/rhine").json()["acknowledged_sequence"] == 4
    with _events(aviso, "rhine") as stream:
        started = stream.until("replay-control/replay_started")
        assert started.data["from_sequence"] == 5
        assert _sequences(stream, 1) == [5]
    # Last-Event-ID acknowledges before the stream starts.
    with _events(aviso, "rhine", {"Last-Event-ID": "5"}) as stream:
        assert stream.until("replay-control/replay_started").data["from_sequence"] == 6
        stream.until("replay-control/replay_completed")
        assert stream.notifications() == []
    state = aviso.get(f"{SUBSCRIPTIONS}/rhine").json()
    assert state["acknowledged_sequence"] == 5 and state["pending"] == 0
    assert state["lag_seconds"] is None


def test_frames_are_a_watchs_plus_the_id_line(aviso: AvisoClient) -> None:
    assert aviso.put(f"{SUBSCRIPTIONS}/rhine", json=RHINE).status_code == 201
    _notify(aviso, 1)
    replayed = aviso.replay("river_gauge", {"basin": "rhine"}).notifications()[0]
    with aviso.stream("GET", f"{SUBSCRIPTIONS}/rhine/events") as response:
        raw = b""
        for chunk in response.iter_bytes():
            raw += chunk
            if b"event: replay\n" in raw and raw.endswith(b"\n\n"):
                break
    start = raw.index(b"event: replay\n")
    frame = raw[start : raw.index(b"\n\n", start) + 2]
    expected = json.dumps(replayed.data, separators=(",", ":"), sort_keys=True).encode()
    assert frame == b"event: replay\nid: 1\ndata: " + expected + b"\n\n"


def test_acknowledgement_bodies(aviso: AvisoClient) -> None:
    assert aviso.put(f"{SUBSCRIPTIONS}/rhine", json=RHINE).status_code == 201
    url = f"{SUBSCRIPTIONS}/rhine/ack"
    for body in ({}, {"sequence": "1"}, {"sequence": -1}, {"sequence": True}, [1], {"s": 1}):
        _error(aviso.post(url, json=body), 400, "INVALID_ACKNOWLEDGEMENT")
    _error(aviso.post(url, json={"sequence": 2**64}), 400, "INVALID_ACKNOWLEDGEMENT")
    _error(aviso.post(url, content=b"[" * 100 + b"]" * 100), 400, "INVALID_JSON")
    _error(
        aviso.post(f"{SUBSCRIPTIONS}/none/ack", json={"sequence": 1}), 404, "SUBSCRIPTION_NOT_FOUND"
    )
    for header in ("x", "-1", "1" * 21):
        response = aviso.get(f"{SUBSCRIPTIONS}/rhine/events", headers={"Last-Event-ID": header})
        _error(response, 400, "INVALID_ACKNOWLEDGEMENT")


def test_from_id_and_from_date_start_points(aviso: AvisoClient) -> None:
    for level in (1, 2, 3):
        _notify(aviso, level)
    from_id = {**RHINE, "from_id": "2"}
    assert aviso.put(f"{SUBSCRIPTIONS}/from-id", json=from_id).json()["pending"] == 2
    from_date = {**RHINE, "from_date": "2000-01-01T00:00:00Z"}
    created = aviso.put(f"{SUBSCRIPTIONS}/from-date", json=from_date).json()
    assert created["start_sequence"] == 1 and created["pending"] == 3
    with _events(aviso, "from-id") as stream:
        assert _sequences(stream, 2) == [2, 3]


def test_deleting_a_subscription_ends_its_open_streams(aviso: AvisoClient) -> None:
    assert aviso.put(f"{SUBSCRIPTIONS}/rhine", json=RHINE).status_code == 201
    with _events(aviso, "rhine") as stream:
        stream.until("replay-control/replay_completed")
        assert aviso.delete(f"{SUBSCRIPTIONS}/rhine").status_code == 204
        closing = stream.until("connection-closing")
        assert closing.data["reason"] == "end_of_stream"
        assert stream.next() is None


def test_caps_and_definition_size() -> None:
    config = with_changes(CONFIG, subscriptions={"max_per_user": 2, "max_definition_bytes": 200})
    with serve(config) as aviso:
        for name in ("a", "b"):
            assert aviso.put(f"{SUBSCRIPTIONS}/{name}", json=RHINE).status_code == 201
        body = _error(aviso.put(f"{SUBSCRIPTIONS}/c", json=RHINE), 429, "TOO_MANY_SUBSCRIPTIONS")
        assert "subscriptions.max_per_user" in body["message"]
        # The same definition again is no new subscription.
        assert aviso.put(f"{SUBSCRIPTIONS}/a", json=RHINE).status_code == 200
        assert aviso.delete(f"{SUBSCRIPTIONS}/a").status_code == 204
        big = {"event_type": "river_gauge", "identifier": {"basin": "r" * 300}}
        body = _error(
            aviso.put(f"{SUBSCRIPTIONS}/c", json=big), 400, "INVALID_SUBSCRIPTION_REQUEST"
        )
        assert "subscriptions.max_definition_bytes" in body["message"]
    with serve(with_changes(CONFIG, subscriptions={"max_total": 1})) as aviso:
        assert aviso.put(f"{SUBSCRIPTIONS}/a", json=RHINE).status_code == 201
        body = _error(aviso.put(f"{SUBSCRIPTIONS}/b", json=RHINE), 429, "TOO_MANY_SUBSCRIPTIONS")
        assert "subscriptions.max_total" in body["message"]


def test_disabled_subscriptions_are_not_served() -> None:
    with serve(with_changes(CONFIG, subscriptions={"enabled": False})) as aviso:
        assert aviso.put(f"{SUBSCRIPTIONS}/a", json=RHINE).status_code == 404
        assert aviso.get(SUBSCRIPTIONS).status_code == 404
        paths = aviso.get("/api-docs/openapi.json").json()["paths"]
        assert not [path for path in paths if path.startswith(SUBSCRIPTIONS)]


# -- with auth ---------------------------------------------------------------------------


ANALYSTS = {"required": True, "read_roles": {"localrealm": ["analyst"]}}


def _bearer(user: str, *roles: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint(user, roles=roles)}"}


def test_with_auth_names_belong_to_their_creator_and_roles_are_checked_again() -> None:
    feed = {
        "topic": {"base": "split", "key_order": ["name"]},
        "identifier": {"name": {"type": "StringHandler", "required": True}},
        "auth": ANALYSTS,
    }
    body = {"event_type": "split_feed", "identifier": {"name": "n1"}}
    with fake_auth_o_tron() as aot:
        doc = auth_document("direct", aot.url, schemas={"split_feed": feed})
        with running_server(doc) as server, httpx.Client(base_url=server.url) as client:
            url = f"{SUBSCRIPTIONS}/mine"
            anonymous = client.put(url, json=body)
            assert anonymous.status_code == 401
            assert anonymous.headers.get_list("www-authenticate")
            assert client.put(url, json=body, headers=_bearer("bob")).status_code == 403
            alice = _bearer("alice", "analyst")
            assert client.put(url, json=body, headers=alice).status_code == 201
            # Bob's namespace is his own: the name is free there, Alice's is not found.
            bob = _bearer("bob", "analyst")
            _error(client.get(url, headers=bob), 404, "SUBSCRIPTION_NOT_FOUND")
            _error(client.delete(url, headers=bob), 404, "SUBSCRIPTION_NOT_FOUND")
            _error(client.get(f"{url}/events", headers=bob), 404, "SUBSCRIPTION_NOT_FOUND")
            letters = f"{url}/dead-letters"
            _error(client.get(letters, headers=bob), 404, "SUBSCRIPTION_NOT_FOUND")
            _error(client.post(f"{letters}/redrive", headers=bob), 404, "SUBSCRIPTION_NOT_FOUND")
            assert client.get(letters).status_code == 401
            assert client.get(letters, headers=alice).json()["dead_letters"] == []
            assert client.get(SUBSCRIPTIONS, headers=bob).json()["subscriptions"] == []
            assert client.put(url, json=body, headers=bob).status_code == 201
            # Alice without the role any more reads nothing.
            assert client.get(f"{url}/events", headers=_bearer("alice")).status_code == 403
            with _events(client, "mine", alice) as stream:
                stream.until("replay-control/replay_completed")
            assert [
                s["name"] for s in client.get(SUBSCRIPTIONS, headers=alice).json()["subscriptions"]
            ] == ["mine"]


def test_owners_with_long_names_each_keep_their_own_subscriptions() -> None:
    """A user name is kept in the subscription's keys; names too long for a key (of any
    store) are kept as their digest, and still name one owner each."""
    feed = {
        "topic": {"base": "split", "key_order": ["name"]},
        "identifier": {"name": {"type": "StringHandler", "required": True}},
    }
    name = "n" * 64
    body = {"event_type": "split_feed", "identifier": {"name": "n1"}}
    owners = ["\u00e9" * 100, "\u00e9" * 99 + "e", "a" * 90]
    with fake_auth_o_tron() as aot:
        doc = auth_document("direct", aot.url, schemas={"split_feed": feed})
        with running_server(doc) as server, httpx.Client(base_url=server.url) as client:
            for owner in owners:
                created = client.put(f"{SUBSCRIPTIONS}/{name}", json=body, headers=_bearer(owner))
                assert created.status_code == 201, created.text
            for owner in owners:
                listed = client.get(SUBSCRIPTIONS, headers=_bearer(owner)).json()
                assert [s["name"] for s in listed["subscriptions"]] == [name]
                gone = client.delete(f"{SUBSCRIPTIONS}/{name}", headers=_bearer(owner))
                assert gone.status_code == 204
                after = client.get(SUBSCRIPTIONS, headers=_bearer(owner)).json()
                assert after["subscriptions"] == []


def test_the_section_is_checked_at_startup() -> None:
    with pytest.raises(ConfigError, match=r"subscriptions\.max_per_user"):
        build_app(with_changes(CONFIG, subscriptions={"max_per_user": 0}))
    with pytest.raises(ConfigError, match="max_peruser"):
        build_app(with_changes(CONFIG, subscriptions={"max_peruser": 1}))


def test_a_stream_that_cannot_subscribe_is_refused_and_logged_with_its_topic(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger=AVISO_LOGGER)
    document = with_changes(
        CONFIG,
        notification_backend={"kind": "refusing_subscriptions", "refusing_subscriptions": {}},
    )
    with (
        running_server(document, extra_plugins=[RefusingSubscriptionsPlugin()]) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        assert client.put(f"{SUBSCRIPTIONS}/refused", json=RHINE).status_code == 201
        answer = client.get(f"{SUBSCRIPTIONS}/refused/events")
    error = _error(answer, 500, "SSE_STREAM_INITIALIZATION_FAILED")
    [record] = [
        record
        for record in caplog.records
        if getattr(record, "fields", {}).get("code") == "SSE_STREAM_INITIALIZATION_FAILED"
    ]
    assert record.fields["topic"] == error["topic"] == "gauge.rhine.*.*"
