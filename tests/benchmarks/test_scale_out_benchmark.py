"""``python -m benchmarks.scale_out --quick`` runs every part end to end on a small scale:
every figure is printed, and every notification reaches every watch exactly once (speed is the
benchmark's to print, never asserted here)."""

from __future__ import annotations

import math

from benchmarks.scale_out import QUICK, expected_keys
from tests.benchmarks.support import figures, run_benchmark


def test_quick_run_prints_every_figure_and_loses_no_delivery() -> None:
    done = run_benchmark("scale_out", "--quick", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = figures(done)
    assert sorted(printed) == sorted(expected_keys(QUICK)), printed
    assert all(math.isfinite(value) for value in printed.values()), printed
    rates = [value for key, value in printed.items() if key.endswith("_rps")]
    assert rates and min(rates) > 0, printed
    missing = {key: value for key, value in printed.items() if key.endswith("_missing")}
    assert missing and set(missing.values()) == {0}, missing
    duplicated = {key: value for key, value in printed.items() if key.endswith("_duplicated")}
    assert duplicated and set(duplicated.values()) == {0}, duplicated
    assert "machine: " in done.stdout
    assert "skipped" not in done.stdout and "failed" not in done.stdout, done.stdout
    for line in ("notify, 2 workers / 1 worker:", "raw nats-py from 2 process(es):"):
        assert line in done.stdout, done.stdout


def test_a_sweep_without_one_worker_is_refused_before_anything_runs() -> None:
    done = run_benchmark("scale_out", "--workers", "2,4")
    assert done.returncode == 2 and "--workers must include 1" in done.stderr
    assert "machine:" not in done.stdout
