"""Locust's reported latency of a watch event includes its delivery, not just the headers.

For ``stream=True`` requests locust itself only times the response headers. One watcher
opens its stream; the publisher waits a known delay before its first notification. The
figure locust reports for that notification (``watch: first notification``, from locust's
own stats CSV) must include the delay, while the header time locust measured for the same
request does not; the per-notification ``watch: delivery`` latency is measured from the
publisher's stamp, so it excludes the delay. One ~700-byte notification on an otherwise
quiet stream is also what a reader that waits for a full read buffer would never hand over.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

# Only looked up, never imported: importing locust monkey-patches this process for gevent.
if importlib.util.find_spec("locust") is None:
    pytest.skip("locust is not installed", allow_module_level=True)

from aviso_loadtests.run import aviso_config
from tests.support.process import aviso_process

DELAY_S = 3.0


def locust_stats(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as handle:
        return {row["Name"]: row for row in csv.DictReader(handle)}


def test_reported_watch_latency_includes_delivery_time(tmp_path: Path) -> None:
    config = tmp_path / "aviso.yaml"
    config.write_text(aviso_config("in_memory", None))
    with aviso_process(config, tmp_path / "aviso.log") as (url, _):
        spec = {
            "label": "probe",
            "scenario": "watch",
            "host": url,
            "users": 1,
            "spawn_rate": 100,
            "duration": DELAY_S + 3,
            "watch_rate": 0.1,  # one notification in the run: the delayed one
            "publish_delay": DELAY_S,
            "out_dir": str(tmp_path),
        }
        spec_path = tmp_path / "spec.json"
        spec_path.write_text(json.dumps(spec))
        done = subprocess.run(
            [sys.executable, "-m", "aviso_loadtests.child", str(spec_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr[-3000:]

    stats = locust_stats(tmp_path / "probe_stats.csv")
    headers = stats["watch: headers"]
    first = stats["watch: first notification"]
    delivery = stats["watch: delivery"]
    assert int(headers["Request Count"]) == 1 and int(first["Request Count"]) == 1
    assert int(delivery["Request Count"]) == 1
    assert all(int(row["Failure Count"]) == 0 for row in stats.values())

    header_ms = float(headers["Min Response Time"])
    first_ms = float(first["Min Response Time"])
    delivery_ms = float(delivery["Min Response Time"])
    # The stream opened just after the publisher started its delay, so the notification
    # arrived about DELAY_S after the request; the headers came at once.
    assert first_ms >= (DELAY_S - 0.5) * 1000, (header_ms, first_ms)
    assert first_ms - header_ms >= (DELAY_S - 1.0) * 1000, (header_ms, first_ms)
    # Publish-to-receive is timed from the publisher's stamp, not from the watch request.
    assert 0 <= delivery_ms < first_ms - (DELAY_S - 1.0) * 1000

    # The exact samples the summary uses agree with locust's own figures.
    samples = json.loads((tmp_path / "probe_samples.json").read_text())["metrics"]
    assert samples["watch: first notification"]["ms"] == [pytest.approx(first_ms, abs=0.01)]
