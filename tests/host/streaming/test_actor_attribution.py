"""Actor attribution: an authenticated publisher's username travels with its notification
and is delivered as the ``publisher`` CloudEvent attribute on watch and replay; anonymous
publishes carry none, and nothing a client sends can claim one."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import nats
import pytest

from tests.conformance.helpers import CLOUDEVENT_KEYS
from tests.support.configs import jetstream_variant
from tests.support.nats import NatsServer
from tests.support.server import running_server
from tests.support.sse import DEFAULT_TIMEOUT, Event, Stream, collect
from tests.support.tokens import SECRET, bearer, mint

CONFIG: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 0, "base_url": "http://aviso.test"},
    "notification_backend": {"kind": "in_memory", "in_memory": {"max_history_per_topic": 100}},
    "auth": {
        "enabled": True,
        "mode": "trusted_proxy",
        "jwt_secret": SECRET,
        "admin_roles": {"localrealm": ["admin"]},
    },
    "notification_schema": {
        "feed": {
            "topic": {"base": "attrfeed", "key_order": ["name"]},
            "identifier": {"name": {"type": "StringHandler", "required": True}},
            "payload": {"required": False},
        }
    },
}
SPOOFING_HEADERS = {
    "aviso_actor": '"mallory"',
    "publisher": "mallory",
    "ce-publisher": "mallory",
    "X-Forwarded-User": "mallory",
}


@pytest.fixture(params=["in_memory", "jetstream"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(backend: str, nats_session: NatsServer) -> Iterator[httpx.Client]:
    config = CONFIG if backend == "in_memory" else jetstream_variant(CONFIG, nats_session.url)
    with running_server(config) as server, httpx.Client(base_url=server.url) as http:
        yield http


def _identifier() -> dict[str, str]:
    # The JetStream server is shared by the session: each test keeps to its own topic.
    return {"name": uuid.uuid4().hex}


def _notify(
    client: httpx.Client,
    identifier: dict[str, str],
    headers: dict[str, str] | None = None,
    payload: Any = None,
) -> None:
    body = {"event_type": "feed", "identifier": identifier, "payload": payload}
    response = client.post("/api/v1/notification", content=json.dumps(body), headers=headers)
    assert response.status_code == 200, response.text


def _watched_and_replayed(
    client: httpx.Client, identifier: dict[str, str], headers: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Publish once while a watch is open; the live CloudEvent and its replayed twin."""
    watch = {"event_type": "feed", "identifier": identifier}
    with client.stream(
        "POST", "/api/v1/watch", content=json.dumps(watch), timeout=DEFAULT_TIMEOUT
    ) as response:
        events = Stream(response).events()
        assert next(events).kind == "live-notification/connection_established"
        _notify(client, identifier, headers)
        live = next(e for e in events if e.name == "live-notification")
    return live.data, _replayed(client, identifier)[0]


def _replayed(client: httpx.Client, identifier: dict[str, str]) -> list[dict[str, Any]]:
    body = {"event_type": "feed", "identifier": identifier, "from_id": "0"}
    events: list[Event] = collect(client, "/api/v1/replay", body)
    return [event.data for event in events if event.name == "replay"]


def test_an_authenticated_publish_is_attributed_on_watch_and_replay(
    client: httpx.Client,
) -> None:
    live, replayed = _watched_and_replayed(client, _identifier(), bearer(mint("alice")))
    for event in (live, replayed):
        assert event["publisher"] == "alice"
        # An additive extension: every other member keeps its value and the keys stay sorted.
        assert list(event) == sorted([*CLOUDEVENT_KEYS, "publisher"])
    assert live == replayed


def test_an_anonymous_publish_has_no_publisher(client: httpx.Client) -> None:
    live, replayed = _watched_and_replayed(client, _identifier())
    assert list(live) == CLOUDEVENT_KEYS
    assert list(replayed) == CLOUDEVENT_KEYS


def test_a_client_cannot_claim_a_publisher(client: httpx.Client) -> None:
    anonymous, authenticated = _identifier(), _identifier()
    _notify(client, anonymous, SPOOFING_HEADERS, payload={"aviso_actor": '"mallory"'})
    _notify(client, authenticated, {**SPOOFING_HEADERS, **bearer(mint("alice"))})
    assert "publisher" not in _replayed(client, anonymous)[0]
    assert _replayed(client, authenticated)[0]["publisher"] == "alice"
    body = {"event_type": "feed", "identifier": _identifier(), "publisher": "mallory"}
    refused = client.post("/api/v1/notification", content=json.dumps(body))
    assert refused.status_code == 400, refused.text


def test_any_username_survives_storage_exactly(client: httpx.Client) -> None:
    # Control characters would split a NATS header line if the name were stored raw.
    username = 'o\'brien "ops"\r\nNats-Msg-Id: forged\tÅsa '
    identifier = _identifier()
    _notify(client, identifier, bearer(mint(username)))
    assert _replayed(client, identifier)[0]["publisher"] == username


@pytest.mark.parametrize("header", ["not json", "42", '""'])
def test_a_foreign_writers_unusable_actor_header_is_left_out(
    nats_session: NatsServer, header: str
) -> None:
    """A record written to the stream by something other than aviso still renders."""
    config = jetstream_variant(CONFIG, nats_session.url)
    identifier = _identifier()
    with running_server(config) as server, httpx.Client(base_url=server.url) as http:
        _notify(http, _identifier())  # creates the stream
        server.call(lambda: _publish_foreign(nats_session.url, identifier["name"], header))
        replayed = _replayed(http, identifier)
    assert [list(event) for event in replayed] == [CLOUDEVENT_KEYS]


async def _publish_foreign(url: str, name: str, actor: str) -> None:
    connection = await nats.connect(url)
    try:
        stream = connection.jetstream()
        identifier = json.dumps({"name": name}, separators=(",", ":"))
        await stream.publish(
            f"attrfeed.{name}", b"null", headers={"identifier": identifier, "aviso_actor": actor}
        )
    finally:
        await connection.close()
