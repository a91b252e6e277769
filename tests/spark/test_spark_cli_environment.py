"""The installed ``aviso-server`` script run by absolute path from an environment whose
``PATH`` has no Python with aviso on it (the virtualenv not activated), and the history
command's bounds and partitions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from aviso_spark.example_data import IDENTIFIER_COLUMNS, dissemination_rows, write
from tests.spark.checks import EVENT_TYPE, replayed_row_ids
from tests.spark.conftest import AvisoSetup
from tests.spark.test_spark_cli import run_cli
from tests.support.process import CLI_TIMEOUT

SCRIPT = Path(sys.executable).with_name("aviso-server")
"""The script installed beside the interpreter running the tests (a virtualenv's, or the
base installation's in CI): its directory is not on ``SYSTEM_PATH``."""
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
"""Has java and a ``python3`` without pyspark or aviso: what executors found before."""


def test_the_script_publishes_without_an_activated_virtualenv(
    aviso: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(40, 0.0, seed=51, destination_prefix=aviso.prefix)
    write(data.rows, tmp_path / "rows.json", "json")
    environment = {
        "PATH": SYSTEM_PATH,
        "HOME": str(tmp_path),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.enabled=false --conf spark.driver.host=127.0.0.1 "
        "--conf spark.driver.bindAddress=127.0.0.1 pyspark-shell",
    }
    command = [
        str(SCRIPT),
        "spark",
        "publish",
        "--input",
        str(tmp_path / "rows.json"),
        "--format",
        "json",
        "--event-type",
        EVENT_TYPE,
        "--url",
        aviso.server.url,
        "--config",
        str(aviso.config_file),
        "--identifier-columns",
        ",".join(IDENTIFIER_COLUMNS),
        "--payload-columns",
        "path,size",
        "--deadletter",
        str(tmp_path / "dead"),
        "--master",
        "local[2]",
    ]
    result = subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=4 * CLI_TIMEOUT
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1])["published"] == 40
    assert set(replayed_row_ids(aviso)) == set(range(40))


def test_history_reads_between_bounds_with_partitions(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(100, 0.0, seed=52, destination_prefix=aviso.prefix)
    for row in data.rows:
        row["destination"] = aviso.prefix
    spark.createDataFrame([{k: str(v) for k, v in row.items()} for row in data.rows]).write.format(
        "aviso"
    ).mode("append").options(
        event_type=EVENT_TYPE,
        config=str(aviso.config_file),
        identifier_columns=",".join(IDENTIFIER_COLUMNS),
        payload_columns="path,size",
        deadletter_path=str(tmp_path / "dead"),
        sink="backend",
    ).save()
    query = [
        "spark",
        "history",
        "--url",
        aviso.server.url,
        "--event-type",
        EVENT_TYPE,
        "--identifier",
        f"destination={aviso.prefix}",
        "--identifier",
        "class=od",
    ]

    def sequences(*options: str) -> list[int]:
        result = run_cli(*query, *options)
        assert result.exit_code == 0, result.output
        return [json.loads(line)["sequence"] for line in result.stdout.splitlines()]

    everything = sequences("--partitions", "1")
    assert len(everything) == 100
    assert sequences("--partitions", "4") == everything
    first, last = everything[10], everything[59]
    bounded = sequences("--from-id", str(first), "--to-id", str(last), "--partitions", "3")
    assert bounded == everything[10:60]
    assert sequences("--to-date", "2000-01-01T00:00:00Z", "--partitions", "4") == []
    refused = run_cli(*query, "--partitions", "0")
    assert refused.exit_code == 2 and "--partitions" in refused.stderr
