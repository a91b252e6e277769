"""``python -m benchmarks.core`` runs its parts by name and keys every figure by its part
(speed is the benchmark's to print, never asserted here)."""

from __future__ import annotations

from tests.benchmarks.support import figures, run_benchmark


def test_one_part_runs_and_keys_its_figures_by_part() -> None:
    done = run_benchmark("core", "--quick", "--only", "replay")
    assert done.returncode == 0, done.stdout + done.stderr
    printed = figures(done)
    assert list(printed) == ["replay.replay_eps"] and printed["replay.replay_eps"] > 0


def test_an_unknown_part_is_refused_before_anything_runs() -> None:
    done = run_benchmark("core", "--only", "replay,fanout")
    assert done.returncode == 2 and "unknown parts: fanout" in done.stderr
    assert "replay" not in done.stdout
