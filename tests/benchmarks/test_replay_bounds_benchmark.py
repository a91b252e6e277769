"""``python -m benchmarks.replay_bounds`` runs end to end on a small store (speed is the
benchmark's to print, never asserted here)."""

from __future__ import annotations

from tests.benchmarks.support import figures, run_benchmark


def test_small_run_prints_every_figure() -> None:
    done = run_benchmark("replay_bounds", "--count", "2000")
    assert done.returncode == 0, done.stdout + done.stderr
    printed = figures(done)
    assert all(value > 0 for value in printed.values()), printed
    assert "(a) to_id at the middle" in done.stdout and "(c) to_date resolution" in done.stdout
