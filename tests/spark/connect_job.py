"""A Spark Connect client (``SparkSession.builder.remote("local[2]")``, its own process and
JVM) reading from an aviso server (see test_spark_connect.py): pushdown, typed columns, the
partition count register() finds without a Spark context, the streaming source's admission
control.

Argument: a JSON file of settings; prints one JSON line of what it saw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.functions import col

from aviso_spark import PARTITIONS_CONF, PUSHDOWN_CONF, default_partitions, register


def main(settings: dict[str, Any]) -> dict[str, Any]:
    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    register(spark)
    seen: dict[str, Any] = {
        "pushdown": spark.conf.get(PUSHDOWN_CONF),
        "partitions_from_master": default_partitions(spark),
    }
    spark.conf.set(PARTITIONS_CONF, "3")
    seen["partitions_from_setting"] = default_partitions(spark)
    register(spark)

    url, out = settings["url"], Path(settings["out"])
    history = spark.read.format("aviso").options(url=url, event_type=settings["event_type"]).load()
    seen["dtypes"] = dict(history.dtypes)
    seen["all"] = sorted(row["sequence"] for row in history.select("sequence").collect())
    where = history.where((col("destination") == settings["destination"]) & (col("step") >= 10))
    seen["where"] = sorted(row["sequence"] for row in where.select("sequence").collect())
    try:
        spark.read.format("aviso").options(
            url=url, event_type=settings["event_type"], **{"identifier.destination": "d-*"}
        ).load().collect()
        seen["wildcard_error"] = None
    except Exception as exc:  # the connect client's error carries the source's message
        seen["wildcard_error"] = str(exc)

    query = (
        spark.readStream.format("aviso")
        .options(url=url, event_type=settings["event_type"], from_id="1")
        .option("maxNotificationsPerTrigger", str(settings["limit"]))
        .load()
        .writeStream.format("parquet")
        .option("path", str(out / "stream"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seen["batch_rows"] = [progress.numInputRows for progress in query.recentProgress]
    streamed = spark.read.parquet(str(out / "stream")).select("sequence").collect()
    seen["streamed"] = sorted(row["sequence"] for row in streamed)
    spark.stop()
    return seen


if __name__ == "__main__":
    print(json.dumps(main(json.loads(Path(sys.argv[1]).read_text()))))
