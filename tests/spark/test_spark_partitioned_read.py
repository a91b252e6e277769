"""``spark.read.format("aviso")`` split into sequence ranges: the same rows as one replay,
on both backends, bounded by ids or dates, and while notifications keep arriving."""

from __future__ import annotations

import datetime
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pyspark.sql import SparkSession

from aviso_spark.example_data import dissemination_rows
from tests.spark.checks import EVENT_TYPE, WAIT_SECONDS, notify_rows
from tests.spark.conftest import dissemination_document
from tests.support.server import RunningServer, running_server
from tests.support.sse import DEFAULT_TIMEOUT, Stream

REPLAY_LIMIT = 7  # a range holds more than this: each partition pages past the server's cap
ROWS = 60  # 30 on the destination read, more than the partitions times the cap


def backend_document(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "jetstream":
        document = dissemination_document(request.getfixturevalue("nats_session").url)
    else:
        document = dissemination_document("nats://unused")
        document["notification_backend"] = {
            "kind": "in_memory",
            "in_memory": {"max_history_per_topic": 100},
        }
    document["watch_endpoint"]["max_historical_notifications"] = REPLAY_LIMIT
    return document


class History:
    """A server holding ``ROWS`` notifications alternating between two destinations."""

    def __init__(self, server: RunningServer, prefix: str) -> None:
        self.server = server
        self.prefix = prefix
        self.destination = f"{prefix}0"

    def publish(self, rows: list[dict[str, Any]], client: httpx.Client) -> None:
        alternating = [{**row, "destination": f"{self.prefix}{row['row_id'] % 2}"} for row in rows]
        notify_rows(client, alternating)

    def replayed(self, **bounds: str) -> list[dict[str, Any]]:
        """The CloudEvents of one plain replay of the destination (paged), for comparison."""
        body = {
            "event_type": EVENT_TYPE,
            "identifier": {"destination": self.destination, "class": "od"},
            **(bounds or {"from_id": "1"}),
        }
        seen: list[dict[str, Any]] = []
        with httpx.Client(base_url=self.server.url, timeout=DEFAULT_TIMEOUT) as client:
            while True:
                limited = False
                with client.stream("POST", "/api/v1/replay", json=body) as response:
                    assert response.status_code == 200, response.read()
                    for event in Stream(response).events():
                        if event.name == "replay":
                            seen.append(event.data)
                        elif event.kind == "replay-control/notification_replay_limit_reached":
                            limited = True
                        elif event.kind == "replay-control/replay_started" and body.get("to_date"):
                            body = {**body, "to_id": str(event.data["end_sequence"])}
                            del body["to_date"]
                        if event.name == "connection-closing":
                            break
                if not limited:
                    return seen
                body = {**body, "from_id": str(seen[-1]["sequence"] + 1)}
                body.pop("from_date", None)


@pytest.fixture(scope="module", params=["in_memory", "jetstream"])
def history(request: pytest.FixtureRequest) -> Iterator[History]:
    document = backend_document(request.param, request)
    prefix = f"p{uuid.uuid4().hex[:8]}"
    with running_server(document) as server, httpx.Client(base_url=server.url) as client:
        stored = History(server, prefix)
        stored.publish(
            dissemination_rows(ROWS, 0.0, seed=9, destination_prefix=prefix).rows, client
        )
        yield stored


def read(spark: SparkSession, history: History, **options: str) -> list[dict[str, Any]]:
    frame = (
        spark.read.format("aviso")
        .option("url", history.server.url)
        .option("event_type", EVENT_TYPE)
        .option("identifier.destination", history.destination)
        .option("identifier.class", "od")
        .options(**options)
        .load()
    )
    return [row.asDict() for row in frame.collect()]


def sequences(rows: list[dict[str, Any]]) -> list[int]:
    return [row["sequence"] for row in rows]


def test_four_partitions_read_exactly_the_rows_of_one(
    spark: SparkSession, history: History
) -> None:
    one = read(spark, history, numPartitions="1")
    four = read(spark, history, numPartitions="4")
    assert len(one) >= ROWS // 2  # (the last test adds more)
    assert four == one  # same rows, same order (partitions are adjacent ranges)
    assert sequences(one) == [event["sequence"] for event in history.replayed()]
    # More partitions than notifications: empty ranges read nothing, nothing is repeated.
    assert read(spark, history, numPartitions="40") == one


def test_id_bounds_split_at_every_border_without_loss(
    spark: SparkSession, history: History
) -> None:
    everything = sequences(read(spark, history, numPartitions="1"))
    first, last = everything[3], everything[-4]
    bounded = {"from_id": str(first), "to_id": str(last)}
    expected = [event["sequence"] for event in history.replayed(**bounded)]
    assert expected == everything[3:-3]
    for partitions in ("1", "3", "4", "7"):
        assert sequences(read(spark, history, numPartitions=partitions, **bounded)) == expected


def test_date_bounds(spark: SparkSession, history: History) -> None:
    rows = read(spark, history, numPartitions="1")
    # Storage times are not the rows' time column, but close: pick dates between rows.
    stored = history.replayed()
    times = [datetime.datetime.fromisoformat(event["time"]) for event in stored]
    start = times[4] - datetime.timedelta(microseconds=1)
    end = times[-5]
    bounds = {
        "from_date": start.isoformat().replace("+00:00", "Z"),
        "to_date": end.isoformat().replace("+00:00", "Z"),
    }
    expected = [event["sequence"] for event in history.replayed(**bounds)]
    assert expected and expected[0] >= stored[4]["sequence"]
    assert sequences(read(spark, history, numPartitions="4", **bounds)) == expected
    assert len(sequences(rows)) > len(expected)
    assert read(spark, history, numPartitions="4", to_date="2000-01-01T00:00:00Z") == []


def test_notifications_arriving_during_the_read_are_not_read_and_nothing_is_lost(
    spark: SparkSession, history: History
) -> None:
    extra = dissemination_rows(400, 0.0, seed=10, destination_prefix=history.prefix).rows
    for row in extra:
        row["row_id"] = 0  # every one to the destination being read
        # A topic of its own: the stream keeps one notification per topic (the default
        # without allow_duplicates), so an extra row with a stored row's topic would replace
        # it, and a publisher faster than the read would remove stored rows being compared.
        row["step"] += ROWS
    stop = threading.Event()
    published = threading.Event()

    def publish() -> None:
        with httpx.Client(base_url=history.server.url) as client:
            for row in extra:
                if stop.is_set():
                    return
                history.publish([row], client)
                published.set()

    writer = threading.Thread(target=publish, name="publisher", daemon=True)
    writer.start()
    try:
        assert published.wait(WAIT_SECONDS)
        rows = read(spark, history, numPartitions="4")
    finally:
        stop.set()
        writer.join(WAIT_SECONDS)
    read_through = sequences(rows)[-1]
    # Exactly the stored notifications up to the last one read: no duplicate, no loss.
    stored = [event["sequence"] for event in history.replayed(to_id=str(read_through), from_id="1")]
    assert sequences(rows) == stored
