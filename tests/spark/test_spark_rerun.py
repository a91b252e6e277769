"""Re-runs, job counts and nulls with real Spark (``local[2,2]``), a real server and a real
nats-server whose duplicate window is one second: whatever the window, a re-run stores
nothing twice while the notifications are retained, and every summary counts each row once
as ``stored``, ``already_stored`` or ``rejected``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pyspark.sql import DataFrame, SparkSession

from aviso_spark import deadletter, jobreport
from aviso_spark.example_data import IDENTIFIER_COLUMNS, PAYLOAD_COLUMNS, dissemination_rows
from tests.spark.checks import EVENT_TYPE, replayed_row_ids
from tests.spark.conftest import AvisoSetup, dissemination_document
from tests.support.nats import nats_server
from tests.support.sse import DEFAULT_TIMEOUT, Stream

PAST_THE_WINDOW = 2.5
"""Seconds a re-run waits: the ``aviso_short`` store's 1 s window has passed by then (a
lower bound; a loaded machine only makes it longer)."""
JOB_SECONDS = 300.0
"""A bound on a write job's start (Spark's Python workers) and on its end once the store is
down, for a loaded machine; not an expectation of speed."""
COLUMNS = ("row_id", *IDENTIFIER_COLUMNS, *PAYLOAD_COLUMNS)
SCHEMA = ", ".join(f"`{column}` string" for column in COLUMNS)


def text_frame(spark: SparkSession, rows: list[dict[str, Any]], partitions: int) -> DataFrame:
    texts = [
        {column: None if row.get(column) is None else str(row[column]) for column in COLUMNS}
        for row in rows
    ]
    return spark.createDataFrame(texts, SCHEMA).repartition(partitions)


def publish(
    df: DataFrame, aviso: AvisoSetup, dead: Path, sink: str, **options: str
) -> dict[str, Any]:
    writer = df.write.format("aviso").mode("append")
    writer = writer.options(
        event_type=EVENT_TYPE,
        config=str(aviso.config_file),
        identifier_columns=",".join(IDENTIFIER_COLUMNS),
        payload_columns=",".join(PAYLOAD_COLUMNS),
        deadletter_path=str(dead),
        sink=sink,
        **{"sink.url": aviso.server.url, "sink.backoff_ms": "10"},
        **options,
    )
    writer.save()
    return summary_of(dead)


def summary_of(dead: Path) -> dict[str, Any]:
    return json.loads((dead / deadletter.SUMMARY_FILE).read_text())


def counts(summary: dict[str, Any]) -> dict[str, int]:
    return {key: summary[key] for key in ("stored", "already_stored", "rejected", "rows")}


@pytest.mark.parametrize("sink", ["backend", "http"])
def test_a_re_run_past_the_duplicate_window_stores_nothing_twice(
    spark: SparkSession, aviso_short: AvisoSetup, tmp_path: Path, sink: str
) -> None:
    data = dissemination_rows(500, 0.0, seed=5, destination_prefix=aviso_short.prefix)
    old, new = data.rows[:400], data.rows[400:]
    first = publish(text_frame(spark, old, 3), aviso_short, tmp_path / "first", sink)
    assert counts(first) == {"stored": 400, "already_stored": 0, "rejected": 0, "rows": 400}
    assert first["status"] == "succeeded"

    time.sleep(PAST_THE_WINDOW)
    # The same rows (other partitioning) and 100 new ones.
    rerun = publish(text_frame(spark, old + new, 2), aviso_short, tmp_path / "rerun", sink)
    assert counts(rerun) == {"stored": 100, "already_stored": 400, "rejected": 0, "rows": 500}
    assert rerun["published"] == 500
    replayed = replayed_row_ids(aviso_short)
    assert set(replayed) == set(range(500))
    assert max(replayed.values()) == 1


def test_a_retried_task_counts_each_row_once(
    spark: SparkSession, aviso_short: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(400, 0.0, seed=9, destination_prefix=aviso_short.prefix)
    summary = publish(
        text_frame(spark, data.rows, 2),
        aviso_short,
        tmp_path / "dead",
        "backend",
        batch_size="50",
        fail_after_rows="100",
    )
    # The failed attempt stored 100 rows; its retry found them stored: the job stored each
    # row once and had nothing from an earlier run.
    assert counts(summary) == {"stored": 400, "already_stored": 0, "rejected": 0, "rows": 400}
    assert max(replayed_row_ids(aviso_short).values()) == 1


def test_an_aborted_job_reports_its_counts_up_to_the_failure(
    spark: SparkSession, aviso_short: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(300, 0.0, seed=11, destination_prefix=aviso_short.prefix)
    # One partition, both attempts failing (local[2,2] allows two): Spark aborts the job.
    with pytest.raises(Exception, match="injected failure"):
        publish(
            text_frame(spark, data.rows, 1),
            aviso_short,
            tmp_path / "dead",
            "backend",
            batch_size="50",
            fail_after_rows="100",
            fail_attempts="2",
        )
    summary = summary_of(tmp_path / "dead")
    assert summary["status"] == "aborted"
    stored = replayed_row_ids(aviso_short)
    assert max(stored.values()) == 1
    assert summary["stored"] == len(stored) == 100
    assert summary["already_stored"] == 0


def replayed_identifiers(aviso: AvisoSetup, destination: str) -> dict[str, dict[str, Any]]:
    """Each stored notification's identifier by its payload path, for one destination."""
    found = {}
    body = {
        "event_type": EVENT_TYPE,
        "identifier": {"destination": destination, "class": "od"},
        "from_id": "1",
    }
    with (
        httpx.Client(base_url=aviso.server.url, timeout=DEFAULT_TIMEOUT) as client,
        client.stream("POST", "/api/v1/replay", content=json.dumps(body)) as response,
    ):
        assert response.status_code == 200, response.read()
        for event in Stream(response).events():
            if event.kind == "connection-closing":
                break
            if event.name == "replay":
                found[event.data["data"]["payload"]["path"]] = event.data["data"]["identifier"]
    return found


@pytest.mark.parametrize("sink", ["backend", "http"])
def test_a_null_takes_the_schema_default_or_fill_null_else_the_row_is_rejected(
    spark: SparkSession, aviso_short: AvisoSetup, tmp_path: Path, sink: str
) -> None:
    data = dissemination_rows(3, 0.0, seed=13, destination_prefix=aviso_short.prefix)
    rows = [dict(row, destination=aviso_short.prefix) for row in data.rows]
    rows[0]["expver"] = None  # the schema's default: 0001
    rows[1]["stream"] = None  # fill_null.stream
    rows[2]["target"] = None  # neither: rejected
    summary = publish(
        text_frame(spark, rows, 2),
        aviso_short,
        tmp_path / "dead",
        sink,
        max_rejected_fraction="0.5",
        **{"fill_null.stream": "wave"},
    )
    assert counts(summary) == {"stored": 2, "already_stored": 0, "rejected": 1, "rows": 3}
    [rejected] = deadletter.read(tmp_path / "dead")
    assert rejected["row"]["row_id"] == "2"
    assert rejected["code"] == "INVALID_NOTIFICATION_REQUEST"
    assert rejected["message"].startswith("Field 'target' cannot be null (column 'target')")
    assert "fill_null.target" in rejected["message"]
    stored = replayed_identifiers(aviso_short, aviso_short.prefix)
    assert stored[rows[0]["path"]]["expver"] == "0001"
    assert stored[rows[1]["path"]]["stream"] == "wave"
    assert len(stored) == 2


def test_a_store_going_down_mid_job_fails_it_with_the_counts_so_far(
    spark: SparkSession, tmp_path: Path
) -> None:
    dead = tmp_path / "dead"
    # Far more rows than are published before the store is stopped: the job is under way.
    frame = spark.range(0, 1_000_000, numPartitions=2).selectExpr(
        "'down' AS destination",
        "'t' AS target",
        "'od' AS class",
        "'1' AS expver",
        "'g' AS domain",
        "'20260101' AS date",
        "'00' AS time",
        "'oper' AS stream",
        "CAST(id % 100000 AS STRING) AS step",
        "concat('/down/', id, '.grib') AS path",
    )
    stored_at_stop: list[int] = []
    with nats_server(tmp_path / "nats") as store:
        config = tmp_path / "aviso.yaml"
        config.write_text(yaml.safe_dump(dissemination_document(store.url)))
        writer = frame.write.format("aviso").mode("append")
        writer = writer.options(
            event_type=EVENT_TYPE,
            config=str(config),
            identifier_columns=",".join(IDENTIFIER_COLUMNS),
            payload_columns="path",
            deadletter_path=str(dead),
            sink="backend",
            batch_size="100",
        )

        def stop_once_under_way() -> None:
            deadline = time.monotonic() + JOB_SECONDS
            while stored_so_far(dead) == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            stored_at_stop.append(stored_so_far(dead))
            store.stop()

        stopper = threading.Thread(target=stop_once_under_way, name="store-stopper")
        stopper.start()
        try:
            with pytest.raises(Exception, match="SinkUnavailable"):
                writer.save()
        finally:
            stopper.join(JOB_SECONDS)
    assert stored_at_stop[0] > 0
    summary = summary_of(dead)
    assert summary["status"] == "aborted"
    assert summary["stored"] >= stored_at_stop[0]


def stored_so_far(dead: Path) -> int:
    """Rows stored so far, from the task attempts' progress files."""
    return jobreport.job_counts(dead).stored if dead.exists() else 0
