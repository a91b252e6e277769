"""The completion event type of a source that requires auth requires it too: its events
carry the source's group values, counts and missing members, so whoever may not read the
source may not read them, and nobody but the consumer (and administrators) writes them."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.plugins.completion.support import ENS
from tests.support.server import running_server
from tests.support.sse import DEFAULT_TIMEOUT, Stream
from tests.support.tokens import SECRET, bearer, mint

READERS = {"localrealm": ["reader"]}
WRITERS = {"localrealm": ["writer"]}


def protected_config() -> dict[str, Any]:
    ens = copy.deepcopy(ENS)
    ens["auth"] = {"required": True, "read_roles": READERS, "write_roles": WRITERS}
    return {
        "application": {"host": "127.0.0.1", "port": 0},
        "logging": {"level": "warn"},
        "notification_backend": {"kind": "in_memory"},
        "watch_endpoint": {"replay_batch_delay_ms": 0},
        "auth": {
            "enabled": True,
            "mode": "trusted_proxy",
            "jwt_secret": SECRET,
            "admin_roles": {"localrealm": ["admin"]},
        },
        "notification_schema": {"ens": ens},
    }


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with running_server(protected_config()) as server, httpx.Client(base_url=server.url) as http:
        yield http


def completion_watch(step: int) -> bytes:
    return json.dumps({"event_type": "ens_complete", "identifier": {"step": step}}).encode()


def forged(step: int) -> bytes:
    body = {
        "event_type": "ens_complete",
        "identifier": {"run": "r1", "step": step, "status": "complete"},
        "payload": {"count": 5},
    }
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), (bearer(mint("mallory")), 403)],
    ids=["anonymous", "without-read-role"],
)
def test_the_completion_event_type_is_read_as_its_source(
    client: httpx.Client, headers: dict[str, str], status: int
) -> None:
    for route in ("/api/v1/watch", "/api/v1/replay"):
        with client.stream(
            "POST", route, content=completion_watch(24), headers=headers, timeout=DEFAULT_TIMEOUT
        ) as response:
            assert response.status_code == status, route


@pytest.mark.parametrize(
    "headers",
    [{}, bearer(mint("walter", roles=["writer"])), bearer(mint("rita", roles=["reader"]))],
    ids=["anonymous", "source-writer", "reader"],
)
def test_nobody_but_the_consumer_and_administrators_publishes_a_completion_event(
    client: httpx.Client, headers: dict[str, str]
) -> None:
    response = client.post("/api/v1/notification", content=forged(24), headers=headers)
    assert response.status_code in (401, 403), response.text


def test_a_reader_of_the_source_still_gets_the_completion_event(client: httpx.Client) -> None:
    writer = bearer(mint("walter", roles=["writer"]))
    with client.stream(
        "POST",
        "/api/v1/watch",
        content=completion_watch(6),
        headers=bearer(mint("rita", roles=["reader"])),
        timeout=DEFAULT_TIMEOUT,
    ) as response:
        assert response.status_code == 200
        events = Stream(response).events()
        assert next(events).kind == "live-notification/connection_established"
        for number in range(5):
            body = {"event_type": "ens", "identifier": {"run": "r1", "step": 6, "member": number}}
            sent = client.post("/api/v1/notification", content=json.dumps(body), headers=writer)
            assert sent.status_code == 200, sent.text
        event = next(e for e in events if e.name == "live-notification")
    assert event.data["type"] == "int.ecmwf.aviso.ens_complete"
    assert event.data["data"]["payload"]["count"] == 5
