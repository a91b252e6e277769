"""``python -m benchmarks.notify_app`` runs end to end, each app in its own process, and writes
its rounds (speed is the benchmark's to print, never asserted here)."""

from __future__ import annotations

from tests.benchmarks.support import notify_figures, run_benchmark


def test_small_run_prints_every_figure() -> None:
    notify_figures(run_benchmark("notify_app", "--requests", "300", "--rounds", "3"), rounds=3)
