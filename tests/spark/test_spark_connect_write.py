"""The writer on Spark Connect (``SparkSession.builder.remote("local[2]")``), in a child
process: re-runs past the duplicate window store nothing twice, summaries are exact, and
nulls take the schema default or ``fill_null`` (else the row is rejected), with both sinks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aviso_spark import deadletter
from aviso_spark.example_data import dissemination_rows
from tests.spark.checks import replayed_row_ids
from tests.spark.conftest import AvisoSetup
from tests.spark.test_spark_rerun import PAST_THE_WINDOW, replayed_identifiers
from tests.support.process import CLI_TIMEOUT, clean_environment

JOB = Path(__file__).parent / "connect_write_job.py"
TIMEOUT = max(CLI_TIMEOUT, 400.0)
"""A Connect server's JVM and two jobs on two shared cores: bounded, generously."""


@pytest.mark.parametrize("sink", ["backend", "http"])
def test_the_writer_on_spark_connect(aviso_short: AvisoSetup, tmp_path: Path, sink: str) -> None:
    data = dissemination_rows(250, 0.0, seed=41, destination_prefix=aviso_short.prefix)
    nulls = dissemination_rows(3, 0.0, seed=43, destination_prefix=aviso_short.prefix).rows
    nulls = [dict(row, destination=f"{aviso_short.prefix}n") for row in nulls]
    nulls[0]["expver"], nulls[1]["stream"], nulls[2]["target"] = None, None, None
    settings = {
        "out": str(tmp_path / "out"),
        "url": aviso_short.server.url,
        "config": str(aviso_short.config_file),
        "sink": sink,
        "rows": data.rows,
        "null_rows": nulls,
        "wait_seconds": PAST_THE_WINDOW,
    }
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    env = {**clean_environment(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    result = subprocess.run(
        [sys.executable, str(JOB), str(tmp_path / "settings.json")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["session"].startswith("pyspark.sql.connect")

    def counts(summary: dict[str, int]) -> tuple[int, int, int]:
        return summary["stored"], summary["already_stored"], summary["rejected"]

    assert counts(seen["first"]) == (200, 0, 0)
    assert counts(seen["rerun"]) == (50, 200, 0)
    replayed = replayed_row_ids(aviso_short)
    assert set(replayed) == set(range(250))
    assert max(replayed.values()) == 1

    assert counts(seen["nulls"]) == (2, 0, 1)
    [rejected] = deadletter.read(tmp_path / "out" / "nulls")
    assert "fill_null.target" in rejected["message"]
    stored = replayed_identifiers(aviso_short, f"{aviso_short.prefix}n")
    assert stored[nulls[0]["path"]]["expver"] == "0001"
    assert stored[nulls[1]["path"]]["stream"] == "wave"
