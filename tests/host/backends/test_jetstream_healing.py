"""The NATS connection heals.

nats-py closes its client for good after a protocol error (nats-server drops a connection
that sends a subject over its 4,096-byte control line) and, with a limited budget, after its
reconnect attempts ran out. With the default settings aviso then opens a new client and
moves its live feeds onto it, so the same process keeps serving and an open watch continues
without gap or duplicate. ``GET /ready`` follows the connection; ``GET /health`` does not.

Each test runs ``aviso-server serve`` against its own nats-server with the reconnect
settings left at their defaults except where a test says otherwise. The identifier limit is
raised so that an oversized value reaches NATS instead of being refused with 400.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from aviso_builtins.backends.jetstream.options import parse_options
from tests.host.backends.jetstream_support import (
    Aviso,
    Watch,
    assert_storage_failed,
    aviso_serving,
    document,
    notify,
    notify_ok,
    poll,
    replay,
    unique,
    watching,
)
from tests.support.nats import NatsServer
from tests.support.sse import Stream

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

HUGE = "x" * 5_000  # over nats-server's default max_control_line (4,096 bytes)
EVERYTHING = {"n": "*"}
RECOVERY_TIMEOUT = 30.0
RESUME_TIMEOUT = 60.0
NATS_PY_DEFAULT_RECONNECTS = 60

SCHEMAS = {
    "heal": {
        "payload": {"required": False},
        "topic": {"base": "heal", "key_order": ["n"]},
        "identifier": {"n": {"type": "StringHandler", "required": True}},
        "storage_policy": {"allow_duplicates": True},
    }
}


def _config(nats_url: str, **jetstream: Any) -> dict[str, Any]:
    """Default reconnect settings (``max_reconnect_attempts`` unset) unless given."""
    config = document(nats_url, jetstream=jetstream, schemas=SCHEMAS)
    options = config["notification_backend"]["jetstream"]
    if "max_reconnect_attempts" not in jetstream:
        del options["max_reconnect_attempts"]
    if "reconnect_delay_ms" not in jetstream:
        del options["reconnect_delay_ms"]
    config["limits"] = {"max_identifier_value_bytes": 100_000, "max_topic_bytes": 100_000}
    return config


def _n(event: dict[str, Any]) -> str:
    return event["data"]["identifier"]["n"]


def _ready(client: httpx.Client) -> tuple[int, dict[str, Any]]:
    answer = client.get("/ready")
    return answer.status_code, answer.json()


def _assert_ready(client: httpx.Client) -> None:
    assert _ready(client) == (200, {"status": "ready", "backend_connected": True})


def _not_ready(client: httpx.Client) -> bool:
    status, body = _ready(client)
    if status == 200:
        return False
    assert (status, body) == (503, {"status": "not_ready", "backend_connected": False})
    return True


def _notify_until_ok(client: httpx.Client, n: str, refused: list[str]) -> str:
    """Notify ``n`` (renamed per attempt) until one answers 200; every other answer must be
    the documented 500, and its name is recorded as refused."""

    def attempt() -> bool:
        name = f"{n}-{len(refused)}"
        response = notify(client, "heal", {"n": name})
        if response.status_code == 200:
            acknowledged.append(name)
            return True
        assert_storage_failed(response)
        refused.append(name)
        return False

    acknowledged: list[str] = []
    poll(attempt, RECOVERY_TIMEOUT, "notify to answer 200 again")
    return acknowledged[0]


def _assert_watch_has(watch: Watch, expected: list[str]) -> None:
    received = watch.collect(len(expected), timeout=RESUME_TIMEOUT)
    sequences = [event["sequence"] for event in received]
    assert sequences == sorted(set(sequences)), sequences  # in order, no duplicate
    assert [_n(event) for event in received] == expected


def _replay_fails(client: httpx.Client, identifier: dict[str, Any]) -> None:
    """A replay the backend cannot serve ends with one SSE ``error`` (or a 5xx) quickly."""
    body = {"event_type": "heal", "identifier": identifier, "from_id": "1"}
    with client.stream("POST", "/api/v1/replay", content=json.dumps(body)) as response:
        if response.status_code != 200:
            response.read()
            assert response.status_code == 500, response.text
            return
        names = [event.name for event in Stream(response).events()]
    assert names.count("error") == 1, names
    assert "replay" not in names, names


def _reconnect_attempts(server: Aviso) -> int:
    """Failed reconnect attempts so far: nats-py reports each one to the error callback."""
    return server.log().count("NATS error: ")


def _survives_refused_requests(server: Aviso, http: httpx.Client, watch: Watch) -> None:
    """Three requests nats-server answers by dropping the connection, each followed by a
    notify that must succeed; the open ``watch`` receives every acknowledged one once."""
    acknowledged = ["first"]
    notify_ok(http, "heal", {"n": "first"})

    # A notify whose subject nats-server refuses: it drops the connection.
    assert_storage_failed(notify(http, "heal", {"n": HUGE}))
    notify_ok(http, "heal", {"n": "after-notify"})
    acknowledged.append("after-notify")

    # A replay whose filter goes into the consumer-create subject does the same.
    _replay_fails(http, {"n": HUGE})
    notify_ok(http, "heal", {"n": "after-replay"})
    acknowledged.append("after-replay")

    # And so does a wipe of a stream with an oversized name.
    wiped = http.request("DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": "s" * 5_000})
    assert wiped.status_code < 600  # answered, whatever the code
    notify_ok(http, "heal", {"n": "after-wipe"})
    acknowledged.append("after-wipe")

    _assert_watch_has(watch, acknowledged)
    _assert_ready(http)
    history = [_n(event) for event in replay(http, "heal", EVERYTHING)]
    assert history == acknowledged
    assert "opening a new one" in server.log()


def test_a_request_nats_refuses_leaves_the_connection_working(
    own_nats: NatsServer, tmp_path: Path
) -> None:
    """Also a watch whose feed has delivered nothing yet over history stored before it:
    moved to the new client, it neither re-sends that history nor misses what follows."""
    idle = unique("idle")
    with (
        aviso_serving(tmp_path, _config(own_nats.url)) as server,
        server.client() as http,
        server.client() as watch_http,
        server.client() as idle_http,
    ):
        for n in ("old-0", "old-1"):
            notify_ok(http, idle, {"n": n})
        with (
            watching(watch_http, "heal", EVERYTHING) as watch,
            watching(idle_http, idle, EVERYTHING) as idle_watch,
        ):
            _survives_refused_requests(server, http, watch)
            notify_ok(http, idle, {"n": "new"})
            assert [_n(event) for event in idle_watch.collect(1)] == ["new"]
            # Anything re-sent would have arrived before the new one: nothing did.
            assert len(idle_watch.notifications()) == 1


def test_a_burst_of_refused_requests_leaves_every_watch_intact(
    own_nats: NatsServer, tmp_path: Path
) -> None:
    """Refused requests sent together drop one new client after the other, some of them
    while the live feeds are being moved onto it: every watch still continues once, in
    order, and the service serves afterwards."""
    bases = [unique("burst") for _ in range(4)]
    with (
        aviso_serving(tmp_path, _config(own_nats.url)) as server,
        server.client() as http,
        ExitStack() as stack,
    ):
        watches = []
        for base in bases:
            notify_ok(http, base, {"n": "before-watch"})
            client = stack.enter_context(server.client())
            watches.append(stack.enter_context(watching(client, base, EVERYTHING)))
        notify_ok(http, bases[0], {"n": "first"})

        def refused(k: int) -> int:
            with server.client() as own:
                return notify(own, "heal", {"n": f"{k}{HUGE}"}).status_code

        with ThreadPoolExecutor(max_workers=6) as pool:
            statuses = list(pool.map(refused, range(6)))
        assert set(statuses) == {500}, statuses

        for base in bases:
            _notify_until_ok_on(http, base)
        for base, watch in zip(bases, watches, strict=True):
            expected = ["first", "after"] if base == bases[0] else ["after"]
            received = watch.collect(len(expected), timeout=RESUME_TIMEOUT)
            assert [_n(event) for event in received] == expected, base
        _assert_ready(http)


def _notify_until_ok_on(http: httpx.Client, base: str) -> None:
    """Notify ``after`` on ``base``; a 500 is allowed while the last new client settles, and
    nothing answered 500 may be stored (checked by the watches receiving ``after`` once)."""

    def attempt() -> bool:
        response = notify(http, base, {"n": "after"})
        if response.status_code == 200:
            return True
        assert_storage_failed(response)
        return False

    poll(attempt, RECOVERY_TIMEOUT, f"notify on {base} to answer 200")


def test_a_long_outage_with_default_settings_heals(own_nats: NatsServer, tmp_path: Path) -> None:
    """More reconnect attempts than nats-py's default budget (60) happen during the outage,
    then the same process serves again and the open watch resumes without gap or
    duplicate."""
    config = _config(own_nats.url, reconnect_delay_ms=20)
    idle = unique("idle")
    with (
        aviso_serving(tmp_path, config) as server,
        server.client() as http,
        server.client() as watch_http,
        server.client() as idle_http,
        ExitStack() as stack,
    ):
        notify_ok(http, idle, {"n": "old"})
        watch = stack.enter_context(watching(watch_http, "heal", EVERYTHING))
        idle_watch = stack.enter_context(watching(idle_http, idle, EVERYTHING))
        acknowledged = ["pre-0", "pre-1"]
        for n in acknowledged:
            notify_ok(http, "heal", {"n": n})
        _assert_ready(http)
        _assert_watch_has(watch, acknowledged)

        own_nats.stop(kill=True)
        poll(lambda: _not_ready(http), 15, "/ready to answer 503")
        assert http.get("/health").json() == {"status": "ok"}
        refused: list[str] = []
        assert_storage_failed(notify(http, "heal", {"n": "down"}))
        refused.append("down")
        poll(
            lambda: _reconnect_attempts(server) > NATS_PY_DEFAULT_RECONNECTS + 10,
            60,
            "more reconnect attempts than nats-py's default budget",
        )
        assert _not_ready(http)
        assert http.get("/health").status_code == 200

        own_nats.start()
        acknowledged.append(_notify_until_ok(http, "back", refused))
        for k in range(3):
            notify_ok(http, "heal", {"n": f"post-{k}"})
            acknowledged.append(f"post-{k}")
        poll(lambda: not _not_ready(http), RECOVERY_TIMEOUT, "/ready to answer 200 again")

        _assert_watch_has(watch, acknowledged)
        assert not watch.ended
        notify_ok(http, idle, {"n": "new"})
        assert [_n(event) for event in idle_watch.collect(1)] == ["new"]
        history = [_n(event) for event in replay(http, "heal", EVERYTHING)]
        assert history == acknowledged
        assert not set(history) & set(refused), "a notification answered 500 was stored"


def test_a_positive_max_reconnect_attempts_gives_up_for_good(
    own_nats: NatsServer, tmp_path: Path
) -> None:
    config = _config(own_nats.url, max_reconnect_attempts=2, reconnect_delay_ms=50)
    with (
        aviso_serving(tmp_path, config) as server,
        server.client() as http,
        server.client() as watch_http,
        watching(watch_http, "heal", EVERYTHING) as watch,
    ):
        notify_ok(http, "heal", {"n": "before"})
        own_nats.stop(kill=True)
        poll(lambda: "closed for good" in server.log(), 30, "aviso to give up")
        # Every open watch ends; the process stays alive but not ready.
        watch.until(lambda event: event.name in ("connection-closing", "error"), 15)
        own_nats.start()
        assert _not_ready(http)
        assert http.get("/health").status_code == 200
        assert_storage_failed(notify(http, "heal", {"n": "after"}))
        assert "opening a new one" not in server.log()


@pytest.mark.parametrize(
    ("raw", "reconnects", "subscription_attempts"),
    [
        pytest.param({}, None, 5, id="unset"),
        pytest.param({"max_reconnect_attempts": None}, None, 5, id="null"),
        pytest.param({"max_reconnect_attempts": 0}, 0, 1, id="zero"),
        pytest.param({"max_reconnect_attempts": 3}, 3, 3, id="three"),
    ],
)
def test_max_reconnect_attempts_defaults_to_unlimited_and_bounds_subscription_attempts(
    raw: dict[str, Any], reconnects: int | None, subscription_attempts: int
) -> None:
    options = parse_options(raw, environ={})
    assert options.max_reconnect_attempts == reconnects
    assert options.subscription_attempts == subscription_attempts
