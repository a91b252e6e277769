"""A Spark Connect client (``remote("local[2]")``) writing through the aviso data source (see
test_spark_connect_write.py): a first run, a re-run past the store's duplicate window with
new rows added, and rows with nulls. A process of its own: a Connect session cannot start
where a classic one (the suite's) is running.

Argument: a JSON file of settings; prints one JSON line of the summaries it saw.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from aviso_spark import register
from aviso_spark.example_data import COLUMNS, IDENTIFIER_COLUMNS, PAYLOAD_COLUMNS

SCHEMA = ", ".join(f"`{column}` string" for column in COLUMNS)


def frame(spark: SparkSession, rows: list[dict[str, Any]], partitions: int) -> DataFrame:
    texts = [{c: None if row[c] is None else str(row[c]) for c in COLUMNS} for row in rows]
    return spark.createDataFrame(texts, SCHEMA).repartition(partitions)


def publish(df: DataFrame, settings: dict[str, Any], dead: Path, **options: str) -> Any:
    df.write.format("aviso").mode("append").options(
        event_type="dissemination",
        config=settings["config"],
        identifier_columns=",".join(IDENTIFIER_COLUMNS),
        payload_columns=",".join(PAYLOAD_COLUMNS),
        deadletter_path=str(dead),
        sink=settings["sink"],
        **{"sink.url": settings["url"]},
        **options,
    ).save()
    return json.loads((dead / "_summary.json").read_text())


def main(settings: dict[str, Any]) -> dict[str, Any]:
    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    register(spark)
    out = Path(settings["out"])
    rows = settings["rows"]
    try:
        first = publish(frame(spark, rows[:-50], 2), settings, out / "first")
        time.sleep(settings["wait_seconds"])  # the store's duplicate window passes
        rerun = publish(frame(spark, rows, 3), settings, out / "rerun")
        nulls = publish(
            frame(spark, settings["null_rows"], 1),
            settings,
            out / "nulls",
            max_rejected_fraction="0.5",
            **{"fill_null.stream": "wave"},
        )
        session = type(spark).__module__
    finally:
        spark.stop()
    return {"first": first, "rerun": rerun, "nulls": nulls, "session": session}


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    print(json.dumps(main(json.loads(Path(sys.argv[1]).read_text()))))
