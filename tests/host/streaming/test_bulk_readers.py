"""``watch_endpoint.bulk_readers``: the named users' replays (a Spark job's) are not paced;
everyone else's are, as configured."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import ClassVar

import httpx
import pytest

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.plugins import discover
from aviso_plugins import hookimpl
from aviso_plugins.types import AuthProvider, AuthRequest, Caller
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import running_server

WATCH = API_EXAMPLE["watch_endpoint"]


def test_a_bulk_reader_gets_unpaced_replays_in_big_pages() -> None:
    document = with_changes(API_EXAMPLE, watch_endpoint={**WATCH, "bulk_readers": ["spark-etl"]})
    settings = settings_from_document(document, discover())
    bulk = settings.watch_for("river_gauge", "spark-etl")
    assert (bulk.replay_batch_delay_ms, bulk.replay_batch_size) == (0, 1000)
    for other in ("alice", None):
        paced = settings.watch_for("river_gauge", other)
        assert (paced.replay_batch_delay_ms, paced.replay_batch_size) == (100, 100)


def test_a_configured_page_size_larger_than_the_bulk_one_is_kept() -> None:
    watch = {**WATCH, "replay_batch_size": 5000, "bulk_readers": ["*"]}
    settings = settings_from_document(with_changes(API_EXAMPLE, watch_endpoint=watch), discover())
    assert settings.watch_for("river_gauge").replay_batch_size == 5000


@pytest.mark.parametrize("bad", [{"bulk_readers": "spark"}, {"bulk_replay_batch_size": 0}])
def test_a_bad_bulk_setting_fails_startup(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        settings_from_document(
            with_changes(API_EXAMPLE, watch_endpoint={**WATCH, **bad}), discover()
        )


def test_the_replay_announces_the_bulk_page_size_to_every_caller_under_a_star() -> None:
    watch = {**WATCH, "bulk_readers": ["*"], "bulk_replay_batch_size": 700}
    with (
        running_server(with_changes(API_EXAMPLE, watch_endpoint=watch)) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        body = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}, "from_id": "1"}
        text = client.post("/api/v1/replay", content=json.dumps(body)).text
    started = next(
        json.loads(line[len("data:") :])
        for line in text.splitlines()
        if line.startswith("data:") and "replay_started" in line
    )
    assert started["batch_size"] == 700


class _HeaderCaller(AuthProvider):
    """The caller named by ``X-Caller``."""

    mode: ClassVar[str] = "header_caller"

    async def authenticate(self, request: AuthRequest) -> Caller | None:
        name = request.headers.get("X-Caller")
        return Caller(name, "lab", frozenset()) if name else None


class _HeaderAuth:
    @hookimpl
    def aviso_auth_providers(self) -> list[type[AuthProvider]]:
        return [_HeaderCaller]


def _announced_batch_size(lines: Iterator[str]) -> int:
    for line in lines:
        if line.startswith("data:") and "replay_started" in line:
            started: int = json.loads(line[len("data:") :])["batch_size"]
            return started
    raise AssertionError("the stream ended without replay_started")


def test_a_bulk_readers_subscription_stream_is_sized_as_their_watch() -> None:
    watch = {**WATCH, "bulk_readers": ["spark-etl"], "bulk_replay_batch_size": 700}
    document = with_changes(
        API_EXAMPLE,
        watch_endpoint=watch,
        auth={"enabled": True, "mode": "header_caller", "admin_roles": {"lab": ["admin"]}},
    )
    body = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}, "from_id": "1"}
    with (
        running_server(document, extra_plugins=[_HeaderAuth()]) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        for caller, size in (("spark-etl", 700), ("alice", WATCH["replay_batch_size"])):
            headers = {"X-Caller": caller}
            put = client.put("/api/v1/subscriptions/gauges", json=body, headers=headers)
            assert put.status_code == 201, put.text
            events = "/api/v1/subscriptions/gauges/events"
            with client.stream("GET", events, headers=headers) as stream:
                assert stream.status_code == 200
                assert _announced_batch_size(stream.iter_lines()) == size
