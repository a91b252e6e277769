"""``aviso-server spark publish`` / ``aviso-server spark history`` through click's runner, in
this process (the commands find the test session's Spark session active and use it, leaving
it running),
and ``aviso-server spark publish --follow`` as a child process stopped by a signal.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from pyspark.sql import SparkSession

from aviso_host.cli import main
from aviso_spark import deadletter
from aviso_spark.example_data import IDENTIFIER_COLUMNS, dissemination_rows, write
from tests.spark.checks import EVENT_TYPE, LiveWatch, drop_file, replayed_row_ids
from tests.spark.conftest import AvisoSetup
from tests.support.process import KILL_WAIT, aviso_command, clean_environment, stop

# How long a child's Spark may take to start, run a micro-batch or stop: a JVM and Python
# workers of its own, which at a load average of 20+ on two cores took over a minute for the
# first batch. A bound for a child that hangs, not an expectation of speed.
CHILD_SPARK_SECONDS = 600.0

# The child's own Spark driver: loopback only, no UI port.
CHILD_SPARK_ENVIRONMENT = {
    "PYSPARK_PYTHON": sys.executable,
    "SPARK_LOCAL_IP": "127.0.0.1",
    "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.enabled=false --conf spark.driver.host=127.0.0.1 "
    "--conf spark.driver.bindAddress=127.0.0.1 pyspark-shell",
}


def run_cli(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def publish_args(
    aviso_setup: AvisoSetup, input_path: Path, file_format: str, dead: Path
) -> list[str]:
    return [
        "spark",
        "publish",
        "--input",
        str(input_path),
        "--format",
        file_format,
        "--event-type",
        EVENT_TYPE,
        "--config",
        str(aviso_setup.config_file),
        "--sink",
        "backend",
        "--identifier-columns",
        ",".join(IDENTIFIER_COLUMNS),
        "--payload-columns",
        "path,size",
        "--deadletter",
        str(dead),
        "--max-rejected-fraction",
        "0.1",
    ]


def test_publish_a_parquet_folder_with_a_progress_line_per_stage(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(200, 0.05, seed=21, destination_prefix=aviso.prefix)
    source = tmp_path / "input"
    source.mkdir()
    write(data.rows[:120], source / "part-a.parquet", "parquet")
    write(data.rows[120:], source / "part-b.parquet", "parquet")

    result = run_cli(*publish_args(aviso, source, "parquet", tmp_path / "dead"))

    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["published"] == 190 and summary["rejected"] == 10
    assert any(
        line.startswith("stage ") and " finished: " in line for line in result.stderr.splitlines()
    )
    assert set(replayed_row_ids(aviso)) == set(range(200)) - data.invalid_ids
    dead = deadletter.read(tmp_path / "dead")
    assert sorted(int(record["row"]["row_id"]) for record in dead) == sorted(data.invalid_ids)


def test_publish_with_a_checkpoint_publishes_each_file_once(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(150, 0.0, seed=22, destination_prefix=aviso.prefix)
    source = tmp_path / "input"
    source.mkdir()
    write(data.rows[:100], source / "first.csv", "csv")
    args = [
        *publish_args(aviso, source, "csv", tmp_path / "dead"),
        "--checkpoint",
        str(tmp_path / "cp"),
    ]

    first = run_cli(*args)
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout.splitlines()[-1])["published"] == 100
    assert "batch 0 finished: 100 input rows" in first.stderr

    write(data.rows[100:], source / "second.csv", "csv")
    second = run_cli(*args)
    assert second.exit_code == 0, second.output
    totals = json.loads(second.stdout.splitlines()[-1])
    assert totals["published"] == 150  # over both runs: the first file was not read again
    assert "batch 1 finished: 50 input rows" in second.stderr
    assert replayed_row_ids(aviso) == {row_id: 1 for row_id in range(150)}


def test_history_prints_json_lines_or_writes_a_folder(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(50, 0.0, seed=23, destination_prefix=aviso.prefix)
    source = tmp_path / "rows.json"
    write(data.rows, source, "json")
    assert run_cli(*publish_args(aviso, source, "json", tmp_path / "dead")).exit_code == 0
    query = [
        "spark",
        "history",
        "--url",
        aviso.server.url,
        "--event-type",
        EVENT_TYPE,
        "--identifier",
        f"destination={aviso.prefix}0",
        "--identifier",
        "class=od",
    ]

    printed = run_cli(*query)
    assert printed.exit_code == 0, printed.output
    records = [json.loads(line) for line in printed.stdout.splitlines()]
    assert len(records) == 10  # rows 0, 5, 10, ... went to destination <prefix>0
    assert {record["destination"] for record in records} == {f"{aviso.prefix}0"}
    # RFC 3339 in UTC, as the server's own CloudEvent times.
    rfc3339_utc = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
    assert all(rfc3339_utc.fullmatch(record["time"]) for record in records), records[0]
    assert sorted(json.loads(record["payload"])["path"] for record in records) == sorted(
        row["path"] for row in data.rows if row["destination"] == f"{aviso.prefix}0"
    )

    written = run_cli(*query, "--output", str(tmp_path / "history"), "--format", "parquet")
    assert written.exit_code == 0, written.output
    assert spark.read.parquet(str(tmp_path / "history")).count() == 10


def test_too_many_rejected_rows_fail_the_command_with_the_reason(
    spark: SparkSession, aviso: AvisoSetup, tmp_path: Path
) -> None:
    data = dissemination_rows(40, 0.25, seed=24, destination_prefix=aviso.prefix)
    write(data.rows, tmp_path / "rows.csv", "csv")

    result = run_cli(*publish_args(aviso, tmp_path / "rows.csv", "csv", tmp_path / "dead"))

    assert result.exit_code == 1
    assert "AvisoJobFailed: 10 of 40 rows rejected (25.00%)" in result.stderr, result.stderr
    assert deadletter.summary(tmp_path / "dead")["status"] == "failed"
    # The summary is the last stdout line of a failed job too.
    printed = json.loads(result.stdout.splitlines()[-1])
    assert (printed["status"], printed["stored"], printed["rejected"]) == ("failed", 30, 10)
    assert len(deadletter.read(tmp_path / "dead")) == 10


def test_aviso_serve_commands_do_not_import_pyspark() -> None:
    # serve discovers every plugin, the spark and load commands included.
    probe = (
        "import sys, click; from aviso_host.cli import main; "
        "assert 'spark' in main.list_commands(click.Context(main)); "
        "from aviso_host.plugins import discover; assert 'spark' in discover().commands; "
        "assert 'pyspark' not in sys.modules and 'locust' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)


class StderrLines:
    """A child's stderr read by a thread; ``wait_for(text)`` blocks until a line has it."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        self.stream = process.stderr
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._ended = False
        self._thread = threading.Thread(target=self._read, name="child-stderr", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.stream:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, text: str) -> None:
        """Until a line has ``text`` or the child closes its stderr (exits)."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: self._ended or any(text in line for line in self.lines),
                CHILD_SPARK_SECONDS,
            )
            assert found and any(text in line for line in self.lines), "\n".join(self.lines)

    def joined(self) -> list[str]:
        """Every line, once the child closed its stderr (its JVM, which shares it, may end
        after the child)."""
        self._thread.join(CHILD_SPARK_SECONDS)
        assert not self._thread.is_alive()
        return self.lines


# Bounds the child's three waits together (start and first batch, second batch, stop).
@pytest.mark.timeout(int(4 * CHILD_SPARK_SECONDS))
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_follow_publishes_dropped_files_until_a_signal_stops_it_cleanly(
    aviso: AvisoSetup, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    data = dissemination_rows(200, 0.0, seed=25, destination_prefix=aviso.prefix)
    for row in data.rows:
        row["destination"] = aviso.prefix  # one destination: one watch sees every row
    inbox, staging = tmp_path / "inbox", tmp_path / "staging"
    inbox.mkdir()
    staging.mkdir()
    # The command infers the stream's schema from the files present when it starts.
    drop_file(inbox, staging, "first.csv", data.rows[:100])
    args = [
        *publish_args(aviso, inbox, "csv", tmp_path / "dead"),
        "--checkpoint",
        str(tmp_path / "cp"),
        "--follow",
        "--master",
        "local[2]",
    ]
    watch_body = {
        "event_type": EVENT_TYPE,
        "identifier": {"destination": aviso.prefix, "class": "od"},
    }

    with (
        LiveWatch(aviso.server.url, watch_body) as watch,
        subprocess.Popen(
            aviso_command(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_environment(CHILD_SPARK_ENVIRONMENT),
        ) as process,
    ):
        try:
            stderr = StderrLines(process)
            stderr.wait_for("batch 0 finished: 100 input rows")
            assert watch.wait_for(100) == Counter(range(100))
            drop_file(inbox, staging, "second.csv", data.rows[100:])
            # Signalled once the batch is committed, not merely published.
            stderr.wait_for("batch 1 finished: 100 input rows")
            assert watch.wait_for(200) == Counter(range(200))
            process.send_signal(stop_signal)
            process.wait(CHILD_SPARK_SECONDS)
            lines = stderr.joined()
            assert process.stdout is not None
            stdout = process.stdout.read()
        finally:
            stop(process, KILL_WAIT)

    assert process.returncode == 0, "\n".join(lines)
    progress = [line for line in lines if line.startswith("batch ")]
    assert progress == [
        "batch 0 finished: 100 input rows",
        "batch 1 finished: 100 input rows",
    ]
    summary = json.loads(stdout.splitlines()[-1])
    assert (summary["batches"], summary["published"], summary["status"]) == (2, 200, "succeeded")
    assert replayed_row_ids(aviso, [aviso.prefix]) == Counter(range(200))
