"""A real cluster: ``spark-submit --master local-cluster[2,1,1024]`` (a standalone master and
two workers, each executor its own JVM with its own Python workers) runs the writer, the
partitioned reader and the streaming source, with a third-party field handler and a
third-party sink shipped to the executors with ``--py-files``, as the README documents."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pyspark
import pytest
import yaml

from aviso_spark import deadletter
from aviso_spark.example_data import IDENTIFIER_COLUMNS, dissemination_rows
from aviso_spark.replay import ReplayRequest, latest_sequence
from tests.spark.conftest import ROOT, dissemination_document
from tests.spark.test_spark_plugins_and_auth import COLOUR_PLUGIN, PAINT
from tests.support.nats import NatsServer
from tests.support.process import CLI_TIMEOUT, clean_environment, install_into
from tests.support.server import running_server

SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"
SINK_PLUGIN = ROOT / "tests" / "fixtures" / "aviso_jsonl_sink"
JOB = Path(__file__).parent / "cluster_job.py"
MASTER = "local-cluster[2,1,1024]"


def test_writer_reader_and_stream_on_a_cluster_with_shipped_plugins(
    nats_session: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    install_into(site, COLOUR_PLUGIN)
    install_into(site, SINK_PLUGIN)
    plugins = shutil.make_archive(str(tmp_path / "plugins"), "zip", site)
    monkeypatch.syspath_prepend(str(site))  # the server in this process validates colours too
    document = dissemination_document(nats_session.url)
    document["notification_schema"]["paint_batch"] = PAINT
    config = tmp_path / "aviso.yaml"
    config.write_text(yaml.safe_dump(document))
    destination = f"c{uuid.uuid4().hex[:8]}"
    data = dissemination_rows(120, 0.0, seed=61, destination_prefix=destination)
    for row in data.rows:
        row["destination"] = destination
    paint = [["#A1B", "1"], ["crimson", "2"], ["#abcdef", "3"], ["#12", "4"]]

    with running_server(document) as server:
        request = ReplayRequest(
            server.url, "dissemination", {"destination": destination, "class": "od"}
        )
        settings = {
            "out": str(tmp_path / "out"),
            "url": server.url,
            "config": str(config),
            "paint_rows": paint,
            "rows": data.rows,
            "identifier_columns": ",".join(IDENTIFIER_COLUMNS),
            "destination": destination,
            "from_id": str(latest_sequence(request) + 1),
        }
        (tmp_path / "settings.json").write_text(json.dumps(settings))
        command = [
            str(SPARK_SUBMIT),
            "--master",
            MASTER,
            "--py-files",
            plugins,
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.driver.bindAddress=127.0.0.1",
            str(JOB),
            str(tmp_path / "settings.json"),
        ]
        environment = {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        result = subprocess.run(
            command,
            env=clean_environment(environment),
            capture_output=True,
            text=True,
            timeout=8 * CLI_TIMEOUT,
            cwd=tmp_path,
        )
    assert result.returncode == 0, result.stderr[-4000:]
    seen = json.loads(result.stdout.splitlines()[-1])

    assert seen["master"] == MASTER and seen["executors"] == 2
    assert seen["read_partitions"] == 4
    assert len(seen["read_sequences"]) == 120
    assert seen["read_sequences"] == sorted(set(seen["read_sequences"]))
    assert seen["streamed_sequences"] == seen["read_sequences"]
    # The shipped handler canonicalised and rejected on the executors; the shipped sink
    # wrote from executor Python workers, not from the driver.
    out = tmp_path / "out"
    records = [
        json.loads(line)
        for path in (out / "jsonl").glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert sorted(record["identifier"]["colour"] for record in records) == ["#A1B", "#abcdef"]
    assert all(
        "#aa11bb" in record["canonical"] or "#abcdef" in record["canonical"] for record in records
    )
    assert seen["driver_pid"] not in {record["pid"] for record in records}
    rejected = deadletter.read(out / "paint-dead")
    assert sorted(record["row"]["colour"] for record in rejected) == ["#12", "crimson"]
    assert deadletter.summary(out / "dead")["published"] == 120
