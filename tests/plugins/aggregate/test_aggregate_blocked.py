"""The aggregate watch is a plugin like any other: blocked, the server serves without its
route and every other route as before, and its document describes none of it."""

from __future__ import annotations

import httpx
import pytest
from openapi_spec_validator import validate

from aviso_host.plugins import BLOCK_ENV
from tests.plugins.aggregate.test_aggregate import AGGREGATE, CONFIG, publish, request, unique_run
from tests.support.configs import API_EXAMPLE
from tests.support.openapi import served_document
from tests.support.server import running_server


def test_blocked_the_server_serves_without_the_aggregate_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(BLOCK_ENV, "aggregate")
    run = unique_run()
    with (
        running_server(CONFIG) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        publish(client, run, 6)
        assert client.post(AGGREGATE, json=request(run, ["step"])).status_code == 404
        body = {"event_type": "forecast", "identifier": {"run": run}, "from_id": "1"}
        replay = client.post("/api/v1/replay", json=body)
    assert replay.status_code == 200
    assert "replay_completed" in replay.text


def test_blocked_the_document_describes_no_aggregate(monkeypatch: pytest.MonkeyPatch) -> None:
    served = served_document(API_EXAMPLE)
    monkeypatch.setenv(BLOCK_ENV, "aggregate")
    blocked = served_document(API_EXAMPLE)
    validate(blocked)
    assert set(served["paths"]) - set(blocked["paths"]) == {AGGREGATE}
    schemas = set(served["components"]["schemas"]) - set(blocked["components"]["schemas"])
    assert schemas == {"AggregateRequest", "AggregateStreamEvent", "AggregateCounts"}
