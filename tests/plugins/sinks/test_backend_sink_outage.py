"""The ``backend`` sink on a real nats-server: a re-sent row is reported ``already_stored``,
and a store that goes down mid-job fails the batch within ``unavailable_after_seconds``
(rather than after every retry of every layer)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aviso_host.config import settings_from_document
from aviso_host.identifiers import CatalogPlanner
from aviso_host.plugins import discover
from aviso_host.schemas import SchemaCatalog
from aviso_plugins.types import Notification, SinkOutcome, SinkUnavailable
from tests.support.nats import nats_server

pytest.importorskip("pyspark", reason="the 'spark' extra is not installed")

from aviso_spark.runtime import HostRuntime

BOUND = 60.0
"""Seconds a scenario may take at most (bounded, not a timing assertion)."""


def runtime(nats_url: str) -> HostRuntime:
    document = {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": {"kind": "jetstream", "jetstream": {"nats_url": nats_url}},
    }
    registry = discover()
    settings = settings_from_document(document, registry)
    return HostRuntime(
        registry, settings, CatalogPlanner(SchemaCatalog(settings, registry.field_handlers))
    )


def rows(count: int) -> list[Notification]:
    return [
        Notification("outage", {"n": str(index)}, None, message_id=f"row-{index}")
        for index in range(count)
    ]


def test_re_sent_rows_are_already_stored_and_a_store_down_fails_within_the_bound(
    tmp_path: Path,
) -> None:
    with nats_server(tmp_path / "nats") as nats:
        sink = runtime(nats.url).sink("backend", {"unavailable_after_seconds": "2"})

        async def scenario() -> tuple[list[SinkOutcome], list[SinkOutcome], str]:
            await sink.start()
            try:
                first = await sink.publish_batch(rows(5))
                again = await sink.publish_batch(rows(6))
                nats.stop()
                with pytest.raises(SinkUnavailable) as failure:
                    await sink.publish_batch(rows(3))
                return first, again, str(failure.value)
            finally:
                await sink.close()

        first, again, failure = asyncio.run(asyncio.wait_for(scenario(), BOUND))
    assert [(outcome.error, outcome.already_stored) for outcome in first] == [(None, False)] * 5
    assert [outcome.already_stored for outcome in again] == [True] * 5 + [False]
    assert failure.startswith("publishing to the jetstream backend failed after "), failure
