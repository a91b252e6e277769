"""``Idempotency-Key`` under attack: a key re-used by anyone never gets a 2xx unless its
notification is the one stored under it, a user's keys are its own, and a writer flooding
keys evicts only its own.

The in-memory budgets are made small (3 keys per writer and stream, 6 in all) so that a
flood of a few dozen keys shows what 120,000 would. Writers are anonymous here unless a
test says otherwise, told apart by their loopback source address (127.0.0.2, 127.0.0.3, ...).
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conformance.helpers import read_stream
from tests.hostile.support import assert_client_error, assert_still_serving
from tests.support.configs import API_EXAMPLE, ForBackend
from tests.support.server import RunningServer, running_server
from tests.support.tokens import SECRET, bearer, mint

NOTIFY = "/api/v1/notification"
KEY = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
REPLAYED_HEADERS = {REPLAYED.lower(): "true"}
PER_WRITER = 3
IN_ALL = 6


@pytest.fixture(scope="module")
def keyed_server(for_backend: ForBackend) -> Iterator[RunningServer]:
    document = copy.deepcopy(API_EXAMPLE)
    document["notification_backend"]["in_memory"].update(
        duplicate_window="1h",
        duplicate_window_max_keys=IN_ALL,
        duplicate_window_max_keys_per_writer=PER_WRITER,
    )
    with running_server(for_backend(document)) as server:
        yield server


def client_from(server: RunningServer, address: str) -> httpx.Client:
    """A client whose connections come from ``address`` (any 127.0.0.0/8 address works)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=server.url, transport=transport, timeout=30.0)


def gauge(basin: str, level: int) -> dict[str, Any]:
    return {
        "event_type": "river_gauge",
        "identifier": {"basin": basin, "date": "20260402", "level": level},
        "payload": {"level": level},
    }


def notify(client: httpx.Client, body: dict[str, Any], key: str, **headers: str) -> httpx.Response:
    return client.post(NOTIFY, json=body, headers={KEY: key, **headers})


def stored_levels(client: httpx.Client, basin: str) -> list[str]:
    body = {"event_type": "river_gauge", "identifier": {"basin": basin}, "from_id": "1"}
    result = read_stream(client, "/api/v1/replay", body)
    return [event.data["data"]["identifier"]["level"] for event in result.notifications()]


def evicted_early(server: RunningServer, reason: str) -> float:
    registry = server.app.state.service.metrics.registry
    backend = server.app.state.service.settings.backend.kind
    value = registry.get_sample_value(
        "aviso_idempotency_keys_evicted_early_total", {"backend": backend, "reason": reason}
    )
    assert value is not None
    return value


def test_a_flood_of_keys_from_one_writer_evicts_none_of_another_s(
    keyed_server: RunningServer, backend: str
) -> None:
    basin = f"idem{uuid.uuid4().hex[:12]}"
    legitimate = f"legit-{uuid.uuid4().hex}"
    flooded_before = evicted_early(keyed_server, "writer_budget")
    with (
        client_from(keyed_server, "127.0.0.2") as producer,
        client_from(keyed_server, "127.0.0.3") as attacker,
    ):
        assert notify(producer, gauge(basin, 1), legitimate).status_code == 200
        # Ten times the writer's budget, on the same stream.
        for _ in range(10 * PER_WRITER):
            answer = notify(attacker, gauge(basin, 9), f"flood-{uuid.uuid4().hex}")
            assert answer.status_code == 200, answer.text
        # The producer's retry inside the window is still recognised: stored once.
        assert notify(producer, gauge(basin, 1), legitimate).status_code == 200
        levels = stored_levels(producer, basin)
        assert levels.count("1") == 1, levels
        assert levels.count("9") == 10 * PER_WRITER, levels
        assert_still_serving(producer)
    if backend == "in_memory":
        # The attacker forgot its own keys early, and each one was counted.
        flooded = evicted_early(keyed_server, "writer_budget") - flooded_before
        assert flooded == 10 * PER_WRITER - PER_WRITER


FLOOD = 2500
TOTAL = 2000


@pytest.fixture(scope="module")
def budgeted_server() -> Iterator[RunningServer]:
    document = copy.deepcopy(API_EXAMPLE)
    document["notification_backend"]["in_memory"].update(
        duplicate_window="1h", duplicate_window_max_keys=TOTAL
    )
    with running_server(document) as server:
        yield server


async def flood(server: RunningServer, address: str, basin: str, count: int) -> None:
    """``count`` notifies with fresh keys from ``address``, 8 at a time."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(base_url=server.url, transport=transport, timeout=30) as http:
        keys = iter(range(count))

        async def send() -> None:
            for index in keys:
                body = gauge(basin, 9)
                answer = await http.post(NOTIFY, json=body, headers={KEY: f"flood-{index}"})
                assert answer.status_code == 200, answer.text

        await asyncio.gather(*(send() for _ in range(8)))


def test_past_the_total_a_flood_from_one_address_evicts_none_of_another_s_keys(
    budgeted_server: RunningServer,
) -> None:
    """2,500 keys from one address with room for 2,000 in all: the flood gives up its own
    oldest keys, and a quiet writer's key stays remembered inside its window."""
    basin = f"idem{uuid.uuid4().hex[:12]}"
    quiet_key = f"quiet-{uuid.uuid4().hex}"
    before = evicted_early(budgeted_server, "total_budget")
    with client_from(budgeted_server, "127.0.0.8") as quiet:
        first = notify(quiet, gauge(basin, 1), quiet_key)
        assert first.status_code == 200, first.text
        asyncio.run(flood(budgeted_server, "127.0.0.9", basin, FLOOD))
        again = notify(quiet, gauge(basin, 1), quiet_key)
        assert again.status_code == 200, again.text
        assert again.headers.get(REPLAYED) == "true"
        assert stored_levels(quiet, basin).count("1") == 1
    # The flood paid for every key past the total with one of its own.
    assert evicted_early(budgeted_server, "total_budget") - before == FLOOD - (TOTAL - 1)


def test_a_key_re_used_for_another_notification_is_refused_with_422(
    keyed_server: RunningServer,
) -> None:
    basin = f"idem{uuid.uuid4().hex[:12]}"
    key = f"key-{uuid.uuid4().hex}"
    with client_from(keyed_server, "127.0.0.6") as producer:
        assert notify(producer, gauge(basin, 1), key).status_code == 200
        tampered = {**gauge(basin, 1), "payload": {"level": "changed"}}
        for body in (gauge(basin, 2), tampered):
            refused = notify(producer, body, key)
            assert_client_error(refused, 422, "IDEMPOTENCY_KEY_REUSED")
            assert key in refused.json()["message"]
        # The same notification again stays a plain re-send.
        assert notify(producer, gauge(basin, 1), key).status_code == 200
        assert stored_levels(producer, basin) == ["1"]
        assert_still_serving(producer)


def test_a_key_taken_first_by_another_client_never_acknowledges_the_producer(
    keyed_server: RunningServer,
) -> None:
    """Anonymous writers share one key scope per stream: another client posting a
    different notification with the producer's predictable key first makes every try of
    the producer a 422, never a 2xx for a notification that is not stored."""
    basin = f"idem{uuid.uuid4().hex[:12]}"
    with (
        client_from(keyed_server, "127.0.0.10") as attacker,
        client_from(keyed_server, "127.0.0.11") as producer,
    ):
        for round_ in range(3):
            key = f"spark-{round_}-{uuid.uuid4().hex}"
            assert notify(attacker, gauge(basin, 9), key).status_code == 200
            for _ in range(2):
                refused = notify(producer, gauge(basin, 1), key)
                assert_client_error(refused, 422, "IDEMPOTENCY_KEY_REUSED")
        assert stored_levels(producer, basin) == ["9"] * 3
        assert_still_serving(producer)


def test_a_re_send_is_answered_200_with_the_same_body_and_idempotent_replayed(
    keyed_server: RunningServer,
) -> None:
    basin = f"idem{uuid.uuid4().hex[:12]}"
    key = f"key-{uuid.uuid4().hex}"
    with (
        client_from(keyed_server, "127.0.0.12") as producer,
        client_from(keyed_server, "127.0.0.13") as other,
    ):
        first = notify(producer, gauge(basin, 1), key)
        assert first.status_code == 200, first.text
        assert REPLAYED.lower() not in first.headers
        # From the producer, then from another anonymous client (the same scope).
        for client in (producer, other):
            again = notify(client, gauge(basin, 1), key)
            assert again.status_code == 200, again.text
            assert again.headers.get(REPLAYED) == "true"
            assert set(again.json()) == {"status", "request_id", "processed_at"}
            assert again.json()["status"] == "success"
        assert stored_levels(producer, basin) == ["1"]


@pytest.fixture(scope="module")
def one_per_topic_server(for_backend: ForBackend, backend: str) -> Iterator[RunningServer]:
    """Only the newest notification of each topic is kept (JetStream's default)."""
    document = for_backend(API_EXAMPLE)
    if backend == "jetstream":
        document["notification_schema"]["river_gauge"]["storage_policy"] = {
            "allow_duplicates": False
        }
    else:
        document["notification_backend"]["in_memory"].update(
            max_history_per_topic=1, duplicate_window="1h"
        )
    with running_server(document) as server:
        yield server


def test_a_re_send_whose_notification_is_no_longer_retained_is_refused_with_422(
    one_per_topic_server: RunningServer,
) -> None:
    basin = f"idem{uuid.uuid4().hex[:12]}"
    key = f"key-{uuid.uuid4().hex}"
    with httpx.Client(base_url=one_per_topic_server.url, timeout=30.0) as producer:
        assert notify(producer, gauge(basin, 1), key).status_code == 200
        # A newer notification on the same topic replaces it.
        newer = {**gauge(basin, 1), "payload": {"level": "newer"}}
        assert producer.post(NOTIFY, json=newer).status_code == 200
        for body in (gauge(basin, 1), gauge(basin, 2)):
            refused = notify(producer, body, key)
            assert refused.status_code == 422, refused.text
            assert key in refused.json()["message"]
        assert refused.json()["code"] in ("IDEMPOTENCY_KEY_NOT_RETAINED", "IDEMPOTENCY_KEY_REUSED")
        # The same notification: it cannot be compared any more.
        resent = notify(producer, gauge(basin, 1), key)
        assert_client_error(resent, 422, "IDEMPOTENCY_KEY_NOT_RETAINED")
        body = {"event_type": "river_gauge", "identifier": {"basin": basin}, "from_id": "1"}
        payloads = [
            event.data["data"]["payload"]
            for event in read_stream(producer, "/api/v1/replay", body).notifications()
        ]
        assert payloads == [{"level": "newer"}]
        assert_still_serving(producer)


@pytest.fixture(scope="module")
def authenticated_server(for_backend: ForBackend) -> Iterator[RunningServer]:
    """Auth on (JWTs a trusted proxy would forward); ``river_gauge`` stays writable by
    anyone, anonymous clients included."""
    document = for_backend(API_EXAMPLE)
    document["auth"] = {
        "enabled": True,
        "mode": "trusted_proxy",
        "jwt_secret": SECRET,
        "admin_roles": {"localrealm": ["admin"]},
    }
    with running_server(document) as server:
        yield server


def test_an_authenticated_writer_s_keys_are_its_own(authenticated_server: RunningServer) -> None:
    basin = f"idem{uuid.uuid4().hex[:12]}"
    key = f"spark-{uuid.uuid4().hex}"
    alice, bob = bearer(mint("alice")), bearer(mint("bob"))
    with httpx.Client(base_url=authenticated_server.url, timeout=30.0) as http:
        # The same key, three scopes: bob's, anonymous, alice's. Each stores its own.
        for level, headers in ((1, bob), (2, {}), (3, alice)):
            answer = notify(http, gauge(basin, level), key, **headers)
            assert answer.status_code == 200, answer.text
            assert REPLAYED.lower() not in answer.headers
        # Alice's re-send is hers: replayed; a different notification of hers is refused.
        again = notify(http, gauge(basin, 3), key, **alice)
        assert again.status_code == 200, again.text
        assert again.headers.get(REPLAYED) == "true"
        assert_client_error(
            notify(http, gauge(basin, 4), key, **alice), 422, "IDEMPOTENCY_KEY_REUSED"
        )
        assert sorted(stored_levels(http, basin)) == ["1", "2", "3"]
