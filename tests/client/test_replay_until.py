"""``aviso replay --until`` and ``listen(until=)`` (the server's ``to_id`` /
``to_date``): an inclusive end point as an id or a date, and a
reconnect mid-replay that keeps the first ``end_sequence`` (sent as ``to_id``).

Fails on a branch without ``to_id`` / ``to_date`` (the server answers 400 UNKNOWN_FIELD).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pyaviso

from tests.client.support import json_lines, payloads, publish, run, server_event
from tests.conformance.auth_support import document
from tests.support.server import RunningServer, running_server
from tests.support.tokens import bearer, mint

CLOCK_WAIT = 2.0
"""Bound on waiting for the wall clock to pass a whole second (dates are sent in seconds)."""


def _replay(env: dict[str, str], name: str, *window: str) -> list[dict]:
    done = run(env, "--json", "replay", *window, "--event", "feed", "--identifier", f"name={name}")
    assert done.returncode == 0, done.stderr
    return json_lines(done.stdout)


def test_until_an_id_is_inclusive(
    env: dict[str, str], name: str, feed_server: RunningServer
) -> None:
    publish(feed_server.url, name, 5)
    sequences = [n["sequence"] for n in _replay(env, name, "--from", "0")]
    assert payloads(
        _replay(env, name, "--from", str(sequences[0]), "--until", str(sequences[2]))
    ) == [1, 2]
    # from == until - 1: exactly one notification (the server gets from_id == to_id).
    one = _replay(env, name, "--from", str(sequences[3]), "--until", str(sequences[4]))
    assert payloads(one) == [4]
    refused = run(
        env,
        "replay",
        "--from",
        "5",
        "--until",
        "5",
        "--event",
        "feed",
        "--identifier",
        f"name={name}",
    )
    assert refused.returncode != 0  # pyaviso refuses an end not after the start, locally


def test_until_a_date_ends_with_the_last_one_stored_at_or_before_it(
    env: dict[str, str], name: str, feed_server: RunningServer
) -> None:
    publish(feed_server.url, name, 2)
    # The end date is the next whole second after the first batch; the second batch is
    # stored after it (the wait is for the clock itself, bounded).
    boundary = int(time.time()) + 1
    deadline = time.monotonic() + CLOCK_WAIT
    while time.time() <= boundary and time.monotonic() < deadline:
        time.sleep(0.05)
    assert time.time() > boundary
    publish(feed_server.url, name, 2, start=2)
    until = datetime.fromtimestamp(boundary, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert payloads(_replay(env, name, "--from", "0", "--until", until)) == [0, 1]
    with pyaviso.AvisoClient(base_url=feed_server.url, auth=pyaviso.Anonymous()) as client:
        got = client.listen(
            "feed", filter={"name": name}, start_from=0, until=until, mode="replay_only"
        )
        assert [n.payload["n"] for n in got] == [0, 1]


def test_a_replay_reconnected_mid_window_keeps_its_end(tmp_path: Path) -> None:
    """The first stream ends before ``replay_completed`` (its token expires): pyaviso
    reconnects with ``from_id`` = cursor + 1 and ``to_id`` = the first ``end_sequence``, and
    stops at the end although more was published meanwhile."""
    doc = document("trusted_proxy")
    # One notification a second: the 3 s token expires inside the 6-notification window.
    doc["watch_endpoint"] = {"replay_batch_size": 1, "replay_batch_delay_ms": 1000}
    credentials = tmp_path / "credentials.yaml"
    admin = bearer(mint("admin-user", "localrealm", ["admin"]))
    with (
        running_server(doc) as server,
        httpx.Client(base_url=server.url, headers=admin) as producer,
        server_event("stream.auth.expired") as expired,
    ):

        def send(n: int) -> None:
            body = {"event_type": "protected_feed", "identifier": {"name": "n1"}, "payload": n}
            assert producer.post("/api/v1/notification", json=body).status_code == 200

        for n in range(8):
            send(n)
        credentials.write_text(json.dumps({"bearer": {"token": mint("reader-user", exp_offset=3)}}))
        with pyaviso.AvisoClient(
            base_url=server.url, auth=pyaviso.ConfigFile(credentials)
        ) as client:
            stream = client.listen(
                "protected_feed", filter={"name": "n1"}, start_from=0, until=6, mode="replay_only"
            )
            got = [next(stream).payload]
            # Renewed while the first stream still runs on the expiring token.
            credentials.write_text(json.dumps({"bearer": {"token": mint("reader-user")}}))
            for n in range(8, 10):
                send(n)
            got += [notification.payload for notification in stream]
        assert expired.is_set()
    assert got == [0, 1, 2, 3, 4, 5]
