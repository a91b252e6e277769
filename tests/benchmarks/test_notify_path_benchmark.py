"""``python -m benchmarks.notify_path`` runs end to end against its three servers (speed is
the benchmark's to print, never asserted here). A thousand requests a round keep every
server's CPU time well above the kernel's 10 ms accounting tick."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_small_run_prints_every_figure() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.notify_path", "--requests", "1000"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    for server in ("notify", "bare", "raw"):
        assert figures[f"{server}_rps"] > 0 and figures[f"{server}_cpu_us"] > 0, figures
    assert {"notify_bare_ratio", "notify_raw_ratio", "notify_bare_cpu_ratio"} <= set(figures)
    assert done.stdout.count("    round ") == 3 and "load average" in done.stdout
