"""Running a benchmark module the way a user does, for the smoke tests of this folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from benchmarks.results import RESULTS_DIR_VARIABLE

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(module: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.<module> ARGS`` from the checkout's root, output captured; raw
    results go to a temporary folder, never into the checkout."""
    with TemporaryDirectory() as results:
        return subprocess.run(
            [sys.executable, "-m", f"benchmarks.{module}", *args],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, RESULTS_DIR_VARIABLE: results},
        )


def figures(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The figures a benchmark prints as JSON on its last line."""
    return json.loads(done.stdout.strip().splitlines()[-1])


def notify_figures(done: subprocess.CompletedProcess[str], rounds: int) -> dict[str, Any]:
    """The figures of a run comparing notify with the bare and raw apps (``notify_app``,
    ``notify_path``), checked: the run succeeded, printed each of its ``rounds`` and the load
    average, a CPU figure for every app and the notify/bare and notify/raw ratios."""
    assert done.returncode == 0, done.stdout + done.stderr
    printed = figures(done)
    for app in ("notify", "bare", "raw"):
        assert printed[f"{app}_cpu_us"] > 0, printed
    assert {"notify_bare_cpu_ratio", "notify_raw_cpu_ratio"} <= set(printed)
    assert done.stdout.count("    round ") == rounds and "load average" in done.stdout
    return printed
