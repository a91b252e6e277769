"""Partitioned history reads and the streaming source of ``aviso_spark``, in one run.

  python -m benchmarks.spark_read [--count 1000000] [--rate 5000] [--seconds 20]

Starts its own nats-server (file storage) and ``aviso-server serve`` (JetStream, replay
batches of 1,000 without delay) on free loopback ports, stores ``--count`` dissemination
notifications (one through the server, which creates the stream, the rest published with
nats-py in the server's own format: subjects, bodies and headers built by its planner), then
measures, reading everything back:

(a) raw: a nats-py ordered consumer over the stream (no HTTP, no Spark);
(b) ``spark.read.format("aviso")`` with ``numPartitions=1`` into Spark's ``noop`` sink
    (after a warm-up read that checks every notification is read);
(c) the same with ``numPartitions=4``; for both, the server's CPU use during the read (share
    of one core) says where the limit is;
(d) the streaming source: ``--rate`` notifications/s published with nats-py for
    ``--seconds`` while a query (default trigger, 2 partitions per micro-batch) reads them;
    a notification's latency is the end of its micro-batch's ``foreachBatch`` minus its
    storage time. Reports rows read vs published and the p50/p99 latency.

Spark runs ``local[2]`` (this machine has 2 cores). Prints rows/s, the ratios 4 / 1 partitions
(goal >= 1.6) and Spark / raw, and, last, the figures as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx
import nats
import yaml

from aviso_loadtests.report import percentile
from aviso_spark.replay import ReplayRequest, latest_sequence
from benchmarks.jetstream import raw_ordered_read_rate
from benchmarks.spark_sink import (
    EVENT_TYPE,
    IDENTIFIER_COLUMNS,
    PAYLOAD_COLUMNS,
    config_document,
    row_values,
)
from tests.support.nats import nats_server
from tests.support.process import aviso_process

STREAM = "DISS"
SUBJECTS = "diss.>"
PUBLISH_BATCH = 1000


def stored_messages(config_file: Path, rows: range) -> list[tuple[str, bytes, dict[str, str]]]:
    """What the server would store for generated rows ``rows`` (its planner, its headers)."""
    from pyspark.sql import Row

    from aviso_plugins.types import MESSAGE_ID_METADATA
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


async def publish(
    nats_url: str, messages: list[tuple[str, bytes, dict[str, str]]], rate: float | None
) -> float:
    """Publish with acks, ``PUBLISH_BATCH`` in flight; at most ``rate`` per second."""
    connection = await nats.connect(nats_url)
    js = connection.jetstream()
    start = time.perf_counter()
    for offset in range(0, len(messages), PUBLISH_BATCH):
        chunk = messages[offset : offset + PUBLISH_BATCH]
        await asyncio.gather(*(js.publish(s, body, headers=h) for s, body, h in chunk))
        if rate is not None:  # pacing a load generator, not synchronising anything
            ahead = (offset + len(chunk)) / rate - (time.perf_counter() - start)
            if ahead > 0:
                await asyncio.sleep(ahead)
    elapsed = time.perf_counter() - start
    await connection.close()
    return elapsed


def spark_session() -> Any:
    from pyspark.sql import SparkSession

    from aviso_spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aviso-spark-read-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def reader_options(url: str) -> dict[str, str]:
    return {
        "url": url,
        "event_type": EVENT_TYPE,
        "identifier.destination": "*",
        "identifier.class": "od",
    }


def history(spark: Any, url: str, partitions: int) -> Any:
    frame = spark.read.format("aviso").options(**reader_options(url))
    return frame.option("numPartitions", str(partitions)).load()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spark_read_rate(
    spark: Any, url: str, partitions: int, count: int, server_pid: int
) -> tuple[float, float]:
    """Rows/s of a read into the ``noop`` sink (every row produced, none written), and the
    share of one core the server used meanwhile."""
    busy = cpu_seconds(server_pid)
    start = time.perf_counter()
    history(spark, url, partitions).write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - start
    return count / elapsed, (cpu_seconds(server_pid) - busy) / elapsed


def streaming(
    spark: Any, url: str, nats_url: str, config_file: Path, first: int, rate: int, seconds: int
) -> dict[str, Any]:
    total = rate * seconds
    messages = stored_messages(config_file, range(first, first + total))
    latencies: list[float] = []
    lock = threading.Lock()

    def batch(frame: Any, batch_id: int) -> None:
        # Spark hands timestamps back as naive local times; .timestamp() reads them so.
        times = [row["time"].timestamp() for row in frame.select("time").collect()]
        done = time.time()
        with lock:
            latencies.extend(done - stamp for stamp in times)

    options = reader_options(url)
    identifier = {"destination": "*", "class": "od"}
    start_id = latest_sequence(ReplayRequest(url, EVENT_TYPE, identifier)) + 1
    query = (
        spark.readStream.format("aviso")
        .options(**options)
        .option("from_id", str(start_id))
        .option("numPartitions", "2")
        .load()
        .writeStream.foreachBatch(batch)
        .start()
    )
    try:
        elapsed = asyncio.run(publish(nats_url, messages, rate))
        query.processAllAvailable()
    finally:
        query.stop()
    return {
        "published": total,
        "publish_rate": total / elapsed,
        "read": len(latencies),
        "latency_p50_s": percentile(latencies, 0.50),
        "latency_p99_s": percentile(latencies, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5000, help="streaming: published per second")
    parser.add_argument("--seconds", type=int, default=20, help="streaming: how long")
    args = parser.parse_args()
    figures: dict[str, Any] = {"count": args.count}
    with TemporaryDirectory() as temporary, nats_server(Path(temporary) / "nats") as nats_run:
        folder = Path(temporary)
        document = config_document(nats_run.url)
        document["watch_endpoint"] = {
            "replay_batch_size": 1000,
            "replay_batch_delay_ms": 0,
            "max_historical_notifications": 100_000,
        }
        config_file = folder / "aviso.yaml"
        config_file.write_text(yaml.safe_dump(document))
        with aviso_process(config_file, folder / "server.log") as (url, server):
            body = {
                "event_type": EVENT_TYPE,
                "identifier": {
                    k: str(v)
                    for k, v in row_values(0).items()
                    if k in IDENTIFIER_COLUMNS.split(",")
                },
                "payload": {"path": row_values(0)["path"], "size": row_values(0)["size"]},
            }
            assert httpx.post(f"{url}/api/v1/notification", json=body).status_code == 200
            print(f"storing {args.count:,} notifications", flush=True)
            elapsed = asyncio.run(
                publish(nats_run.url, stored_messages(config_file, range(1, args.count)), None)
            )
            print(f"    stored in {elapsed:.0f} s", flush=True)

            print("(a) raw nats-py ordered consumer", flush=True)
            figures["raw_per_second"] = asyncio.run(
                raw_ordered_read_rate(nats_run.url, SUBJECTS, args.count)
            )
            spark = spark_session()
            try:
                # Warm-up (Python workers, caches) that also checks the read is complete.
                read = history(spark, url, 2).count()
                if read != args.count:
                    raise RuntimeError(f"read {read:,} of {args.count:,}")
                for partitions in (1, 4):
                    print(f"(b/c) Spark read, {partitions} partition(s)", flush=True)
                    rate, server_cpu = spark_read_rate(
                        spark, url, partitions, args.count, server.pid
                    )
                    figures[f"partitions_{partitions}_per_second"] = rate
                    figures[f"partitions_{partitions}_server_cpu"] = server_cpu
                print(f"(d) streaming source, {args.rate:,}/s for {args.seconds} s", flush=True)
                figures["streaming"] = streaming(
                    spark, url, nats_run.url, config_file, args.count, args.rate, args.seconds
                )
            finally:
                spark.stop()
    one = figures["partitions_1_per_second"]
    four = figures["partitions_4_per_second"]
    figures["ratio_4_over_1"] = four / one
    figures["ratio_4_over_raw"] = four / figures["raw_per_second"]
    print(f"    raw nats-py ordered consumer: {figures['raw_per_second']:10,.0f} msg/s")
    for count, rate in ((1, one), (4, four)):
        cpu = figures[f"partitions_{count}_server_cpu"]
        print(
            f"    Spark read, {count} partition(s):  {rate:10,.0f} rows/s  (server {cpu:.0%} CPU)"
        )
    print(f"    ratio 4 / 1 partitions:       {figures['ratio_4_over_1']:10.2f}   (goal >= 1.6)")
    print(f"    ratio 4 partitions / raw:     {figures['ratio_4_over_raw']:10.2f}")
    stream = figures["streaming"]
    print(
        f"    streaming: {stream['read']:,} of {stream['published']:,} read, published at "
        f"{stream['publish_rate']:,.0f}/s, latency p50 {stream['latency_p50_s']:.2f} s, "
        f"p99 {stream['latency_p99_s']:.2f} s   (goal p99 < 2 s)"
    )
    print(json.dumps(figures, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
