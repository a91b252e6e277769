"""The streaming source's admission control: ``maxNotificationsPerTrigger`` bounds every
micro-batch, ``Trigger.AvailableNow`` reads a backlog in such batches and stops, and the
progress's ``latestOffset`` gives the source's lag."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml
from pyspark.sql import SparkSession

from aviso_spark.example_data import dissemination_rows
from aviso_spark.stream_source import source_lag
from tests.spark.checks import EVENT_TYPE, notify_rows
from tests.spark.conftest import ROOT, AvisoSetup, dissemination_document
from tests.support.server import running_server

BACKLOG = 95
LIMIT = 20
# Five micro-batches, each a Spark job, after the session's start on loaded cores.
pytestmark = pytest.mark.timeout(300)


def test_available_now_reads_a_backlog_in_batches_no_larger_than_the_limit(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    with httpx.Client(base_url=aviso.server.url) as client:
        rows = dissemination_rows(BACKLOG, 0.0, seed=9, destination_prefix=aviso.prefix).rows
        notify_rows(client, rows, aviso.prefix)
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
    lags = [source_lag(item.sources[0]) for item in progress]
    assert lags[0][EVENT_TYPE] > 0 and lags[-1] == {EVENT_TYPE: 0}


def test_several_event_types_in_one_query_share_the_limit(
    spark: SparkSession, tmp_path: Path
) -> None:
    shipped = yaml.safe_load((ROOT / "configuration" / "config.yaml").read_text())
    document = dissemination_document("nats://127.0.0.1:1")
    document["notification_backend"] = {"kind": "in_memory"}
    document["notification_schema"]["mars"] = shipped["notification_schema"]["mars"]
    mars = {"class": "od", "expver": "1", "domain": "g", "date": "20260401", "time": "00"}
    with running_server(document) as server, httpx.Client(base_url=server.url) as client:
        notify_rows(client, dissemination_rows(30, 0.0, seed=4, destination_prefix="m").rows, "m")
        for step in range(12):
            body = {"event_type": "mars", "identifier": {**mars, "stream": "oper", "step": step}}
            response = client.post("/api/v1/notification", content=json.dumps(body))
            assert response.status_code == 200, response.text
        both = {"url": server.url, "event_type": f"{EVENT_TYPE},mars"}
        history = spark.read.format("aviso").options(**both).load()
        assert sorted(
            (row["event_type"], row["sequence"])
            for row in history.select("event_type", "sequence").collect()
        ) == sorted([(EVENT_TYPE, n) for n in range(1, 31)] + [("mars", n) for n in range(1, 13)])
        sizes: list[int] = []

        def batch(frame: object, batch_id: int) -> None:
            sizes.append(frame.count())  # type: ignore[attr-defined]

        query = (
            spark.readStream.format("aviso")
            .options(**both, from_id="1", maxNotificationsPerTrigger=str(LIMIT))
            .load()
            .writeStream.foreachBatch(batch)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(300), "Trigger.AvailableNow did not end"
        ends = json.loads(query.recentProgress[-1].sources[0].endOffset)
    assert sum(sizes) == 42 and max(sizes) <= LIMIT
    assert ends == {EVENT_TYPE: 30, "mars": 12}
