"""The reader and the streaming source on Spark Connect (``remote("local[2]")``): a client
with no Spark context, in a process of its own (connect_job.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from aviso_spark.example_data import dissemination_rows
from tests.spark.checks import EVENT_TYPE, notify_rows
from tests.spark.conftest import dissemination_document
from tests.support.process import CLI_TIMEOUT, clean_environment
from tests.support.server import running_server

pytest.importorskip("pyspark.sql.connect.session", reason="Spark Connect is not installed")
for module in ("pandas", "grpc_status", "zstandard"):
    pytest.importorskip(module, reason="Spark Connect's client needs pyspark[connect]")

JOB = Path(__file__).parent / "connect_job.py"
ROWS = 45
LIMIT = 10
pytestmark = pytest.mark.timeout(10 * CLI_TIMEOUT)


def test_reads_pushdown_partitions_and_admission_control_on_spark_connect(
    tmp_path: Path,
) -> None:
    document = dissemination_document("nats://127.0.0.1:1")
    document["notification_backend"] = {"kind": "in_memory"}
    rows = dissemination_rows(ROWS, 0.0, seed=17, destination_prefix="c").rows
    with running_server(document) as server:
        with httpx.Client(base_url=server.url) as client:
            notify_rows(client, rows)
        settings = {
            "url": server.url,
            "event_type": EVENT_TYPE,
            "destination": "c2",
            "limit": LIMIT,
            "out": str(tmp_path / "out"),
        }
        (tmp_path / "settings.json").write_text(json.dumps(settings))
        environment = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        result = subprocess.run(
            [sys.executable, str(JOB), str(tmp_path / "settings.json")],
            env=clean_environment(environment),
            capture_output=True,
            text=True,
            timeout=8 * CLI_TIMEOUT,
            cwd=tmp_path,
        )
    assert result.returncode == 0, result.stderr[-4000:]
    seen = json.loads(result.stdout.splitlines()[-1])

    assert seen["pushdown"] == "true"
    assert seen["partitions_from_master"] == 2  # the N of local[2]: no context to ask
    assert seen["partitions_from_setting"] == 3
    assert (seen["dtypes"]["step"], seen["dtypes"]["date"]) == ("bigint", "date")
    assert seen["all"] == list(range(1, ROWS + 1))
    expected = [
        index + 1
        for index, row in enumerate(rows)
        if row["destination"] == "c2" and row["step"] >= 10
    ]
    assert seen["where"] == expected
    assert "identifier.destination' = 'd-*'" in seen["wildcard_error"]
    assert seen["streamed"] == list(range(1, ROWS + 1))
    assert max(seen["batch_rows"]) == LIMIT and sum(seen["batch_rows"]) == ROWS
