"""CI smoke: ``aviso-server load run`` for 10 seconds per scenario, end to end on loopback.

Fails only on errors or zero throughput; timings are printed, never asserted.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

# Only looked up, never imported: importing locust monkey-patches this process for gevent.
if importlib.util.find_spec("locust") is None:
    pytest.skip("locust is not installed", allow_module_level=True)

from tests.support.process import aviso_command

SMOKE_SECONDS = "10"
CASES = {
    # The notify case also runs its bare Starlette baseline briefly (aviso_loadtests.bare_app).
    "notify": ["--users", "8", "--baseline-duration", "2"],
    "watch": ["--users", "50", "--no-baselines"],
    "replay": ["--users", "2", "--history", "1000", "--no-baselines"],
}
# Figures each scenario must have measured (beyond its main one): zero means it is broken.
REQUIRED = {
    "notify": ["notify"],
    "watch": ["notify (watched)", "watch: delivery", "watch: first event"],
    "replay": ["replay: end_of_stream", "replay: events"],
    "mixed": ["notify", "watch: delivery", "replay: end_of_stream"],
}


def load_run(tmp_path: Path, scenario: str, *args: str) -> dict:
    out = tmp_path / scenario
    done = subprocess.run(
        [
            *aviso_command("load", "run", scenario),
            *("--duration", SMOKE_SECONDS, "--output", str(out), *args),
        ],
        capture_output=True,
        text=True,
        timeout=150,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "aviso_stats.csv").exists() and (out / "summary.csv").exists()
    return summary


def check(summary: dict, scenario: str) -> None:
    assert summary["errors"] == 0
    assert summary["main_count"] > 0
    for run, figures in summary["figures"].items():
        assert all(f["failures"] == 0 for f in figures.values()), run
    aviso = summary["figures"]["aviso"]
    for name in REQUIRED[scenario]:
        assert aviso[name]["count"] > 0, name


@pytest.mark.parametrize("scenario", list(CASES))
def test_scenario_in_memory(tmp_path: Path, scenario: str) -> None:
    summary = load_run(tmp_path, scenario, *CASES[scenario])
    check(summary, scenario)
    if scenario == "notify":
        assert summary["figures"]["bare Starlette"]["notify"]["count"] > 0


def test_mixed_on_jetstream_with_every_baseline(tmp_path: Path) -> None:
    """The mixed profile's smoke: JetStream, the bare streaming app and the raw nats-py
    figures, all in one short run."""
    summary = load_run(
        tmp_path,
        "mixed",
        # Unpaced and as fast as the users can: the raw nats-py capacity figures apply.
        *("--backend", "jetstream", "--users", "10", "--rate", "0", "--replay-delay-ms", "0"),
        *("--history", "300", "--baseline-duration", "2"),
    )
    check(summary, "mixed")
    bare = summary["figures"]["bare Starlette"]
    assert bare["watch: delivery"]["count"] > 0 and bare["replay: events"]["count"] > 0
    assert summary["figures"]["raw nats-py publish+ack"]["notify"]["per_s"] > 0
    assert summary["figures"]["raw nats-py consume"]["watch: delivery"]["count"] > 0
    assert summary["figures"]["raw nats-py ordered read"]["replay: events"]["per_s"] > 0


def test_chart_is_drawn(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from aviso_loadtests import report

    figures = {"aviso": {"notify": report.Figure("aviso", "notify", 3, 0, 1.0, 1.0, 2.0, 3.0, 3.0)}}
    assert report.chart(tmp_path / "c.png", "t", {"aviso": {"notify": [1.0, 2.0, 3.0]}}, figures)
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
