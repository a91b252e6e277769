"""``python -m benchmarks.notify_layers`` runs end to end, swapping each layer for its
stand-in and back, and prints every layer's figure (speed is never asserted here)."""

from __future__ import annotations

from tests.benchmarks.support import figures, run_benchmark


def test_small_run_prints_every_layer() -> None:
    done = run_benchmark("notify_layers", "--requests", "300", "--rounds", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    printed = figures(done)
    layers = {"app", "harness", "edge", "route", "parse", "plan", "publish"}
    assert layers <= set(printed), printed
    # Every variant answered each call 200 (the benchmark's call checks it) with a cost; the
    # layers are differences of them, which noise may take below zero on a run this short.
    for variant in ("app", "no_parse", "no_plan", "no_publish", "no_steps", "harness"):
        assert printed[variant] > 0, printed
    assert "load average" in done.stdout
