"""The streaming source's admission control: ``maxNotificationsPerTrigger`` bounds every
micro-batch, ``Trigger.AvailableNow`` reads a backlog in such batches and stops, and the
progress's ``latestOffset`` gives the source's lag."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from pyspark.sql import SparkSession

from aviso_spark.example_data import dissemination_rows
from aviso_spark.stream_source import source_lag
from tests.spark.checks import EVENT_TYPE
from tests.spark.conftest import AvisoSetup
from tests.spark.test_spark_partitioned_read import notify_body

BACKLOG = 95
LIMIT = 20
# Five micro-batches, each a Spark job, after the session's start on loaded cores.
pytestmark = pytest.mark.timeout(300)


def test_available_now_reads_a_backlog_in_batches_no_larger_than_the_limit(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    with httpx.Client(base_url=aviso.server.url) as client:
        for row in dissemination_rows(BACKLOG, 0.0, seed=9, destination_prefix=aviso.prefix).rows:
            response = client.post(
                "/api/v1/notification", content=json.dumps(notify_body(row, aviso.prefix))
            )
            assert response.status_code == 200, response.text
    sizes: list[int] = []

    def batch(frame: object, batch_id: int) -> None:
        sizes.append(frame.count())  # type: ignore[attr-defined]

    query = (
        spark.readStream.format("aviso")
        .options(url=aviso.server.url, event_type=EVENT_TYPE, from_id="1")
        .option("identifier.destination", aviso.prefix)
        .option("maxNotificationsPerTrigger", str(LIMIT))
        .load()
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300), "Trigger.AvailableNow did not end"
    assert sum(sizes) == BACKLOG
    assert max(sizes) == LIMIT and len([size for size in sizes if size]) == 5
    progress = query.recentProgress
    sources = [item.sources[0] for item in progress]
    lags = [source_lag({"latestOffset": s.latestOffset, "endOffset": s.endOffset}) for s in sources]
    assert lags[0][EVENT_TYPE] > 0 and lags[-1] == {EVENT_TYPE: 0}
