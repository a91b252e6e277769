"""Spark reads from an aviso server beside a parquet read of the same rows, in one run.

  python -m benchmarks.spark_read [--count 100000] [--rounds 3] [--seconds 30] [--backlog 10000]
                                 [--partitions 1,2,4] [--reads-only]

Starts its own nats-server (file storage) and ``aviso-server serve`` (JetStream; replays paced
as shipped, 100 per 100 ms, except for ``watch_endpoint.bulk_readers: ["*"]``, which is every
caller here: Spark's replays are unpaced, pages of 1,000; metrics on) on free loopback ports,
stores ``--count`` dissemination notifications (one through the server, which creates the
stream, the rest published with nats-py in the server's own format), then measures, each
point ``--rounds`` times:

(a) raw: a nats-py ordered consumer over the stream (no HTTP, no Spark);
(b) ``spark.read.format("aviso")`` with ``numPartitions`` = each of ``--partitions``, into
    Spark's ``noop`` sink, after a warm-up read that checks every notification is read; the
    CPU seconds each part of the read used meanwhile (the aviso server, the nats-server, the
    Spark JVM, its Python workers) and the machine's idle CPU seconds, which together say
    whether more partitions had a core to run on;
(p) a parquet scan of the same rows (written once from the read) into ``noop``;
(f) ``.where(col("destination") == "ecpds3")`` against the same filter as the option
    ``identifier.destination``: time, rows, and the notifications the server sent meanwhile
    (``aviso_sse_events_sent_total``);
(d) the streaming source at 1 notification/s for ``--seconds``: a notification's latency is
    the end of its micro-batch's ``foreachBatch`` minus its storage time (p50, p99);
(e) a ``--backlog`` of notifications read with ``maxNotificationsPerTrigger=1000`` and
    ``Trigger.AvailableNow``: the largest micro-batch and the total.

Spark runs ``local[2]`` (this machine has 2 cores, shared). Prints the figures and writes
every round under ``benchmarks/results/`` (``benchmarks/results.py``). ``--reads-only``
measures (a), (b) and (p) alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx
import nats
import yaml

from aviso_loadtests.report import percentile
from aviso_loadtests.servers import free_port
from aviso_spark.replay import ReplayRequest, latest_sequence
from benchmarks.jetstream import raw_ordered_read_rate
from benchmarks.results import spread, write_results
from benchmarks.spark_sink import (
    EVENT_TYPE,
    IDENTIFIER_COLUMNS,
    config_document,
    row_values,
    spark_session,
    stored_messages,
)
from tests.support.nats import nats_server
from tests.support.process import aviso_process

STREAM = "DISS"
SUBJECTS = "diss.>"
PUBLISH_BATCH = 1000
FILTERED_DESTINATION = "ecpds3"
"""One destination in five: what the filter benchmark reads."""
BACKLOG_LIMIT = 1000
ANY = {"destination": "*", "class": "*"}
"""The schema's required fields, unconstrained: a replay of everything."""


async def publish(
    nats_url: str,
    messages: list[tuple[str, bytes, dict[str, str]]],
    rate: float | None,
    batch: int = PUBLISH_BATCH,
) -> float:
    """Publish with acks, ``batch`` in flight; at most ``rate`` per second."""
    connection = await nats.connect(nats_url)
    js = connection.jetstream()
    start = time.perf_counter()
    for offset in range(0, len(messages), batch):
        chunk = messages[offset : offset + batch]
        await asyncio.gather(*(js.publish(s, body, headers=h) for s, body, h in chunk))
        if rate is not None:  # pacing a load generator, not synchronising anything
            ahead = (offset + len(chunk)) / rate - (time.perf_counter() - start)
            if ahead > 0:
                await asyncio.sleep(ahead)
    elapsed = time.perf_counter() - start
    await connection.close()
    return elapsed


def reader_options(url: str) -> dict[str, str]:
    # No identifier option: every required field is unconstrained.
    return {"url": url, "event_type": EVENT_TYPE}


def history(spark: Any, url: str, partitions: int, **options: str) -> Any:
    frame = spark.read.format("aviso").options(**reader_options(url), **options)
    return frame.option("numPartitions", str(partitions)).load()


def _process_table() -> dict[int, tuple[int, float]]:
    """Every process's parent and CPU seconds so far, its reaped children's included (Linux
    ``/proc``): a Python worker that exits between two looks still counts, in its parent."""
    table: dict[int, tuple[int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        cpu = sum(int(value) for value in fields[11:15]) / tick
        table[int(entry.name)] = (int(fields[1]), cpu)
    return table


def _descendants(table: dict[int, tuple[int, float]], root: int) -> set[int]:
    found = {root}
    grew = True
    while grew:
        grew = False
        for pid, (parent, _) in table.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def idle_cpu_seconds() -> float:
    """The machine's idle CPU seconds so far, over every core (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


def cpu_parts(server_pid: int, nats_pid: int) -> dict[str, float]:
    """CPU seconds so far of the read's parts: the aviso server, the nats-server, the Spark
    JVM (every other descendant of this process but its Python workers), the Python
    workers (the JVM's descendants), and this driver process; and the machine's idle time."""
    table = _process_table()
    server = _descendants(table, server_pid)
    nats_tree = _descendants(table, nats_pid)
    mine = os.getpid()
    jvms = [
        pid
        for pid, (parent, _) in table.items()
        if parent == mine and pid not in server | nats_tree
    ]
    workers: set[int] = set()
    for jvm in jvms:
        workers |= _descendants(table, jvm) - {jvm}

    def total(pids: set[int]) -> float:
        return sum(table[pid][1] for pid in pids if pid in table)

    return {
        "server": total(server),
        "nats": total(nats_tree),
        "jvm": total(set(jvms)),
        "python_workers": total(workers),
        "driver": table[mine][1] if mine in table else 0.0,
        "idle": idle_cpu_seconds(),
    }


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {part: after[part] - before[part] for part in before}


def timed_noop(frame: Any) -> float:
    """Seconds to produce every row of ``frame`` into the ``noop`` sink (none written)."""
    start = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def events_sent(metrics_url: str) -> float:
    """The server's ``aviso_sse_events_sent_total`` over every route and event type."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(metrics_url, timeout=10.0).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "aviso_sse_events_sent_total"
    )


def filtered_read(spark: Any, url: str, metrics_url: str, how: str) -> dict[str, float]:
    """One destination's rows through ``.where()`` (``how="where"``) or the option."""
    from pyspark.sql.functions import col

    before = events_sent(metrics_url)
    start = time.perf_counter()
    if how == "where":
        frame = history(spark, url, 4).where(col("destination") == FILTERED_DESTINATION)
    else:
        frame = history(spark, url, 4, **{"identifier.destination": FILTERED_DESTINATION})
    rows = frame.select("sequence").count()
    return {
        "seconds": time.perf_counter() - start,
        "rows": rows,
        "server_sent": events_sent(metrics_url) - before,
    }


def streaming(
    spark: Any, url: str, nats_url: str, config_file: Path, first: int, seconds: int
) -> dict[str, Any]:
    """1 notification/s for ``seconds`` while a query (default trigger) reads them."""
    messages = stored_messages(config_file, range(first, first + seconds))
    latencies: list[float] = []
    lock = threading.Lock()

    def batch(frame: Any, batch_id: int) -> None:
        # Spark hands timestamps back as naive local times; .timestamp() reads them so.
        times = [row["time"].timestamp() for row in frame.select("time").collect()]
        done = time.time()
        with lock:
            latencies.extend(done - stamp for stamp in times)

    start_id = latest_sequence(ReplayRequest(url, EVENT_TYPE, ANY)) + 1
    query = (
        spark.readStream.format("aviso")
        .options(**reader_options(url))
        .option("from_id", str(start_id))
        .option("numPartitions", "1")
        .load()
        .writeStream.foreachBatch(batch)
        .start()
    )
    try:
        # Measured from a running query: its start (a Spark job) is not a notification's wait.
        deadline = time.monotonic() + 300
        while not query.recentProgress and time.monotonic() < deadline:
            query.awaitTermination(0.5)
        asyncio.run(publish(nats_url, messages, 1.0, batch=1))
        query.processAllAvailable()
    finally:
        query.stop()
    return {
        "published": seconds,
        "read": len(latencies),
        "latency_p50_s": percentile(latencies, 0.50),
        "latency_p99_s": percentile(latencies, 0.99),
    }


def backlog(
    spark: Any, url: str, nats_url: str, config_file: Path, first: int, count: int, folder: Path
) -> dict[str, Any]:
    """``count`` notifications stored first, then read by a ``Trigger.AvailableNow`` query
    with ``maxNotificationsPerTrigger`` = ``BACKLOG_LIMIT``."""
    start_id = latest_sequence(ReplayRequest(url, EVENT_TYPE, ANY)) + 1
    asyncio.run(publish(nats_url, stored_messages(config_file, range(first, first + count)), None))
    sizes: list[int] = []

    def batch(frame: Any, batch_id: int) -> None:
        sizes.append(frame.count())

    started = time.perf_counter()
    query = (
        spark.readStream.format("aviso")
        .options(**reader_options(url))
        .option("from_id", str(start_id))
        .option("maxNotificationsPerTrigger", str(BACKLOG_LIMIT))
        .option("numPartitions", "2")
        .load()
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(folder / "backlog-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return {
        "backlog": count,
        "limit": BACKLOG_LIMIT,
        "read": sum(sizes),
        "batches": len([size for size in sizes if size]),
        "largest_batch": max(sizes, default=0),
        "seconds": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=30, help="streaming at 1/s: how long")
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument(
        "--partitions",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[1, 2, 4],
        help="the partition counts to read with, comma-separated",
    )
    parser.add_argument("--reads-only", action="store_true", help="(a), (b) and (p) only")
    args = parser.parse_args()
    rounds: list[dict[str, Any]] = []
    figures: dict[str, Any] = {"count": args.count}
    with TemporaryDirectory() as temporary, nats_server(Path(temporary) / "nats") as nats_run:
        folder = Path(temporary)
        document = config_document(nats_run.url)
        document["watch_endpoint"] = {
            "max_historical_notifications": 100_000,
            "bulk_readers": ["*"],  # no authentication here: every caller is a bulk reader
        }
        metrics_port = free_port()
        document["metrics"] = {"enabled": True, "host": "127.0.0.1", "port": metrics_port}
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        config_file = folder / "aviso.yaml"
        config_file.write_text(yaml.safe_dump(document))
        assert nats_run.process is not None
        nats_pid = nats_run.process.pid
        with aviso_process(config_file, folder / "server.log") as (url, server):
            first = row_values(0)
            body = {
                "event_type": EVENT_TYPE,
                "identifier": {
                    k: str(v) for k, v in first.items() if k in IDENTIFIER_COLUMNS.split(",")
                },
                "payload": {"path": first["path"], "size": first["size"]},
            }
            assert httpx.post(f"{url}/api/v1/notification", json=body).status_code == 200
            print(f"storing {args.count:,} notifications", flush=True)
            elapsed = asyncio.run(
                publish(nats_run.url, stored_messages(config_file, range(1, args.count)), None)
            )
            print(f"    stored in {elapsed:.0f} s", flush=True)
            spark = spark_session("aviso-spark-read-benchmark")
            try:
                # Warm-up (Python workers, caches) that also checks the read is complete, and
                # the same rows as parquet.
                frame = history(spark, url, 2)
                frame.write.parquet(str(folder / "rows.parquet"))
                read = spark.read.parquet(str(folder / "rows.parquet")).count()
                if read != args.count:
                    raise RuntimeError(f"read {read:,} of {args.count:,}")
                for number in range(args.rounds):
                    print(f"round {number + 1}", flush=True)
                    point: dict[str, Any] = {"round": number + 1}
                    point["raw_per_second"] = asyncio.run(
                        raw_ordered_read_rate(nats_run.url, SUBJECTS, args.count)
                    )
                    for partitions in args.partitions:
                        before = cpu_parts(server.pid, nats_pid)
                        seconds = timed_noop(history(spark, url, partitions))
                        used = cpu_used(before, cpu_parts(server.pid, nats_pid))
                        point[f"partitions_{partitions}_per_second"] = args.count / seconds
                        point[f"partitions_{partitions}_seconds"] = seconds
                        point[f"partitions_{partitions}_cpu_seconds"] = used
                        point[f"partitions_{partitions}_server_cpu"] = used["server"] / seconds
                    parquet = timed_noop(spark.read.parquet(str(folder / "rows.parquet")))
                    point["parquet_per_second"] = args.count / parquet
                    rounds.append(point)
                    print(json.dumps(point), flush=True)
                    if not args.reads_only:
                        # Alternated: neither always runs on the other's warm caches.
                        for how in ("where", "option") if number % 2 else ("option", "where"):
                            point[f"filter_{how}"] = filtered_read(spark, url, metrics_url, how)
                if not args.reads_only:
                    print(f"(d) streaming source, 1/s for {args.seconds} s", flush=True)
                    figures["streaming"] = streaming(
                        spark, url, nats_run.url, config_file, args.count, args.seconds
                    )
                    print(f"(e) backlog of {args.backlog:,}, AvailableNow", flush=True)
                    figures["backlog"] = backlog(
                        spark,
                        url,
                        nats_run.url,
                        config_file,
                        args.count + args.seconds,
                        args.backlog,
                        folder,
                    )
            finally:
                spark.stop()
    summary = summarise(rounds, figures, args.partitions)
    path = write_results("spark_read", rounds, summary)
    print(json.dumps(summary, indent=1, sort_keys=True))
    print(f"written to {path}", flush=True)


def summarise(
    rounds: list[dict[str, Any]], figures: dict[str, Any], partitions: list[int]
) -> dict[str, Any]:
    summary: dict[str, Any] = dict(figures)
    keys = ["raw_per_second", "parquet_per_second"]
    for count in partitions:
        keys += [f"partitions_{count}_per_second", f"partitions_{count}_server_cpu"]
    for key in keys:
        summary[key] = spread([point[key] for point in rounds])
    for count in partitions:
        parts = [point[f"partitions_{count}_cpu_seconds"] for point in rounds]
        summary[f"partitions_{count}_cpu_seconds"] = {
            part: spread([used[part] for used in parts]) for part in parts[0]
        }
        if count != 1 and 1 in partitions:
            summary[f"ratio_{count}_over_1"] = spread(
                [p[f"partitions_{count}_per_second"] / p["partitions_1_per_second"] for p in rounds]
            )
    if any("filter_where" not in point for point in rounds):
        return summary
    summary["ratio_where_over_option_time"] = spread(
        [p["filter_where"]["seconds"] / p["filter_option"]["seconds"] for p in rounds]
    )
    summary["filter_where_rows"] = [p["filter_where"]["rows"] for p in rounds]
    summary["filter_where_server_sent"] = [p["filter_where"]["server_sent"] for p in rounds]
    summary["filter_option_rows"] = [p["filter_option"]["rows"] for p in rounds]
    return summary


if __name__ == "__main__":
    main()
