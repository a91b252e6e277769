"""The backpressure counters (docs/metrics.md): a slow-consumer disconnect and the
notifications the ``drop`` policy skipped, scraped from ``aviso-server serve``'s metrics listener.

The frozen client and the publishing rounds are those of ``test_backpressure``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.conformance.metrics_support import Scrape, parse
from tests.host.streaming.test_backpressure import (
    CONFIG,
    _frozen_watch,
    _parse,
    _publish_until_logged,
    _read_events,
    _read_until,
)
from tests.support.process import aviso_process, free_port

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

WATCH_ROUTE = {"route": "/api/v1/watch"}


def _config(tmp_path: Path, policy: str) -> tuple[Path, str]:
    """The backpressure configuration plus a metrics listener; returns it and its URL."""
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(policy=policy) + f"metrics: {{enabled: true, port: {port}}}\n")
    return config, f"http://127.0.0.1:{port}/metrics"


def _scrape(url: str) -> Scrape:
    response = httpx.get(url, timeout=10.0)
    assert response.status_code == 200
    return parse(response.text)


def test_a_slow_consumer_disconnect_is_counted(tmp_path: Path) -> None:
    config, metrics = _config(tmp_path, "disconnect")
    log = tmp_path / "server.log"
    with aviso_process(config, log) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        name = "aviso_sse_slow_consumer_disconnects_total"
        assert _scrape(metrics).value(name, **WATCH_ROUTE) == 0
        frozen = _frozen_watch(port)
        asyncio.run(_publish_until_logged(port, log, "stream.backpressure.disconnect"))
        try:
            events = _read_events(frozen)  # to the end: the stream has closed
        finally:
            frozen.close()
        assert events[-1]["data"]["cause"] == "slow_consumer"
        scrape = _scrape(metrics)
    assert scrape.value(name, **WATCH_ROUTE) == 1
    assert scrape.value("aviso_sse_connections_active", event_type="feed", **WATCH_ROUTE) == 0


def test_dropped_notifications_are_counted(tmp_path: Path) -> None:
    config, metrics = _config(tmp_path, "drop")
    log = tmp_path / "server.log"
    with aviso_process(config, log) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        frozen = _frozen_watch(port)
        try:
            asyncio.run(_publish_until_logged(port, log, "stream.backpressure.dropping"))
            raw = _read_until(frozen, b"notifications_skipped")
        finally:
            frozen.close()
        scrape = _scrape(metrics)
    skipped = [e["data"] for e in _parse(raw) if e["event"] == "notifications-skipped"]
    assert len(skipped) == 1
    name = "aviso_sse_notifications_skipped_total"
    assert scrape.value(name, **WATCH_ROUTE) == skipped[0]["skipped"]
