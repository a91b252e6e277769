"""``python -m benchmarks.core`` runs its parts by name and keys every figure by its part
(speed is the benchmark's to print, never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_core(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.core", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_one_part_runs_and_keys_its_figures_by_part() -> None:
    done = run_core("--quick", "--only", "replay")
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(figures) == ["replay.replay_eps"] and figures["replay.replay_eps"] > 0


def test_an_unknown_part_is_refused_before_anything_runs() -> None:
    done = run_core("--only", "replay,fanout")
    assert done.returncode == 2 and "unknown parts: fanout" in done.stderr
    assert "replay" not in done.stdout
