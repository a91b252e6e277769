"""A running ``aviso listen`` across an aviso-server restart: the server closes its streams
with ``server_shutdown``, pyaviso reconnects with backoff once the server is back on the same
port. On JetStream (``--embedded-nats``) it resumes from its cursor; an in-memory server's
history and sequences start over after a restart (by design), so there the listener's
cursor is beyond the stream's end: the gap is reported, and the listener receives what is
published after it came back.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.client.support import CONFIG, client_env, json_lines, listening, payloads, publish
from tests.support.process import (
    aviso_command,
    clean_environment,
    free_port,
    stop,
    wait_until_healthy,
)

SHUTDOWN_GRACE = 30.0
RECONNECT_WAIT = 90.0
"""pyaviso's reconnect backoff grows to 30 s while the server is down."""
SERVER_CLOSED = '"event.name":"client.connection.server_closed"'


@contextmanager
def _serving(config: Path, port: int, store: Path | None, log: Path) -> Iterator[str]:
    """``aviso-server serve [--embedded-nats STORE]`` on ``port``; stopped (SIGTERM) at the
    end, which closes its streams with ``server_shutdown``."""
    embedded = ("--embedded-nats", str(store)) if store is not None else ()
    with log.open("ab") as stderr:
        process = subprocess.Popen(
            aviso_command("serve", "--config", str(config), "--port", str(port), *embedded),
            stderr=stderr,
            stdout=subprocess.DEVNULL,
            env=clean_environment(),
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, process)
        yield url
    finally:
        stop(process, SHUTDOWN_GRACE)


def test_a_listener_survives_a_server_restart_and_resumes_from_its_cursor(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    document = copy.deepcopy(CONFIG)
    # JetStream keeps only the newest message per subject unless told otherwise.
    document["notification_schema"]["feed"]["storage_policy"] = {"allow_duplicates": True}
    config.write_text(json.dumps(document))
    store, log, port = tmp_path / "nats", tmp_path / "server.log", free_port()
    env = client_env(tmp_path / "home", f"http://127.0.0.1:{port}")
    args = ("-v", "--event", "feed", "--identifier", "name=r", "--state-file", str(tmp_path / "s"))
    with listening(env, *args) as listener:
        with _serving(config, port, store, log) as url:
            listener.subscribed(1)
            publish(url, "r", 2)
            before = listener.notifications(2)
        # Stopped gracefully with the listener attached: its stream ended with server_shutdown.
        listener.wait_stderr(SERVER_CLOSED)
        with _serving(config, port, store, log) as url:
            publish(url, "r", 2, start=2)  # before the listener is back: it replays them
            listener.subscribed(2, timeout=RECONNECT_WAIT)
            after = listener.notifications(2)
            publish(url, "r", 1, start=4)
            live = listener.notifications(1)
            assert listener.stop() == 0
        left = listener.no_more_notifications()
    assert payloads(before + after + live) == [0, 1, 2, 3, 4]
    sequences = [n["sequence"] for n in before + after + live]
    assert sequences == list(range(sequences[0], sequences[0] + 5))
    assert left == []


def test_an_in_memory_server_shutdown_makes_the_listener_come_back(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(CONFIG))
    log, port = tmp_path / "server.log", free_port()
    env = client_env(tmp_path / "home", f"http://127.0.0.1:{port}")
    args = ("-v", "--event", "feed", "--identifier", "name=m", "--no-state-store")
    with listening(env, *args) as listener:
        with _serving(config, port, None, log) as url:
            listener.subscribed(1)
            publish(url, "m", 2)
            assert payloads(listener.notifications(2)) == [0, 1]
        listener.wait_stderr(SERVER_CLOSED)
        with _serving(config, port, None, log) as url:
            listener.subscribed(2, timeout=RECONNECT_WAIT)
            publish(url, "m", 2, start=2)
            assert payloads(listener.notifications(2)) == [2, 3]
            assert listener.stop() == 0
        assert listener.no_more_notifications() == []
    # It resumed from 3, beyond the restarted stream's end: the gap is reported, not silent.
    records = json_lines(log.read_text())
    gaps = [record for record in records if record.get("event_name") == "stream.history_gap"]
    assert [(gap["requested"], gap["first_available"]) for gap in gaps] == [(3, 1)]
