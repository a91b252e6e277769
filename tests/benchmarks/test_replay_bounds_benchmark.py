"""``python -m benchmarks.replay_bounds`` runs end to end on a small store (speed is the
benchmark's to print, never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_small_run_prints_every_figure() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.replay_bounds", "--count", "2000"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(value > 0 for value in figures.values()), figures
    assert "(a) to_id at the middle" in done.stdout and "(c) to_date resolution" in done.stdout
