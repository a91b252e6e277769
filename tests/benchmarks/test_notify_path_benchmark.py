"""``python -m benchmarks.notify_path`` runs end to end against its three servers (speed is
the benchmark's to print, never asserted here). A thousand requests a round keep every
server's CPU time well above the kernel's 10 ms accounting tick."""

from __future__ import annotations

from tests.benchmarks.support import figures, run_benchmark


def test_small_run_prints_every_figure() -> None:
    done = run_benchmark("notify_path", "--requests", "1000")
    assert done.returncode == 0, done.stdout + done.stderr
    printed = figures(done)
    for server in ("notify", "bare", "raw"):
        assert printed[f"{server}_rps"] > 0 and printed[f"{server}_cpu_us"] > 0, printed
    assert {"notify_bare_ratio", "notify_raw_ratio", "notify_bare_cpu_ratio"} <= set(printed)
    assert done.stdout.count("    round ") == 3 and "load average" in done.stdout
