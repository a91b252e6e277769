"""``python -m benchmarks.notify_app`` runs end to end, each app in its own process, and writes
its rounds (speed is the benchmark's to print, never asserted here)."""

from __future__ import annotations

from tests.benchmarks.support import figures, run_benchmark


def test_small_run_prints_every_figure() -> None:
    done = run_benchmark("notify_app", "--requests", "300", "--rounds", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    printed = figures(done)
    for app in ("notify", "bare", "raw"):
        assert printed[f"{app}_cpu_us"] > 0, printed
    assert {"notify_bare_cpu_ratio", "notify_raw_cpu_ratio"} <= set(printed)
    assert done.stdout.count("    round ") == 3 and "load average" in done.stdout
