"""``spark.readStream.format("aviso")`` into a parquet sink: offsets are sequences kept in the
checkpoint, a restarted query resumes exactly where it stopped while notifications keep
being published, and history lost to retention fails the query unless accepted."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from aviso_spark.example_data import dissemination_rows
from aviso_spark.replay import ReplayRequest, latest_sequence
from tests.spark.checks import EVENT_TYPE, WAIT_SECONDS, notify_body, replayed_row_ids
from tests.spark.conftest import AvisoSetup, dissemination_document
from tests.support.server import RunningServer, running_server

ROWS = 300
PAUSE_AT = 150
"""The publisher waits here until the restarted query runs: publishing spans the restart."""


def start_query(
    spark: SparkSession, url: str, destination: str, out: Path, **options: str
) -> StreamingQuery:
    return (
        spark.readStream.format("aviso")
        .option("url", url)
        .option("event_type", EVENT_TYPE)
        .option("identifier.destination", destination)
        .option("identifier.class", "od")
        .option("numPartitions", "2")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .start()
    )


def stored_sequences(spark: SparkSession, out: Path) -> list[int]:
    return sorted(row["sequence"] for row in spark.read.parquet(str(out / "data")).collect())


def row_ids(spark: SparkSession, out: Path) -> list[int]:
    frame = spark.read.parquet(str(out / "data"))
    return sorted(int(Path(json.loads(row["payload"])["path"]).stem) for row in frame.collect())


class Publisher:
    """Publishes rows over HTTP in a thread; pauses at ``PAUSE_AT`` until resumed."""

    def __init__(self, url: str, rows: list[dict[str, Any]], destination: str) -> None:
        self.url = url
        self.rows = rows
        self.destination = destination
        self.halfway = threading.Event()
        self.resume = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="publisher", daemon=True)

    def _run(self) -> None:
        try:
            with httpx.Client(base_url=self.url) as client:
                for index, row in enumerate(self.rows):
                    if index == PAUSE_AT:
                        self.halfway.set()
                        assert self.resume.wait(WAIT_SECONDS), "never resumed"
                    body = notify_body(row, self.destination)
                    response = client.post("/api/v1/notification", content=json.dumps(body))
                    assert response.status_code == 200, response.text
        except BaseException as exc:  # reported by finish()
            self.error = exc
            self.halfway.set()

    def finish(self) -> None:
        self.resume.set()
        self.thread.join(WAIT_SECONDS)
        assert not self.thread.is_alive() and self.error is None, self.error


def test_a_restarted_query_resumes_exactly_where_it_stopped(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    url = aviso.server.url
    destination = aviso.prefix
    # The shared JetStream stream has other tests' notifications: start after them.
    start = latest_sequence(
        ReplayRequest(url, EVENT_TYPE, {"destination": destination, "class": "od"})
    )
    rows = dissemination_rows(ROWS, 0.0, seed=41, destination_prefix=destination).rows
    publisher = Publisher(url, rows, destination)
    publisher.thread.start()
    try:
        first = start_query(spark, url, destination, tmp_path, from_id=str(start + 1))
        try:
            assert publisher.halfway.wait(WAIT_SECONDS)
            first.processAllAvailable()  # everything stored so far is in the sink
        finally:
            first.stop()
        assert first.exception() is None
        before_restart = stored_sequences(spark, tmp_path)
        assert len(before_restart) >= PAUSE_AT

        # Restarted on the same checkpoint (the start option is ignored now) while the
        # second half is being published.
        second = start_query(spark, url, destination, tmp_path, from_id=str(start + 1))
        try:
            publisher.finish()
            second.processAllAvailable()
        finally:
            second.stop()
        assert second.exception() is None
    finally:
        publisher.finish()

    assert row_ids(spark, tmp_path) == list(range(ROWS))  # each once, none missing
    sink = stored_sequences(spark, tmp_path)
    assert sink[: len(before_restart)] == before_restart
    assert len(set(sink)) == ROWS
    assert set(replayed_row_ids(aviso, [destination])) == set(range(ROWS))


@pytest.fixture
def short_history(tmp_path: Path) -> Iterator[RunningServer]:
    """The in-memory backend keeping one notification per topic (its default)."""
    document = dissemination_document("nats://unused")
    document["notification_backend"] = {"kind": "in_memory"}
    with running_server(document) as server:
        yield server


def test_history_lost_to_retention_fails_the_query_unless_accepted(
    spark: SparkSession, short_history: RunningServer, tmp_path: Path
) -> None:
    url = short_history.url
    destination = "gap"
    one, two = dissemination_rows(2, 0.0, seed=42, destination_prefix=destination).rows

    def publish(row: dict[str, Any]) -> None:
        response = httpx.post(f"{url}/api/v1/notification", json=notify_body(row, destination))
        assert response.status_code == 200, response.text

    publish(one)
    query = start_query(spark, url, destination, tmp_path, from_id="1")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert row_ids(spark, tmp_path) == [0]

    # Two more on one topic: the first of them is pruned before the query reads it.
    publish(two)
    publish(two)
    failing = start_query(spark, url, destination, tmp_path)
    with pytest.raises(Exception, match="history gap in 'dissemination'"):
        failing.awaitTermination(WAIT_SECONDS)
    assert "accept_history_gap=true" in str(failing.exception())
    assert row_ids(spark, tmp_path) == [0]  # the failed batch wrote nothing

    accepting = start_query(spark, url, destination, tmp_path, accept_history_gap="true")
    try:
        accepting.processAllAvailable()
    finally:
        accepting.stop()
    assert accepting.exception() is None
    assert row_ids(spark, tmp_path) == [0, 1]
    assert stored_sequences(spark, tmp_path) == [1, 3]
