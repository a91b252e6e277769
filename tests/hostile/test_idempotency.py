"""``Idempotency-Key`` under attack: a writer flooding keys evicts only its own, and a key
re-used for another notification is refused, not silently acknowledged.

The in-memory budgets are made small (3 keys per writer and stream, 6 in all) so that a
flood of a few dozen keys shows what 120,000 would. Writers are anonymous here, told apart
by their loopback source address (127.0.0.2, 127.0.0.3, ...).
"""

from __future__ import annotations

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

NOTIFY = "/api/v1/notification"
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


def notify(client: httpx.Client, body: dict[str, Any], key: str) -> httpx.Response:
    return client.post(NOTIFY, json=body, headers={"Idempotency-Key": key})


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


@pytest.mark.backends("in_memory")
def test_past_the_total_the_least_recently_active_writer_s_keys_go_first(
    keyed_server: RunningServer,
) -> None:
    basin = f"idem{uuid.uuid4().hex[:12]}"
    idle_key = f"idle-{uuid.uuid4().hex}"
    active_key = f"active-{uuid.uuid4().hex}"
    before = evicted_early(keyed_server, "total_budget")
    with (
        client_from(keyed_server, "127.0.0.4") as idle,
        client_from(keyed_server, "127.0.0.5") as active,
    ):
        assert notify(idle, gauge(basin, 1), idle_key).status_code == 200
        assert notify(active, gauge(basin, 2), active_key).status_code == 200
        # Writers from ever new addresses fill the total; the active one keeps sending.
        for index in range(IN_ALL):
            with client_from(keyed_server, f"127.0.1.{index + 1}") as newcomer:
                answer = notify(newcomer, gauge(basin, 9), f"new-{uuid.uuid4().hex}")
                assert answer.status_code == 200, answer.text
            assert notify(active, gauge(basin, 2), active_key).status_code == 200
        # The idle writer's key went (counted), the active writer's is still remembered.
        assert notify(idle, gauge(basin, 1), idle_key).status_code == 200
        levels = stored_levels(idle, basin)
    assert levels.count("1") == 2, levels
    assert levels.count("2") == 1, levels
    assert evicted_early(keyed_server, "total_budget") - before >= 1


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
