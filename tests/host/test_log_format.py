"""``logging.format``: ``text`` gives one readable line per record, anything else JSON lines
(other values warn); access lines carry the client address; a watch is logged when it
opens."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aviso_host.config import settings_from_document
from aviso_host.logs import JsonLineFormatter, register_secrets
from aviso_host.plugins import discover
from tests.support.process import aviso_process
from tests.support.server import running_server
from tests.support.sse import Stream

CONFIG: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {"kind": "in_memory"},
    "notification_schema": {
        "feed": {
            "topic": {"base": "feed", "key_order": ["name"]},
            "identifier": {"name": {"type": "StringHandler", "required": True}},
        }
    },
}
SECRET = "a-secret-the-log-must-mask"


def _record(message: str, exc: BaseException | None = None, **fields: Any) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = logging.LogRecord("aviso", logging.WARNING, __file__, 1, message, None, exc_info)
    record.fields = {"event_name": "demo.event", **fields}
    return record


def test_text_is_one_readable_line_with_secrets_masked() -> None:
    register_secrets([SECRET])
    try:
        raise ValueError(f"broken\nacross lines {SECRET}")
    except ValueError as exc:
        record = _record(f"stream closed {SECRET}", exc, topic="feed.a", count=3, note="two words")
    line = JsonLineFormatter(text=True).format(record)
    assert "\n" not in line and SECRET not in line
    timestamp, level, rest = line.split(maxsplit=2)
    assert timestamp.endswith("Z") and level == "WARN"
    assert rest.startswith("stream closed [REDACTED] event_name=demo.event topic=feed.a count=3")
    assert ' note="two words" exception="Traceback' in rest
    # The same record as JSON, the default: the same members, the same masking.
    entry = json.loads(JsonLineFormatter().format(record))
    assert entry["topic"] == "feed.a" and entry["count"] == 3 and SECRET not in str(entry)


@pytest.mark.parametrize(
    ("written", "effective", "warning"),
    [
        ({"format": "text"}, "text", None),
        ({"format": "json"}, "json", None),
        ({}, "json", None),
        ({"format": "txt"}, "json", "'txt' is not a log format (did you mean 'text'?)"),
        ({"format": "pretty"}, "json", "'pretty' is not a log format (use 'json' or 'text')"),
    ],
)
def test_the_format_setting(written: dict[str, Any], effective: str, warning: str | None) -> None:
    settings = settings_from_document({**CONFIG, "logging": written}, discover())
    assert settings.logging.format == effective
    formats = [w for w in settings.warnings if w.startswith("logging.format")]
    if warning is None:
        assert formats == []
    else:
        assert formats == [f"logging.format: {warning}; logs stay JSON lines"]


@pytest.fixture
def server_log() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonLineFormatter())
    logger = logging.getLogger("aviso")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield buffer
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _events(buffer: io.StringIO, name: str) -> list[dict[str, Any]]:
    lines = (json.loads(line) for line in buffer.getvalue().splitlines())
    return [line for line in lines if line.get("event_name") == name]


def test_a_watch_is_logged_when_it_opens_and_requests_carry_the_client_address(
    server_log: io.StringIO,
) -> None:
    body = {"event_type": "feed", "identifier": {"name": "w"}}
    with running_server(CONFIG) as server, httpx.Client(base_url=server.url) as client:
        with client.stream("POST", "/api/v1/watch", json=body, timeout=10.0) as response:
            events = Stream(response).events()
            assert next(events).kind == "live-notification/connection_established"
            request_id = response.headers["x-request-id"]
            (opened,) = _events(server_log, "stream.opened")  # while the watch is open
            assert not [
                r for r in _events(server_log, "http.request") if r["path"] == "/api/v1/watch"
            ]
        replayed = client.post("/api/v1/replay", json={**body, "from_id": "4"})
    assert opened["request_id"] == request_id
    assert (opened["kind"], opened["topic"], opened["from_id"]) == ("watch", "feed.w", None)
    replay_opened = [r for r in _events(server_log, "stream.opened") if r["kind"] == "replay"]
    assert replay_opened[0]["from_id"] == 4
    requests = {r["request_id"]: r for r in _events(server_log, "http.request")}
    client_host, client_port = requests[replayed.headers["x-request-id"]]["client"].rsplit(":", 1)
    assert client_host == "127.0.0.1" and int(client_port) > 0
    assert requests[request_id]["client"].startswith("127.0.0.1:")


@pytest.mark.heavy  # a child process
def test_serve_with_the_text_format_writes_readable_lines(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({**CONFIG, "logging": {"level": "info", "format": "text"}}))
    log = tmp_path / "server.log"
    with aviso_process(config, log) as (url, _):
        assert httpx.get(f"{url}/health", timeout=10.0).status_code == 200
    lines = log.read_text().splitlines()
    assert lines and not [line for line in lines if line.startswith("{")], lines
    health = [line for line in lines if "event_name=http.request" in line and "/health" in line]
    assert " INFO  GET /health 200 " in health[-1] and " client=127.0.0.1:" in health[-1]
