"""Running a benchmark module the way a user does, for the smoke tests of this folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(module: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.<module> ARGS`` from the checkout's root, output captured."""
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def figures(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The figures a benchmark prints as JSON on its last line."""
    return json.loads(done.stdout.strip().splitlines()[-1])
