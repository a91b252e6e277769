"""A notify answered 200 is durable.

Several concurrent clients publish; ``aviso-server serve`` is killed with SIGKILL while requests are
in flight; nats-server is then stopped (SIGTERM, or SIGKILL) and restarted on the same port
and store; a fresh ``aviso-server serve`` replays from sequence 1. Every notification that was
answered 200 must be there exactly once; nothing that was never sent may appear.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.host.backends.jetstream_support import (
    NOTIFY,
    Aviso,
    aviso_serving,
    document,
    notify_ok,
    replay,
    write_config,
)
from tests.support.nats import NatsServer

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

CLIENTS = 5
PER_CLIENT = 100
KILL_AFTER = 300  # acknowledgements seen before the kill -9
PUBLISH_TIMEOUT = 90.0

LEDGER = {
    "ledger": {
        "payload": {"required": True},
        "topic": {"base": "ledger", "key_order": ["client", "n"]},
        "identifier": {
            "client": {"type": "StringHandler", "required": True},
            "n": {"type": "StringHandler", "required": True},
        },
        # Every stored copy stays visible, so a duplicate publish cannot hide.
        "storage_policy": {"allow_duplicates": True},
    }
}


@dataclass
class Outcome:
    acknowledged: set[tuple[str, str]] = field(default_factory=set)
    attempted: set[tuple[str, str]] = field(default_factory=set)
    other_statuses: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    enough: threading.Event = field(default_factory=threading.Event)


def _client(outcome: Outcome, url: str, client_id: str) -> None:
    with httpx.Client(base_url=url, timeout=httpx.Timeout(20.0)) as http:
        for n in range(PER_CLIENT):
            key = (client_id, str(n))
            body = {
                "event_type": "ledger",
                "identifier": {"client": client_id, "n": str(n)},
                "payload": {"client": client_id, "n": str(n)},
            }
            with outcome.lock:
                outcome.attempted.add(key)
            try:
                response = http.post(NOTIFY, content=json.dumps(body))
            except httpx.TransportError:
                return  # the server is gone: this one is unknown, the rest never sent
            with outcome.lock:
                if response.status_code == 200:
                    outcome.acknowledged.add(key)
                    if len(outcome.acknowledged) >= KILL_AFTER:
                        outcome.enough.set()
                else:
                    outcome.other_statuses.append(response.status_code)


def publish_then_kill(server: Aviso) -> Outcome:
    """Publish from CLIENTS threads; SIGKILL the server once KILL_AFTER were acknowledged."""
    outcome = Outcome()
    threads = [
        threading.Thread(target=_client, args=(outcome, server.url, f"c{index}"), daemon=True)
        for index in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    try:
        assert outcome.enough.wait(PUBLISH_TIMEOUT), (
            f"only {len(outcome.acknowledged)} acknowledged; statuses {outcome.other_statuses}"
        )
    finally:
        server.kill()
        for thread in threads:
            thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    return outcome


def _key(event: dict[str, Any]) -> tuple[str, str]:
    identifier = event["data"]["identifier"]
    assert event["data"]["payload"] == identifier, event
    return identifier["client"], identifier["n"]


@pytest.mark.parametrize("nats_stop", ["SIGTERM", "SIGKILL"])
def test_acknowledged_notifications_survive_kill_9_and_nats_restart(
    own_nats: NatsServer, tmp_path: Path, nats_stop: str
) -> None:
    config = write_config(tmp_path, document(own_nats.url, schemas=LEDGER))
    with aviso_serving(tmp_path, config) as first:
        outcome = publish_then_kill(first)
        assert first.process.returncode == -9
    assert outcome.other_statuses == [], outcome.other_statuses
    assert len(outcome.acknowledged) >= KILL_AFTER

    own_nats.stop(kill=nats_stop == "SIGKILL")
    own_nats.start()

    with aviso_serving(tmp_path, config) as second, second.client() as client:
        events = replay(client, "ledger", {"client": "*", "n": "*"}, timeout=60)
        keys = [_key(event) for event in events]
        duplicated = sorted({key for key in keys if keys.count(key) > 1})
        assert duplicated == [], f"stored more than once: {duplicated[:10]}"
        missing = sorted(outcome.acknowledged - set(keys))
        assert missing == [], f"{len(missing)} acknowledged but lost: {missing[:10]}"
        assert set(keys) <= outcome.attempted, sorted(set(keys) - outcome.attempted)[:10]
        assert [event["sequence"] for event in events] == list(range(1, len(events) + 1))

        # The restarted pair keeps numbering where it was.
        notify_ok(client, "ledger", {"client": "after", "n": "0"}, {"client": "after", "n": "0"})
        last = replay(client, "ledger", {"client": "after", "n": "*"})
        assert [event["sequence"] for event in last] == [len(events) + 1]
