"""``.where()`` on ``spark.read.format("aviso")`` reaches the server: the replay sends only the
matching notifications (counted by the server's ``aviso_sse_events_sent_total``), and the
result is what Spark's own filter over the whole history gives."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col

from aviso_spark import PUSHDOWN_CONF
from aviso_spark.example_data import dissemination_rows
from tests.conformance.metrics_support import Metered, metered
from tests.spark.checks import EVENT_TYPE, notify_rows
from tests.spark.conftest import dissemination_document

ROWS = 60
SENT = "aviso_sse_events_sent_total"


@pytest.fixture(scope="module")
def server() -> Iterator[Metered]:
    """``ROWS`` notifications in memory: destinations d0..d4, steps 0..59, dates April 1-28."""
    document = dissemination_document("nats://127.0.0.1:1")
    document["notification_backend"] = {"kind": "in_memory"}
    with metered(document) as running, httpx.Client(base_url=running.url) as client:
        notify_rows(client, dissemination_rows(ROWS, 0.0, seed=3, destination_prefix="d").rows)
        yield running


def history(spark: SparkSession, server: Metered, **options: str) -> DataFrame:
    return (
        spark.read.format("aviso").options(url=server.url, event_type=EVENT_TYPE, **options).load()
    )


def sent(server: Metered) -> float:
    return server.scrape().value(SENT, route="/api/v1/replay", event_type=EVENT_TYPE) or 0.0


def sequences(frame: DataFrame) -> list[int]:
    return sorted(row["sequence"] for row in frame.select("sequence").collect())


def served(server: Metered, read: Callable[[], list[int]]) -> tuple[list[int], float]:
    """What ``read`` returns and how many notifications the server sent meanwhile."""
    before = sent(server)
    result = read()
    return result, sent(server) - before


def test_register_turns_on_python_filter_pushdown(spark: SparkSession) -> None:
    assert spark.conf.get(PUSHDOWN_CONF) == "true"


def test_no_identifier_option_reads_every_notification(
    spark: SparkSession, server: Metered
) -> None:
    # destination and class are required by the schema: no '=*' needed for them.
    assert sequences(history(spark, server)) == list(range(1, ROWS + 1))


CONDITIONS: dict[str, Callable[[], Any]] = {
    "equality": lambda: col("destination") == "d3",
    "in on text": lambda: col("destination").isin("d1", "d4"),
    "integer range": lambda: (col("step") >= 10) & (col("step") < 25),
    "integer in": lambda: col("step").isin(3, 7, 58, 900),
    "date range": lambda: col("date").between(datetime.date(2026, 4, 3), datetime.date(2026, 4, 6)),
    "sequence bounds": lambda: (col("sequence") > 20) & (col("sequence") <= 31),
    "combined": lambda: (col("destination") == "d2") & (col("step") > 30),
    "out of range": lambda: col("step") > 100_000,
}


@pytest.mark.parametrize("name", sorted(CONDITIONS))
def test_a_filter_reads_only_the_matching_notifications(
    spark: SparkSession, server: Metered, name: str
) -> None:
    condition = CONDITIONS[name]()
    frame = history(spark, server)
    # Spark's own filter over rows it holds: what the pushed read must return.
    expected = sequences(spark.createDataFrame(frame.collect(), frame.schema).where(condition))
    result, count = served(server, lambda: sequences(history(spark, server).where(condition)))
    assert result == expected
    assert count == len(expected), f"the server sent {count} for {len(expected)} rows"


def test_a_filter_spark_cannot_push_is_still_applied(spark: SparkSession, server: Metered) -> None:
    condition = col("destination").startswith("d1") | (col("step") == 2)
    frame = history(spark, server)
    expected = sorted(
        r["sequence"] for r in frame.collect() if r["destination"] == "d1" or r["step"] == 2
    )
    assert sequences(frame.where(condition)) == expected


def test_a_time_bound_reads_from_there(spark: SparkSession, server: Metered) -> None:
    rows = history(spark, server).orderBy("sequence").collect()
    middle = rows[ROWS // 2]["time"]
    expected = [row["sequence"] for row in rows if row["time"] >= middle]
    result, count = served(
        server, lambda: sequences(history(spark, server).where(col("time") >= middle))
    )
    assert result == expected
    # A time start is found by a replay from it, closed at its first notification: the
    # server may have sent one page (here every match) before the close.
    assert count <= 2 * len(expected)


def test_a_prefix_wildcard_option_is_an_error_naming_it(
    spark: SparkSession, server: Metered
) -> None:
    with pytest.raises(Exception, match=r"identifier\.destination' = 'd-\*'"):
        history(spark, server, **{"identifier.destination": "d-*"}).collect()


def test_a_constraint_option_and_the_same_where_read_the_same(
    spark: SparkSession, server: Metered
) -> None:
    option = sequences(history(spark, server, **{"identifier.step": '{"between": [5, 9]}'}))
    where = sequences(history(spark, server).where(col("step").between(5, 9)))
    assert option == where and len(option) == 5


def test_the_payload_parses_with_a_given_schema(spark: SparkSession, server: Metered) -> None:
    frame = history(spark, server, payload_schema="path STRING, size BIGINT, missing INT")
    assert dict(frame.dtypes)["payload"] == "struct<path:string,size:bigint,missing:int>"
    first = frame.where(col("sequence") == 1).collect()[0]["payload"]
    assert first["path"].endswith("/0.grib") and first["size"] > 0 and first["missing"] is None


def test_typed_columns_can_be_turned_off(spark: SparkSession, server: Metered) -> None:
    frame = history(spark, server, typed_columns="false")
    assert {dict(frame.dtypes)[name] for name in ("step", "date", "destination")} == {"string"}
