"""``df.write.format("aviso")`` with real Spark, a real server and a real nats-server.

Checked by replay: exactly the valid rows are published, exactly the invalid ones reach the
dead-letter folder with their error codes, and a re-run (or a retried task) adds nothing.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from aviso_spark import deadletter
from aviso_spark.datasource import AvisoDataSource
from aviso_spark.example_data import IDENTIFIER_COLUMNS, ExampleData, dissemination_rows
from tests.spark.checks import EVENT_TYPE, replayed_row_ids
from tests.spark.conftest import AvisoSetup
from tests.support.process import CLI_TIMEOUT


def frame(spark: SparkSession, data: ExampleData, partitions: int = 4) -> DataFrame:
    # Every column as text, as in a CSV landing table; the handlers canonicalise.
    rows = [{key: str(value) for key, value in row.items()} for row in data.rows]
    return spark.createDataFrame(rows).repartition(partitions)


def publish(
    df: DataFrame, aviso: AvisoSetup, deadletter_path: Path, sink: str, **options: str
) -> dict[str, Any]:
    writer = (
        df.write.format("aviso")
        .mode("append")
        .option("event_type", EVENT_TYPE)
        .option("config", str(aviso.config_file))
        .option("identifier_columns", ",".join(IDENTIFIER_COLUMNS))
        .option("payload_columns", "path,size")
        .option("deadletter_path", str(deadletter_path))
        .option("max_rejected_fraction", "0.05")
        .option("sink", sink)
        .option("sink.url", aviso.server.url)
        .option("sink.backoff_ms", "10")
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()
    return json.loads((deadletter_path / deadletter.SUMMARY_FILE).read_text())


def check_batch(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path, count: int, sink: str
) -> None:
    data = dissemination_rows(count, 0.01, seed=count, destination_prefix=aviso.prefix)
    df = frame(spark, data)
    valid = set(range(count)) - data.invalid_ids

    summary = publish(df, aviso, tmp_path / "dead", sink)
    assert summary["published"] == len(valid)
    assert summary["rejected"] == len(data.invalid_ids)
    assert summary["status"] == "succeeded"
    replayed = replayed_row_ids(aviso)
    assert set(replayed) == valid
    assert max(replayed.values()) == 1
    dead = deadletter.read(tmp_path / "dead")
    assert sorted(int(record["row"]["row_id"]) for record in dead) == sorted(data.invalid_ids)
    assert {record["code"] for record in dead} == {"INVALID_NOTIFICATION_REQUEST"}
    assert all(record["message"].startswith("Field '") for record in dead)

    # A re-run (other partitioning, fresh dead-letter folder) publishes nothing new.
    rerun = publish(df.repartition(3), aviso, tmp_path / "dead-rerun", sink)
    assert rerun["published"] == len(valid)
    assert replayed_row_ids(aviso) == replayed


@pytest.mark.parametrize("sink", ["backend", "http"])
def test_a_batch_publishes_exactly_the_valid_rows_once(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path, sink: str
) -> None:
    check_batch(spark, aviso, tmp_path, 2000, sink)


def test_twenty_thousand_rows_with_one_percent_invalid(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    check_batch(spark, aviso, tmp_path, 20_000, "backend")


def test_a_task_failing_mid_partition_is_retried_without_duplicates(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(800, 0.0, seed=7, destination_prefix=aviso.prefix)
    summary = publish(
        frame(spark, data, partitions=2),
        aviso,
        tmp_path / "dead",
        "backend",
        batch_size="50",
        fail_after_rows="100",
    )
    assert summary["published"] == 800
    replayed = replayed_row_ids(aviso)
    assert set(replayed) == set(range(800))
    assert max(replayed.values()) == 1


def test_too_many_rejected_rows_fail_the_job(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(200, 0.1, seed=3, destination_prefix=aviso.prefix)
    with pytest.raises(Exception, match="max_rejected_fraction"):
        publish(frame(spark, data, partitions=2), aviso, tmp_path / "dead", "backend")
    summary = json.loads((tmp_path / "dead" / deadletter.SUMMARY_FILE).read_text())
    assert summary["status"] == "failed"
    assert summary["rejected"] == 20
    assert len(deadletter.read(tmp_path / "dead")) == 20


def test_the_writer_unpickles_without_the_host_or_pyarrow(tmp_path: Path) -> None:
    # Spark runs a job's commit and abort in a fresh Python worker of the driver, which
    # unpickles the writer first: under load, importing the host and pyarrow there kept a
    # failed job waiting for its abort for over ten seconds.
    schema = StructType([StructField(name, StringType()) for name in ("destination", "path")])
    options = {"event_type": EVENT_TYPE, "deadletter_path": str(tmp_path / "dead")}
    writer = AvisoDataSource(options).writer(schema, overwrite=False)
    probe = (
        "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); "
        "print(','.join(name for name in ('aviso_host', 'aviso_builtins', 'pyarrow') "
        "if name in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe],
        input=pickle.dumps(writer),
        capture_output=True,
        timeout=CLI_TIMEOUT,
        check=True,
    )
    assert loaded.stdout.decode().strip() == ""
