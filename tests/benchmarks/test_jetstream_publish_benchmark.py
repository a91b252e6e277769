"""``python -m benchmarks.jetstream_publish`` runs end to end against its nats-server (speed is
the benchmark's to print, never asserted here)."""

from __future__ import annotations

from tests.benchmarks.support import figures, run_benchmark


def test_small_run_prints_every_figure() -> None:
    done = run_benchmark("jetstream_publish", "--publishes", "500")
    assert done.returncode == 0, done.stdout + done.stderr
    printed = figures(done)
    assert printed["publish_acked_cpu_us"] > 0 and printed["js_publish_cpu_us"] > 0, printed
    assert printed["cpu_ratio"] > 0, printed
    assert done.stdout.count("    round ") == 3 and "load average" in done.stdout
