"""``python -m benchmarks.spark_sink`` runs end to end: every row stored by both contenders.

Speed is the benchmark's to print, never asserted here. The 1,000,000-row run is ``slow``
(CI deselects it); the small one proves the script works on every run.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from tests.benchmarks.support import figures, run_benchmark

if importlib.util.find_spec("pyspark") is None:
    pytest.skip("the 'spark' extra is not installed", allow_module_level=True)

SMOKE_ROWS = 2_000
FULL_ROWS = 1_000_000
SMOKE_TIMEOUT = 600  # a Spark start on two shared cores
FULL_TIMEOUT = 3 * 3600


def run_spark_sink(rows: int, timeout: int) -> tuple[dict[str, Any], str]:
    """The figures (its last output line) and the whole output of one run."""
    done = run_benchmark("spark_sink", "--rows", str(rows), timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    return figures(done), done.stdout


def check(figures: dict[str, Any], output: str, rows: int) -> None:
    assert figures["raw_stored"] == figures["sink_stored"] == rows, figures
    assert figures["sink_summary"]["published"] == rows, figures
    assert figures["sink_summary"]["rejected"] == 0, figures
    assert figures["raw_per_second"] > 0 and figures["sink_per_second"] > 0, figures
    assert "ratio sink / raw" in output, output
    assert "(a) raw nats-py publish+ack" in output and "(b) Spark backend sink" in output, output


@pytest.mark.timeout(SMOKE_TIMEOUT + 60)
def test_small_benchmark_run_stores_every_row_through_both_paths() -> None:
    figures, output = run_spark_sink(SMOKE_ROWS, SMOKE_TIMEOUT)
    check(figures, output, SMOKE_ROWS)


@pytest.mark.slow
@pytest.mark.timeout(FULL_TIMEOUT + 60)
def test_one_million_rows_through_the_backend_sink() -> None:
    figures, output = run_spark_sink(FULL_ROWS, FULL_TIMEOUT)
    print(output)  # the figures, for whoever runs the slow checks
    check(figures, output, FULL_ROWS)
