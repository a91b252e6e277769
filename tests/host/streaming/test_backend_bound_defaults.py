"""A third-party backend that implements neither ``history_bound`` nor
``first_sequence_after`` (the defaults of ``StorageBackend``) still replays to an end point
and switches to live without loss or duplicate.

Single-backend by design: the backend under test is an in-memory subclass with the two
methods reset to the base class's defaults, registered through a real plugin.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import httpx
import pytest

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_plugins import hookimpl
from aviso_plugins.types import StorageBackend
from tests.conformance.helpers import (
    REPLAY,
    WATCH,
    gauge,
    open_stream,
    parse_ce_time,
    read_stream,
    replay_all,
    unique_basin,
)
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import running_server


class DefaultsBackend(InMemoryBackend):
    kind: ClassVar[str] = "defaults_only"
    history_bound = StorageBackend.history_bound
    first_sequence_after = StorageBackend.first_sequence_after


class DefaultsPlugin:
    @hookimpl
    def aviso_storage_backends(self) -> list[type[StorageBackend]]:
        return [DefaultsBackend]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    document = with_changes(
        API_EXAMPLE,
        notification_backend={
            "kind": "defaults_only",
            "defaults_only": {"max_history_per_topic": 100},
        },
    )
    with (
        running_server(document, extra_plugins=[DefaultsPlugin()]) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as http,
    ):
        yield http


def _body(basin: str, **fields: str) -> dict[str, object]:
    return {"event_type": "river_gauge", "identifier": {"basin": basin}, **fields}


def test_to_id_without_a_known_bound_is_the_end_as_sent(client: httpx.Client) -> None:
    basin = unique_basin()
    for level in range(4):
        gauge(client, basin, level)
    sequences = replay_all(client, "river_gauge", {"basin": basin}).sequences()
    result = read_stream(client, REPLAY, _body(basin, from_id="0", to_id=str(sequences[1])))
    assert result.sequences() == sequences[:2]
    assert result.events[0].data["end_sequence"] == sequences[1]
    assert result.kinds[-2:] == ["replay-control/replay_completed", "connection-closing"]


def test_to_date_through_the_default_search(client: httpx.Client) -> None:
    basin = unique_basin()
    for level in range(3):
        gauge(client, basin, level)
    history = replay_all(client, "river_gauge", {"basin": basin})
    times = [parse_ce_time(event.data["time"]) for event in history.notifications()]
    middle = times[0] + (times[1] - times[0]) / 2
    to_date = middle.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    result = read_stream(client, REPLAY, _body(basin, from_id="0", to_date=to_date))
    assert result.sequences() == history.sequences()[:1]


def test_a_watch_switches_to_live_without_duplicate(client: httpx.Client) -> None:
    basin = unique_basin()
    gauge(client, basin, 1)
    with open_stream(client, WATCH, _body(basin, from_id="0")) as stream:
        stream.until_kind("replay-control/replay_completed")
        gauge(client, basin, 2)
        live = stream.until_kind("live-notification")
    replayed = [event.data["sequence"] for event in stream.events if event.name == "replay"]
    assert len(replayed) == 1
    assert live.data["sequence"] > replayed[0]
    assert stream.events[0].data["end_sequence"] is None
