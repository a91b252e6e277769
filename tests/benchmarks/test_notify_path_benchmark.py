"""``python -m benchmarks.notify_path`` runs end to end against its three servers and writes
its rounds (speed is the benchmark's to print, never asserted here). A thousand requests a
round keep every server's CPU time well above the kernel's 10 ms accounting tick."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmarks.support import notify_figures, run_benchmark


def test_small_run_prints_every_figure_and_writes_its_rounds(tmp_path: Path) -> None:
    done = run_benchmark(
        "notify_path", "--requests", "1000", "--rounds", "3", "--results-dir", str(tmp_path)
    )
    notify_figures(done, rounds=3)
    (written,) = tmp_path.glob("notify_path-*.json")
    document = json.loads(written.read_text())
    assert [entry["round"] for entry in document["rounds"]] == [1, 2, 3]
    assert all(entry["notify"]["cpu_us_per_request"] > 0 for entry in document["rounds"])
    assert document["summary"]["notify_bare_cpu_ratio"]["rounds"] == 3
    assert document["machine"]["load_average"]


def test_fewer_than_three_rounds_are_refused() -> None:
    done = run_benchmark("notify_path", "--rounds", "2")
    assert done.returncode == 2 and "at least 3" in done.stderr
