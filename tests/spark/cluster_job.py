"""A Spark application run by ``spark-submit`` on a cluster master (see
test_spark_cluster.py): the writer with a third-party field handler and a third-party sink,
the partitioned reader and the streaming source, executors in their own JVMs.

Argument: a JSON file of settings; prints one JSON line of what it saw.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from aviso_spark import register


def main(settings: dict) -> dict:
    spark = SparkSession.builder.appName("aviso-cluster-test").getOrCreate()
    register(spark)
    out = Path(settings["out"])
    url = settings["url"]

    # Rows validated by the shipped ColourHandler on the executors, handed to the shipped sink.
    paint = spark.createDataFrame(settings["paint_rows"], "colour string, line string")
    paint.repartition(2).write.format("aviso").mode("append").options(
        event_type="paint_batch",
        config=settings["config"],
        sink="jsonl",
        **{"sink.path": str(out / "jsonl")},
        deadletter_path=str(out / "paint-dead"),
        max_rejected_fraction="0.5",
    ).save()

    rows = [{key: str(value) for key, value in row.items()} for row in settings["rows"]]
    spark.createDataFrame(rows).repartition(3).write.format("aviso").mode("append").options(
        event_type="dissemination",
        config=settings["config"],
        identifier_columns=settings["identifier_columns"],
        payload_columns="path,size",
        deadletter_path=str(out / "dead"),
        sink="http",
        **{"sink.url": url},
    ).save()

    filters = {"identifier.destination": settings["destination"], "identifier.class": "od"}
    history = (
        spark.read.format("aviso")
        .options(url=url, event_type="dissemination", numPartitions="4", **filters)
        .load()
    )
    read_sequences = [row["sequence"] for row in history.collect()]
    read_partitions = history.rdd.getNumPartitions()

    query = (
        spark.readStream.format("aviso")
        .options(url=url, event_type="dissemination", from_id=settings["from_id"], **filters)
        .option("numPartitions", "2")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out / "stream"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    streamed = sorted(row["sequence"] for row in spark.read.parquet(str(out / "stream")).collect())

    executors = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    result = {
        "master": spark.sparkContext.master,
        "executors": len(executors) - 1,  # the driver is listed too
        "driver_pid": os.getpid(),
        "read_sequences": read_sequences,
        "read_partitions": read_partitions,
        "streamed_sequences": streamed,
    }
    spark.stop()
    return result


if __name__ == "__main__":
    print(json.dumps(main(json.loads(Path(sys.argv[1]).read_text()))))
