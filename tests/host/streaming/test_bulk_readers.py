"""``watch_endpoint.bulk_readers``: the named users' replays (a Spark job's) are not paced;
everyone else's are, as configured."""

from __future__ import annotations

import json

import httpx
import pytest

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.plugins import discover
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
