"""What makes ``aviso-server serve`` on the JetStream backend refuse to start, and token auth.

The settings checks that only apply once the backend is selected run at backend
construction, not in ``aviso-server config check``, so every case is a real
``aviso-server serve`` child.
The refusals run four at a time (one module fixture starts and reaps them all); each test
then asserts on its own case: non-zero exit, HTTP port never served, the key named.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.host.backends.jetstream_support import (
    Case,
    Refusal,
    aviso_serving,
    document,
    notify_ok,
    replay,
    serve_refusals,
    unique,
)
from tests.support.nats import NatsServer, nats_server
from tests.support.process import free_port

# Child processes (see tests/conftest.py); the refusals' fixture starts some twenty, four at
# a time, which a loaded machine can stretch past the default two minutes.
pytestmark = [pytest.mark.heavy, pytest.mark.timeout(600)]

TOKEN = "s3cret-nats-token"
WRONG = "not-the-token"
# Startup attempts are quick; the reconnect budget is finite (see the unlimited-reconnect bug).
QUICK = {
    "retry_attempts": 1,
    "timeout_seconds": 1,
    "reconnect_delay_ms": 100,
    "max_reconnect_attempts": 1,
}
UNREACHABLE = {"retry_attempts": 2, "timeout_seconds": 1, "reconnect_delay_ms": 100}

BACKEND_KEYS: dict[str, tuple[str, Any]] = {
    # case id: (key under notification_backend.jetstream, bad value)
    "timeout_seconds_0": ("timeout_seconds", 0),
    "retry_attempts_0": ("retry_attempts", 0),
    "reconnect_delay_ms_0": ("reconnect_delay_ms", 0),
    "publish_retry_attempts_0": ("publish_retry_attempts", 0),
    "publish_retry_base_delay_ms_0": ("publish_retry_base_delay_ms", 0),
    "storage_type_disk": ("storage_type", "disk"),
    "retention_policy_forever": ("retention_policy", "forever"),
    "discard_policy_oldest": ("discard_policy", "oldest"),
    "nats_url_blank": ("nats_url", "  "),
}
# (An unparsable backend retention_time is covered by tests/conformance/test_config_startup.py.)
POLICY_KEYS: dict[str, tuple[str, Any]] = {
    # case id: (key under notification_schema.<type>.storage_policy, bad value)
    "policy_retention_time_month": ("retention_time", "1mo"),
    "policy_max_size_lower_case_unit": ("max_size", "10m"),
    "policy_max_messages_zero": ("max_messages", 0),
}


class _ClosingListener:
    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.1)
        self.port = self.socket.getsockname()[1]
        self.accepted = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            connection.close()


@contextmanager
def closing_listener() -> Iterator[_ClosingListener]:
    listener = _ClosingListener()
    thread = threading.Thread(target=listener.run, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        listener.stop.set()
        thread.join(5)
        listener.socket.close()


def _policy_schema(key: str, value: Any) -> dict[str, Any]:
    return {
        "archive": {
            "topic": {"base": "archive", "key_order": ["n"]},
            "identifier": {"n": {"type": "StringHandler", "required": True}},
            "storage_policy": {key: value},
        }
    }


@pytest.fixture(scope="module")
def token_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    with nats_server(tmp_path_factory.mktemp("nats-token"), token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def listener() -> Iterator[_ClosingListener]:
    with closing_listener() as server:
        yield server


@pytest.fixture(scope="module")
def refusals(
    module_nats: NatsServer,
    token_nats: NatsServer,
    listener: _ClosingListener,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Refusal]:
    """Every configuration that must be refused, started concurrently.

    The NATS server is reachable (and token-free) in the key cases, so the key is the only
    thing wrong with them."""
    nowhere = f"nats://127.0.0.1:{free_port()}"
    cases = {
        # First, so that its bounded wait overlaps the others.
        "unreachable_unlimited_reconnects": Case(
            document(nowhere, jetstream={**UNREACHABLE, "max_reconnect_attempts": 0}),
            # 2 attempts of at most 1 s each, plus process start-up beside ten other starts
            # on a busy machine; unlimited reconnects would never end at all.
            timeout=90.0,
        ),
        "unreachable": Case(
            document(nowhere, jetstream={**UNREACHABLE, "max_reconnect_attempts": 5})
        ),
        "closing_listener": Case(
            document(
                f"nats://127.0.0.1:{listener.port}",
                jetstream={**UNREACHABLE, "max_reconnect_attempts": 3},
            )
        ),
        "token_missing": Case(document(token_nats.url, jetstream=QUICK)),
        "token_wrong": Case(document(token_nats.url, jetstream={**QUICK, "token": WRONG})),
        "token_config_wrong_env_right": Case(
            document(token_nats.url, jetstream={**QUICK, "token": WRONG}), {"NATS_TOKEN": TOKEN}
        ),
    }
    for case, (key, value) in BACKEND_KEYS.items():
        cases[case] = Case(document(module_nats.url, jetstream={key: value}))
    for case, (key, value) in POLICY_KEYS.items():
        cases[case] = Case(document(module_nats.url, schemas=_policy_schema(key, value)))
    return serve_refusals(tmp_path_factory.mktemp("refusals"), cases)


# -- unreachable or wrong nats_url --------------------------------------------------------


def test_unreachable_nats_fails_startup_after_the_configured_attempts(
    refusals: dict[str, Refusal],
) -> None:
    failure = refusals["unreachable"]
    failure.assert_refused("could not connect to NATS at nats://127.0.0.1:", "after 2 attempts")
    assert "NATS connection attempt 1/2" in failure.output, failure.output
    assert "NATS connection attempt 2/2" in failure.output, failure.output
    assert "attempt 3/" not in failure.output, failure.output


def test_unreachable_nats_fails_startup_even_when_reconnects_are_unlimited(
    refusals: dict[str, Refusal],
) -> None:
    refusals["unreachable_unlimited_reconnects"].assert_refused(
        "could not connect to NATS", "after 2 attempts"
    )


def test_startup_makes_exactly_retry_attempts_connection_attempts(
    refusals: dict[str, Refusal], listener: _ClosingListener
) -> None:
    """A TCP listener that closes every connection counts how often startup knocks
    (retry_attempts 2, max_reconnect_attempts 3)."""
    refusals["closing_listener"].assert_refused("could not connect to NATS", "after 2 attempts")
    assert listener.accepted == 2, f"{listener.accepted} TCP connections for 2 attempts"


# -- token ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["token_missing", "token_wrong", "token_config_wrong_env_right"])
def test_wrong_or_missing_token_fails_startup(refusals: dict[str, Refusal], case: str) -> None:
    failure = refusals[case]
    failure.assert_refused("could not connect to NATS", "Authorization Violation")
    assert WRONG not in failure.output and TOKEN not in failure.output, "token leaked to logs"


@pytest.mark.parametrize(
    ("options", "env"),
    [
        # The configured token is used, and wins over a wrong NATS_TOKEN.
        pytest.param({"token": TOKEN}, {"NATS_TOKEN": WRONG}, id="config_wins_over_env"),
        pytest.param({}, {"NATS_TOKEN": TOKEN}, id="NATS_TOKEN"),
    ],
)
def test_matching_token_starts_and_stores(
    token_nats: NatsServer, tmp_path: Path, options: dict[str, Any], env: dict[str, str] | None
) -> None:
    event_type = unique("tok")
    config = document(token_nats.url, jetstream={**QUICK, **options})
    with aviso_serving(tmp_path, config, env=env) as server, server.client() as client:
        notify_ok(client, event_type, {"n": 1}, {"ok": True})
        assert [e["data"]["payload"] for e in replay(client, event_type, {"n": "*"})] == [
            {"ok": True}
        ]


# -- invalid settings and literals --------------------------------------------------------


@pytest.mark.parametrize("case", sorted(BACKEND_KEYS))
def test_invalid_backend_setting_fails_startup_naming_the_key(
    refusals: dict[str, Refusal], case: str
) -> None:
    key, _ = BACKEND_KEYS[case]
    refusals[case].assert_refused(f"notification_backend.jetstream.{key}")


@pytest.mark.parametrize("case", sorted(POLICY_KEYS))
def test_invalid_storage_policy_literal_fails_startup_naming_the_key(
    refusals: dict[str, Refusal], case: str
) -> None:
    key, _ = POLICY_KEYS[case]
    refusals[case].assert_refused(f"notification_schema.archive.storage_policy.{key}")
