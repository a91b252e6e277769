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
