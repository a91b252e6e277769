"""``spark.read.format("aviso")``: history through the replay API of a real server."""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pyspark.sql import SparkSession

from aviso_spark.example_data import IDENTIFIER_COLUMNS, dissemination_rows
from aviso_spark.reader import identifier_column
from tests.spark.checks import EVENT_TYPE, notify_rows
from tests.spark.conftest import dissemination_document
from tests.support.nats import NatsServer
from tests.support.server import RunningServer, running_server

REPLAY_LIMIT = 7  # smaller than the history: the reader must page past the server's cap
# Unique per run: the nats-server and its streams are shared by the test session.
PREFIX = f"r{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def server(nats_session: NatsServer) -> Iterator[RunningServer]:
    """20 notifications on <PREFIX>0 and <PREFIX>1 each, replayed at most 7 at a time."""
    document = dissemination_document(nats_session.url)
    document["watch_endpoint"]["max_historical_notifications"] = REPLAY_LIMIT
    with running_server(document) as running, httpx.Client(base_url=running.url) as client:
        rows = dissemination_rows(40, 0.0, seed=5, destination_prefix=PREFIX).rows
        notify_rows(
            client, [{**row, "destination": f"{PREFIX}{row['row_id'] % 2}"} for row in rows]
        )
        yield running


def read(spark: SparkSession, server: RunningServer, **options: str) -> list[dict[str, Any]]:
    reader = (
        spark.read.format("aviso")
        .option("url", server.url)
        .option("event_type", EVENT_TYPE)
        .option("identifier.destination", f"{PREFIX}0")
        .option("identifier.class", "od")
    )
    return [row.asDict() for row in reader.options(**options).load().collect()]


def test_history_comes_back_as_a_dataframe(spark: SparkSession, server: RunningServer) -> None:
    frame = spark.read.format("aviso").options(url=server.url, event_type=EVENT_TYPE, from_id="1")
    frame = frame.option("identifier.destination", f"{PREFIX}0").option("identifier.class", "od")
    df = frame.load()
    columns = [identifier_column(name) for name in sorted(IDENTIFIER_COLUMNS)]
    assert df.columns == ["sequence", "time", "event_type", *columns, "payload"]
    types = dict(df.dtypes)
    assert (types["sequence"], types["time"], types["event_type"]) == (
        "bigint",
        "timestamp",
        "string",
    )
    # Typed by the schema's field handlers: IntHandler, DateHandler, the rest text.
    assert (types["step"], types["date"], types["destination"]) == ("bigint", "date", "string")

    rows = [row.asDict() for row in df.collect()]
    assert len(rows) == 20  # all of them, though the server replays 7 at a time
    sequences = [row["sequence"] for row in rows]
    assert sequences == sorted(sequences) and len(set(sequences)) == 20
    assert {row["destination"] for row in rows} == {f"{PREFIX}0"}
    first = rows[0]
    assert first["date"] == datetime.date(2026, 4, 1) and first["step"] == 0
    assert first["class"] == "od" and first["event_type"] == EVENT_TYPE
    assert json.loads(first["payload"])["path"] == "/dissemination/oper/20260401/00/0.grib"


def test_from_id_and_from_date_choose_where_history_starts(
    spark: SparkSession, server: RunningServer
) -> None:
    everything = read(spark, server)
    assert len(everything) == 20  # neither option: the whole history
    tenth = everything[9]["sequence"]
    assert [row["sequence"] for row in read(spark, server, from_id=str(tenth))] == [
        row["sequence"] for row in everything[9:]
    ]
    assert len(read(spark, server, from_date="2000-01-01T00:00:00Z")) == 20


def test_from_date_after_the_newest_notification_reads_nothing(
    spark: SparkSession, server: RunningServer
) -> None:
    assert read(spark, server, from_date="2999-01-01T00:00:00Z") == []


def test_a_refused_replay_fails_the_read_with_the_server_error(
    spark: SparkSession, server: RunningServer
) -> None:
    bad = spark.read.format("aviso").options(url=server.url, event_type=EVENT_TYPE)
    with pytest.raises(Exception, match="INVALID_REPLAY_REQUEST"):
        bad.option("identifier.step", "six").load().collect()  # an IntHandler field
    with pytest.raises(Exception, match="needs the option 'url'"):
        spark.read.format("aviso").option("event_type", EVENT_TYPE).load()
