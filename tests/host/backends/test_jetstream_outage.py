"""nats-server goes down under a running ``aviso-server serve`` and comes back.

While it is down: notify answers 500 NOTIFICATION_STORAGE_FAILED in the JSON error shape
(never 200), a replay reports an SSE ``error``, a new live watch is refused with 500, and an
open watch either reports an ``error`` or stays open. After nats-server restarts on the same
port and store, the same aviso process serves notify, watch and replay again, and a watch
that stayed open receives every notification acknowledged after recovery, in order, once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.js import JetStreamContext

from tests.host.backends.jetstream_support import (
    REPLAY,
    WATCH,
    Watch,
    assert_storage_failed,
    aviso_serving,
    document,
    notify,
    notify_ok,
    poll,
    replay,
    watching,
    with_jetstream,
)
from tests.support.nats import NatsServer
from tests.support.sse import Stream

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

RECOVERY_TIMEOUT = 30.0  # nats-server back -> notify answers 200 again
RESUME_TIMEOUT = 60.0  # the open watch delivers what was acknowledged after recovery
EVERYTHING = {"n": "*"}

SCHEMAS = {
    "outage": {
        "payload": {"required": False},
        "topic": {"base": "outage", "key_order": ["n"]},
        "identifier": {"n": {"type": "StringHandler", "required": True}},
        "storage_policy": {"allow_duplicates": True},
    }
}
FAST = {
    "reconnect_delay_ms": 200,
    "max_reconnect_attempts": 0,  # forever
    "publish_retry_attempts": 2,
    "publish_retry_base_delay_ms": 50,
}


def _n(event: dict[str, Any]) -> str:
    return event["data"]["identifier"]["n"]


def _watch_is_open_during_outage(watch: Watch) -> bool:
    """Read until two heartbeats arrived; ``False`` if the stream reported an ``error`` or
    ended instead."""
    deadline = time.monotonic() + 15
    heartbeats = 0
    while heartbeats < 2:
        assert time.monotonic() < deadline, [event.kind for event in watch.events]
        event = watch.next()
        if event is None or event.name == "connection-closing":
            return False
        if event.name == "error":
            assert event.data.get("request_id"), event.data
            return False
        assert "sequence" not in event.data, event  # nothing can be delivered meanwhile
        heartbeats += event.name == "heartbeat"
    return True


def _live_watch_refused(client: httpx.Client) -> bool:
    body = {"event_type": "outage", "identifier": EVERYTHING}
    with client.stream("POST", WATCH, content=json.dumps(body)) as response:
        if response.status_code == 200:
            return False  # not noticed yet: this watch is closed again at once
        response.read()
    assert response.status_code == 500, response.text
    assert response.json()["code"] == "SSE_STREAM_INITIALIZATION_FAILED", response.text
    return True


def _replay_reports_error(client: httpx.Client) -> None:
    body = {"event_type": "outage", "identifier": EVERYTHING, "from_id": "1"}
    with client.stream("POST", REPLAY, content=json.dumps(body)) as response:
        assert response.status_code == 200, response.read()
        events = list(Stream(response).events())
    names = [event.name for event in events]
    assert names.count("error") == 1, names
    assert "replay" not in names, names
    assert names[-1] == "connection-closing", names


def test_nats_outage_fails_notify_cleanly_and_the_same_process_recovers(
    own_nats: NatsServer, tmp_path: Path
) -> None:
    config = document(own_nats.url, jetstream=FAST, schemas=SCHEMAS)
    with (
        aviso_serving(tmp_path, config) as server,
        server.client() as http,
        server.client() as watch_http,
        watching(watch_http, "outage", EVERYTHING) as watch,
    ):
        for n in ("pre-0", "pre-1", "pre-2"):
            notify_ok(http, "outage", {"n": n})
        assert [_n(e) for e in watch.collect(3)] == ["pre-0", "pre-1", "pre-2"]

        # -- nats-server crashes -----------------------------------------------------------
        own_nats.stop(kill=True)
        # A new live-only watch is refused (500) once aviso has noticed the outage; from
        # then on no notify can reach a client-side buffer and be stored later.
        poll(lambda: _live_watch_refused(http), 10, "a new watch to be refused")
        refused = [f"down-{k}" for k in range(3)]
        for n in refused:
            assert_storage_failed(notify(http, "outage", {"n": n}))
        _replay_reports_error(http)
        stayed_open = _watch_is_open_during_outage(watch)

        # -- nats-server is back on the same port and store ---------------------------------
        own_nats.start()
        deadline = time.monotonic() + RECOVERY_TIMEOUT
        attempt = 0
        while True:
            n = f"rec-{attempt}"
            response = notify(http, "outage", {"n": n})
            if response.status_code == 200:
                break
            assert_storage_failed(response)  # never anything but 200 or this 500
            refused.append(n)
            assert time.monotonic() < deadline, "notify did not recover"
            attempt += 1
            time.sleep(0.1)
        acknowledged_after = [n]
        for k in range(5):
            notify_ok(http, "outage", {"n": f"post-{k}"})
            acknowledged_after.append(f"post-{k}")

        if stayed_open:
            received = watch.collect(3 + len(acknowledged_after), timeout=RESUME_TIMEOUT)
            after = received[3:]
            sequences = [event["sequence"] for event in received]
            assert sequences == sorted(set(sequences)), sequences  # in order, no duplicate
            assert [_n(e) for e in after] == acknowledged_after
        else:
            assert watch.ended or watch.events[-1].name == "error"

        # -- watch and replay work again in the same process ------------------------------
        with server.client() as again_http, watching(again_http, "outage", EVERYTHING) as again:
            notify_ok(http, "outage", {"n": "final"})
            acknowledged_after.append("final")
            assert [_n(e) for e in again.collect(1, timeout=RESUME_TIMEOUT)] == ["final"]

        history = replay(http, "outage", EVERYTHING)
        stored = [_n(e) for e in history]
        assert stored == ["pre-0", "pre-1", "pre-2", *acknowledged_after], stored
        assert not set(stored) & set(refused), "a notification answered 500 was stored"


def _push_deliveries(nats_url: str) -> list[int]:
    """How many messages each push consumer of the stream has delivered (the watches' ones:
    replays use pull consumers)."""

    async def delivered(js: JetStreamContext) -> list[int]:
        consumers = await js.consumers_info("OUTAGE")
        return [c.delivered.consumer_seq for c in consumers if c.config.deliver_subject]

    return with_jetstream(nats_url, delivered)


def test_a_watch_that_received_nothing_does_not_re_read_the_stream_after_an_outage(
    own_nats: NatsServer, tmp_path: Path
) -> None:
    """nats-server restarts while a watch's consumer has delivered nothing yet (everything
    stored precedes the watch): the consumer that replaces the lost one starts after that
    history, not at the stream's first message, and the watch receives what follows."""
    config = document(own_nats.url, jetstream=FAST, schemas=SCHEMAS)
    stored = 20
    with (
        aviso_serving(tmp_path, config) as server,
        server.client() as http,
        server.client() as watch_http,
    ):
        for k in range(stored):
            notify_ok(http, "outage", {"n": f"old-{k}"})
        with watching(watch_http, "outage", EVERYTHING) as watch:
            # The consumer starts with the newest stored message, which the watch drops.
            poll(lambda: _push_deliveries(own_nats.url) == [1], 10, "the consumer to start")
            own_nats.stop(kill=True)
            own_nats.start()
            deadline = time.monotonic() + RECOVERY_TIMEOUT
            attempt = 0
            while notify(http, "outage", {"n": f"rec-{attempt}"}).status_code != 200:
                assert time.monotonic() < deadline, "notify did not recover"
                attempt += 1
                time.sleep(0.1)
            received = watch.collect(1, timeout=RESUME_TIMEOUT)
            assert [_n(event) for event in received] == [f"rec-{attempt}"]

        counts = _push_deliveries(own_nats.url)
        assert counts, "the watch's consumer is gone"
        assert max(counts) < stored, counts
