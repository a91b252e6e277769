"""``python -m benchmarks.jetstream_publish`` runs end to end against its nats-server and
writes its rounds (speed is the benchmark's to print, never asserted here); the ceiling
publishes the message the JetStream backend publishes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from aviso_builtins.backends.jetstream.publisher import message_headers
from aviso_host.config import settings_from_document
from aviso_host.identifiers import plan_checked_notification
from aviso_host.plugins import discover
from aviso_host.schemas import SchemaCatalog
from benchmarks.core import CONFIG
from benchmarks.jetstream_publish import aviso_message
from tests.benchmarks.support import figures, run_benchmark


def test_small_run_prints_every_figure_and_writes_its_rounds(tmp_path: Path) -> None:
    done = run_benchmark(
        "jetstream_publish", "--publishes", "500", "--rounds", "3", "--results-dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    printed = figures(done)
    assert printed["ceiling_cpu_us"] > 0 and printed["js_publish_cpu_us"] > 0, printed
    assert printed["cpu_ratio"] > 0, printed
    assert done.stdout.count("    round ") == 3 and "load average" in done.stdout
    (written,) = tmp_path.glob("jetstream_publish-*.json")
    rounds = json.loads(written.read_text())["rounds"]
    assert all(entry["ceiling"]["cpu_us_per_publish"] > 0 for entry in rounds)


def test_the_ceiling_publishes_what_the_backend_publishes() -> None:
    registry = discover()
    settings = settings_from_document(yaml.safe_load(CONFIG), registry)
    catalog = SchemaCatalog(settings, registry.field_handlers)
    limits = settings.limits
    planned = plan_checked_notification(
        catalog.get("bench"),
        "bench",
        {"run": "rps", "step": 12},
        {"n": 12},
        limits.max_identifier_value_bytes,
        limits.max_topic_bytes,
        limits.max_payload_bytes,
    )
    sent = (planned.topic, planned.payload.encode(), message_headers(planned.metadata, "BENCH"))
    assert aviso_message(12, "BENCH", "rps") == sent
