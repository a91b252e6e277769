"""End to end: a 3,000-row generated dataset published over HTTP twice against
the default configuration (the shipped one: in-memory backend, Idempotency-Key honoured
for two minutes) is stored once, minus the dead-lettered rows, and a 4-partition read
gives it back identically."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import yaml
from pyspark.sql import SparkSession

from aviso_spark import deadletter
from aviso_spark.example_data import IDENTIFIER_COLUMNS, dissemination_rows
from aviso_spark.replay import ReplayRequest, latest_sequence
from tests.spark.checks import EVENT_TYPE
from tests.spark.conftest import ROOT
from tests.support.server import running_server

SHIPPED = ROOT / "configuration" / "config.yaml"
ROWS = 3000
DESTINATION = "acceptance"


def test_published_twice_stored_once_and_read_back_through_four_partitions(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = dissemination_rows(ROWS, 0.02, seed=15, destination_prefix=DESTINATION)
    for row in data.rows:
        row["destination"] = DESTINATION
    valid = set(range(ROWS)) - data.invalid_ids
    frame = spark.createDataFrame([{k: str(v) for k, v in row.items()} for row in data.rows])

    with running_server(yaml.safe_load(SHIPPED.read_text())) as server:

        def publish(dead: Path, partitions: int) -> dict[str, int]:
            frame.repartition(partitions).write.format("aviso").mode("append").options(
                event_type=EVENT_TYPE,
                config=str(SHIPPED),
                identifier_columns=",".join(IDENTIFIER_COLUMNS),
                payload_columns="path,size",
                deadletter_path=str(dead),
                max_rejected_fraction="0.05",
                sink="http",
                **{"sink.url": server.url},
            ).save()
            return deadletter.summary(dead)

        filters = {"destination": DESTINATION, "class": "od"}
        first = publish(tmp_path / "first", 4)
        stored = latest_sequence(ReplayRequest(server.url, EVENT_TYPE, filters))
        second = publish(tmp_path / "second", 3)  # other partitioning: other task borders

        assert latest_sequence(ReplayRequest(server.url, EVENT_TYPE, filters)) == stored
        reader = spark.read.format("aviso").options(
            url=server.url,
            event_type=EVENT_TYPE,
            **{f"identifier.{key}": value for key, value in filters.items()},
        )
        four = [row.asDict() for row in reader.option("numPartitions", "4").load().collect()]
        one = [row.asDict() for row in reader.option("numPartitions", "1").load().collect()]

    for summary in (first, second):
        assert (summary["published"], summary["rejected"]) == (len(valid), len(data.invalid_ids))
    dead = deadletter.read(tmp_path / "first")
    assert sorted(int(record["row"]["row_id"]) for record in dead) == sorted(data.invalid_ids)
    assert stored == len(valid)  # per-stream sequences from 1: nothing stored twice
    assert four == one
    read_ids = Counter(int(Path(json.loads(row["payload"])["path"]).stem) for row in four)
    assert read_ids == Counter(valid)  # each valid row once, every one
