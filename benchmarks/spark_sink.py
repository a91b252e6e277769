"""Spark ``backend`` sink into JetStream against raw nats-py publish-with-ack, in one run.

  python -m benchmarks.spark_sink [--rows 1000000] [--partitions 2] [--batch-size 500]

Starts its own nats-server (file storage) on a free loopback port and measures:

(a) raw: nats-py ``js.publish`` with ack of ``--rows`` messages equivalent to the sink's
    (same subjects, canonical payload bodies and headers: identifier and ``Nats-Msg-Id``,
    built by the host's planner before the clock starts) into a stream configured like
    aviso's. Same concurrency style as the sink: one process and one connection per Spark
    partition, batches of ``--batch-size`` messages, at most ``--concurrency`` publishes in
    flight per batch (``aviso_builtins.sinks.common.publish_all``, which the sink uses).
(b) sink: ``df.write.format("aviso")`` with ``sink=backend`` in Spark ``local[N]`` over a
    generated dissemination-style DataFrame (``spark.range`` expressions, every row valid
    and distinct), from ``save()`` to its return: row transfer to the Python workers,
    validation on the executors, message ids and JetStream publishes.

Prints progress lines (stored count of the stream being filled), rows/s of both, the ratio
sink / raw (goal >= 0.3) and, last, the figures as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import nats
import yaml
from nats.js.errors import NotFoundError

from aviso_builtins.backends.jetstream.options import parse_options
from aviso_builtins.backends.jetstream.streams import desired_config
from aviso_builtins.sinks.common import publish_all
from aviso_plugins.types import MESSAGE_ID_METADATA, SinkOutcome
from tests.support.nats import nats_server

ROOT = Path(__file__).resolve().parents[1]
EVENT_TYPE = "dissemination"
SINK_STREAM = "DISS"
RAW_BASE = "rawbench"
PROGRESS_SECONDS = 5.0
IDENTIFIER_COLUMNS = "destination,target,class,expver,domain,date,time,stream,step"
PAYLOAD_COLUMNS = ("path", "size")
FIRST_DATE = datetime.date(2026, 1, 1)
RawMessage = tuple[str, bytes, dict[str, str]]
"""Subject, body and headers."""
# Every row valid and distinct: (date, step) is unique.
ROW_EXPRESSIONS = (
    "concat('ecpds', id % 5) AS destination",
    "concat('t', id % 3) AS target",
    "'od' AS class",
    "'1' AS expver",
    "'g' AS domain",
    "date_format(date_add(DATE'2026-01-01', CAST(id DIV 100000 AS INT)), 'yyyy-MM-dd') AS date",
    "lpad(CAST((id % 4) * 6 AS STRING), 2, '0') AS time",
    "element_at(array('oper', 'enfo', 'wave'), CAST(id % 3 AS INT) + 1) AS stream",
    "CAST(id % 100000 AS INT) AS step",
    "concat('/dissemination/', id, '.grib') AS path",
    "1000000 + id AS size",
)


def config_document(nats_url: str) -> dict[str, Any]:
    """The shipped dissemination schema on JetStream (file storage, NATS defaults)."""
    shipped = yaml.safe_load((ROOT / "configuration" / "config.yaml").read_text())
    return {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": {"kind": "jetstream", "jetstream": {"nats_url": nats_url}},
        "notification_schema": {EVENT_TYPE: shipped["notification_schema"][EVENT_TYPE]},
    }


def row_values(row_id: int) -> dict[str, Any]:
    """The columns of generated row ``row_id``, as ``ROW_EXPRESSIONS`` make them."""
    return {
        "destination": f"ecpds{row_id % 5}",
        "target": f"t{row_id % 3}",
        "class": "od",
        "expver": "1",
        "domain": "g",
        "date": (FIRST_DATE + datetime.timedelta(days=row_id // 100000)).isoformat(),
        "time": f"{(row_id % 4) * 6:02d}",
        "stream": ("oper", "enfo", "wave")[row_id % 3],
        "step": row_id % 100000,
        "path": f"/dissemination/{row_id}.grib",
        "size": 1000000 + row_id,
    }


# -- progress ----------------------------------------------------------------------------


@contextmanager
def progress(nats_url: str, stream: str, label: str, total: int) -> Iterator[None]:
    """A thread printing how many messages ``stream`` holds every few seconds."""
    stop = threading.Event()

    async def report() -> None:
        connection = await nats.connect(nats_url, allow_reconnect=False)
        js = connection.jetstream()
        start = time.perf_counter()
        try:
            while not await asyncio.to_thread(stop.wait, PROGRESS_SECONDS):
                try:
                    stored = (await js.stream_info(stream)).state.messages
                except NotFoundError:
                    stored = 0
                elapsed = time.perf_counter() - start
                print(
                    f"    {label}: {stored:,}/{total:,} stored after {elapsed:.0f} s "
                    f"({stored / elapsed:,.0f}/s)",
                    flush=True,
                )
        finally:
            await connection.close()

    thread = threading.Thread(target=asyncio.run, args=(report(),), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


# -- (a) raw nats-py -----------------------------------------------------------------------


def stored_messages(config_file: Path, rows: range) -> list[RawMessage]:
    """What the server would store for generated rows ``rows`` (its planner, its headers):
    the sink's messages, with the writer's own row mapping and message ids."""
    from pyspark.sql import Row

    from aviso_spark.rows import RowMapping
    from aviso_spark.runtime import host_runtime

    planner = host_runtime(str(config_file)).planner
    identifier = tuple((column, column) for column in IDENTIFIER_COLUMNS.split(","))
    mapping = RowMapping(EVENT_TYPE, identifier, PAYLOAD_COLUMNS)
    messages = []
    for row_id in rows:
        item = mapping.notification(Row(**row_values(row_id)), planner)
        assert item.planned is not None and item.message_id is not None
        headers = {**item.planned.metadata, MESSAGE_ID_METADATA: item.message_id}
        messages.append((item.planned.topic, item.planned.payload.encode(), headers))
    return messages


def raw_messages(config_file: Path, rows: range) -> list[RawMessage]:
    """:func:`stored_messages`, re-based on ``RAW_BASE``."""
    return [
        (f"{RAW_BASE}.{topic.split('.', 1)[1]}", payload, headers)
        for topic, payload, headers in stored_messages(config_file, rows)
    ]


def raw_partition(
    nats_url: str,
    config_file: Path,
    rows: range,
    batch: int,
    concurrency: int,
    ready: ProcessEvent,
    go: ProcessEvent,
) -> None:
    """One partition's share, published like the sink does (child process)."""
    messages = raw_messages(config_file, rows)

    async def run() -> None:
        connection = await nats.connect(nats_url, allow_reconnect=False)
        js = connection.jetstream()

        async def publish_one(message: RawMessage) -> SinkOutcome:
            subject, body, headers = message
            await js.publish(subject, body, headers=headers)
            return SinkOutcome()

        for start in range(0, len(messages), batch):
            await publish_all(messages[start : start + batch], concurrency, publish_one)
        await connection.close()

    ready.set()
    go.wait()
    asyncio.run(run())


def raw_rate(
    nats_url: str, config_file: Path, rows: int, partitions: int, batch: int, concurrency: int
) -> float:
    options = parse_options({"nats_url": nats_url})

    async def create_stream() -> None:
        connection = await nats.connect(nats_url)
        await connection.jetstream().add_stream(desired_config(RAW_BASE, options, None))
        await connection.close()

    asyncio.run(create_stream())
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    shares = [rows // partitions + (1 if p < rows % partitions else 0) for p in range(partitions)]
    workers = []
    first = 0
    for share in shares:
        ready = context.Event()
        worker = context.Process(
            target=raw_partition,
            args=(
                nats_url,
                config_file,
                range(first, first + share),
                batch,
                concurrency,
                ready,
                go,
            ),
        )
        worker.start()
        workers.append((worker, ready))
        first += share
    for worker, ready in workers:
        while not ready.wait(1):
            if not worker.is_alive():
                raise RuntimeError(f"raw publisher exited with {worker.exitcode}")
    print("    messages prepared; publishing", flush=True)
    with progress(nats_url, RAW_BASE.upper(), "raw", rows):
        start = time.perf_counter()
        go.set()
        for worker, _ in workers:
            worker.join()
        elapsed = time.perf_counter() - start
    if any(worker.exitcode for worker, _ in workers):
        raise RuntimeError("a raw publisher failed")
    return rows / elapsed


# -- (b) Spark backend sink ------------------------------------------------------------------


def spark_session(name: str, cores: int = 2) -> Any:
    """A local Spark session on ``cores`` cores, on the loopback only, without the UI, the
    console progress bars (the benchmarks print their own progress) or INFO logs; aviso's data
    source registered."""
    from pyspark.sql import SparkSession

    from aviso_spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def sink_rate(
    nats_url: str,
    config_file: Path,
    folder: Path,
    rows: int,
    partitions: int,
    batch: int,
    concurrency: int,
) -> tuple[float, dict[str, Any]]:
    from aviso_spark.deadletter import SUMMARY_FILE

    spark = spark_session("aviso-spark-sink-benchmark", partitions)
    try:
        frame = spark.range(0, rows, numPartitions=partitions).selectExpr(*ROW_EXPRESSIONS)
        deadletter = folder / "deadletter"
        writer = (
            frame.write.format("aviso")
            .mode("append")
            .option("event_type", EVENT_TYPE)
            .option("config", str(config_file))
            .option("identifier_columns", IDENTIFIER_COLUMNS)
            .option("payload_columns", ",".join(PAYLOAD_COLUMNS))
            .option("deadletter_path", str(deadletter))
            .option("batch_size", str(batch))
            .option("sink", "backend")
            .option("sink.concurrency", str(concurrency))
        )
        with progress(nats_url, SINK_STREAM, "spark sink", rows):
            start = time.perf_counter()
            writer.save()
            elapsed = time.perf_counter() - start
    finally:
        spark.stop()
    return rows / elapsed, json.loads((deadletter / SUMMARY_FILE).read_text())


async def stored(nats_url: str, stream: str) -> int:
    connection = await nats.connect(nats_url)
    try:
        return (await connection.jetstream().stream_info(stream)).state.messages
    finally:
        await connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2, help="Spark partitions and cores")
    parser.add_argument("--batch-size", type=int, default=500, help="rows per sink batch")
    parser.add_argument("--concurrency", type=int, default=64, help="publishes in flight")
    args = parser.parse_args()
    figures: dict[str, Any] = {"rows": args.rows, "partitions": args.partitions}
    with TemporaryDirectory() as temporary, nats_server(Path(temporary) / "nats") as server:
        folder = Path(temporary)
        config_file = folder / "aviso.yaml"
        config_file.write_text(yaml.safe_dump(config_document(server.url)))
        print(f"(a) raw nats-py publish+ack, {args.rows:,} messages", flush=True)
        figures["raw_per_second"] = raw_rate(
            server.url, config_file, args.rows, args.partitions, args.batch_size, args.concurrency
        )
        print(f"(b) Spark backend sink, {args.rows:,} rows", flush=True)
        figures["sink_per_second"], summary = sink_rate(
            server.url,
            config_file,
            folder,
            args.rows,
            args.partitions,
            args.batch_size,
            args.concurrency,
        )
        figures["raw_stored"] = asyncio.run(stored(server.url, RAW_BASE.upper()))
        figures["sink_stored"] = asyncio.run(stored(server.url, SINK_STREAM))
        figures["sink_summary"] = summary
    figures["ratio"] = figures["sink_per_second"] / figures["raw_per_second"]
    print(f"    raw nats-py publish+ack: {figures['raw_per_second']:10,.0f} msg/s")
    print(f"    Spark backend sink:      {figures['sink_per_second']:10,.0f} rows/s")
    print(f"    ratio sink / raw:        {figures['ratio']:10.2f}   (goal >= 0.3)")
    print(json.dumps(figures, sort_keys=True), flush=True)
    complete = figures["raw_stored"] == figures["sink_stored"] == args.rows
    if not complete or summary.get("published") != args.rows:
        sys.exit(f"not every row was stored: {figures}")


if __name__ == "__main__":
    main()
