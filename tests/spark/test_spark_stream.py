"""``df.writeStream.format("aviso")``: files dropped into a folder reach an open watch, and a
query restarted from its checkpoint publishes only the files it has not published yet.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from aviso_spark import deadletter
from aviso_spark.example_data import COLUMNS, IDENTIFIER_COLUMNS, dissemination_rows
from tests.spark.checks import EVENT_TYPE, LiveWatch, drop_file, replayed_row_ids
from tests.spark.conftest import AvisoSetup

ROWS_PER_FILE = 100
CSV_SCHEMA = StructType([StructField(name, StringType()) for name in COLUMNS])


def run_until_caught_up(
    spark: SparkSession, inbox: Path, aviso: AvisoSetup, checkpoint: Path, dead: Path
) -> None:
    """Start the query on ``checkpoint``, let it publish every file there, stop it."""
    query = (
        spark.readStream.schema(CSV_SCHEMA)
        .option("header", "true")
        .option("maxFilesPerTrigger", "1")  # one micro-batch per file
        .csv(str(inbox))
        .writeStream.format("aviso")
        .option("checkpointLocation", str(checkpoint))
        .option("event_type", EVENT_TYPE)
        .option("config", str(aviso.config_file))
        .option("identifier_columns", ",".join(IDENTIFIER_COLUMNS))
        .option("payload_columns", "path,size")
        .option("deadletter_path", str(dead))
        .option("max_rejected_fraction", "0.1")
        .option("sink", "http")
        .option("sink.url", aviso.server.url)
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None


def batch_summaries(dead: Path) -> list[dict[str, Any]]:
    return [
        deadletter.summary(folder) for folder in sorted(dead.glob("batch-*")) if folder.is_dir()
    ]


def test_dropped_files_reach_a_watch_once_across_a_checkpoint_restart(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(3 * ROWS_PER_FILE, 0.03, seed=11, destination_prefix=aviso.prefix)
    for row in data.rows:
        row["destination"] = aviso.prefix  # one destination: one watch sees every row
    files = [
        data.rows[start : start + ROWS_PER_FILE]
        for start in range(0, len(data.rows), ROWS_PER_FILE)
    ]
    valid = [{row["row_id"] for row in rows} - data.invalid_ids for rows in files]
    inbox, staging = tmp_path / "inbox", tmp_path / "staging"
    inbox.mkdir()
    staging.mkdir()
    checkpoint, dead = tmp_path / "checkpoint", tmp_path / "dead"
    watch_body = {
        "event_type": EVENT_TYPE,
        "identifier": {"destination": aviso.prefix, "class": "od"},
    }

    with LiveWatch(aviso.server.url, watch_body) as watch:
        drop_file(inbox, staging, "rows-0.csv", files[0])
        drop_file(inbox, staging, "rows-1.csv", files[1])
        run_until_caught_up(spark, inbox, aviso, checkpoint, dead)
        first = watch.wait_for(len(valid[0] | valid[1]))
        assert first == Counter(valid[0] | valid[1])
        # Files of one trigger are taken in modification-time order, which may tie.
        assert sorted(batch["published"] for batch in batch_summaries(dead)) == sorted(
            [len(valid[0]), len(valid[1])]
        )

        # Restarted from the checkpoint: only the new file is read and published.
        drop_file(inbox, staging, "rows-2.csv", files[2])
        run_until_caught_up(spark, inbox, aviso, checkpoint, dead)
        everything = watch.wait_for(len(set().union(*valid)))

    summaries = batch_summaries(dead)
    assert [batch["rows"] for batch in summaries] == [ROWS_PER_FILE] * 3
    assert summaries[2]["published"] == len(valid[2])  # after the restart: the new file only
    assert everything == Counter(set().union(*valid))
    assert replayed_row_ids(aviso, [aviso.prefix]) == Counter(set().union(*valid))
    # Each batch's rejects in its own folder, with their error codes.
    rejected = [
        {int(record["row"]["row_id"]) for record in deadletter.read(folder)}
        for folder in sorted(dead.glob("batch-*"))
    ]
    expected = [{row["row_id"] for row in rows} & data.invalid_ids for rows in files]
    assert sorted(map(sorted, rejected[:2])) == sorted(map(sorted, expected[:2]))
    assert rejected[2] == expected[2]
    assert deadletter.combined_summary(dead)["rejected"] == len(data.invalid_ids)
