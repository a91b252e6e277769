"""``python -m benchmarks.webhook_delivery`` runs end to end against a real server and its
receiver (speed is the benchmark's to print, never asserted here)."""

from __future__ import annotations

import pytest

from tests.benchmarks.support import figures, run_benchmark

pytestmark = pytest.mark.heavy


def test_a_quick_round_prints_every_figure() -> None:
    done = run_benchmark("webhook_delivery", "--quick", "--rounds", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    printed = figures(done)
    for side in ("aviso", "bare"):
        assert printed[f"{side}_deliveries_per_s"] > 0, printed
        assert 0 < printed[f"{side}_p50_ms"] <= printed[f"{side}_p99_ms"], printed
    assert printed["aviso_cpu_us_per_delivery"] > 0
    # No retry before its schedule (a timer may fire a millisecond early).
    assert printed["aviso_retry_earliest"] > -0.01
    assert "round 1:" in done.stdout
