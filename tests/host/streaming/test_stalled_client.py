"""A client that opens a watch and never reads must not make the server's memory grow.

The stalled stream's live queue is bounded (here 1,024 records, the in-memory backend's
minimum); once it fills, the server disconnects that client and frees the queue. Without
the bound, 50,000 notifications of ~2 KiB queued for the stalled client would add
~115 MB; the stated bound is 48 MB of RSS growth.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest

from tests.support.pipelined import post_many, request_bytes
from tests.support.process import aviso_process
from tests.support.raw_http import unread_connection

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

NOTIFICATIONS = 50_000
RSS_GROWTH_BOUND = 48 * 1024 * 1024
PAD = "x" * 2048

CONFIG = """
application: {host: 127.0.0.1, port: 0}
notification_backend:
  kind: in_memory
  in_memory: {max_history_per_topic: 1, max_topics: 1000}
notification_schema:
  feed:
    topic: {base: feed, key_order: [name]}
    identifier:
      name: {type: StringHandler, required: true}
"""
WATCH = {"event_type": "feed", "identifier": {"name": "x"}}


def _notification(n: int) -> bytes:
    body = {**WATCH, "payload": {"n": n, "pad": PAD}}
    return request_bytes("/api/v1/notification", body)


def test_stalled_watch_is_disconnected_and_memory_stays_bounded(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    log = tmp_path / "server.log"
    with aviso_process(config, log) as (url, process):
        port = int(url.rsplit(":", 1)[1])
        server = psutil.Process(process.pid)
        warm_up = asyncio.run(post_many(port, 2_000, _notification))
        assert warm_up == {200: 2_000}
        stalled = unread_connection(port, request_bytes("/api/v1/watch", WATCH))
        try:
            baseline = server.memory_info().rss
            statuses = asyncio.run(post_many(port, NOTIFICATIONS, _notification))
            growth = server.memory_info().rss - baseline
        finally:
            stalled.close()
    assert statuses == {200: NOTIFICATIONS}
    assert growth < RSS_GROWTH_BOUND, f"RSS grew by {growth / 1e6:.1f} MB"
    assert "stream.backpressure.disconnect" in log.read_text()
