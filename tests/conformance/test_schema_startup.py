"""Startup validation of ``notification_schema``, against the real CLI.

Each broken configuration is a one-change variant of ``VALID`` (which the positive control
proves starts and serves). All variants run ``aviso-server serve`` concurrently in subprocesses
(once per module) and every test then checks its own outcome: non-zero exit, a message on
stderr naming the event type and the key at fault, and nothing listening on the port.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.process import aviso_command, aviso_process, clean_environment
from tests.support.sse import collect

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

RUN_TIMEOUT = 60.0

VALID: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {"kind": "in_memory", "in_memory": {"max_history_per_topic": 100}},
    "notification_schema": {
        "river_gauge": {
            "topic": {"base": "gauge", "key_order": ["basin", "station", "obs_date"]},
            "identifier": {
                "basin": {
                    "type": "EnumHandler",
                    "values": ["Danube", "Rhine", "Elbe"],
                    "required": True,
                },
                "station": {"type": "StringHandler", "max_length": 8, "required": True},
                "obs_date": {
                    "type": "DateHandler",
                    "canonical_format": "%Y%m%d",
                    "required": False,
                },
                "level_band": {"type": "IntHandler", "range": [0, 9], "required": False},
            },
            "payload": {"required": False},
        },
        # A DateHandler without canonical_format.
        "plain_date": {
            "topic": {"base": "plaindate", "key_order": ["tag", "day"]},
            "identifier": {
                "tag": {"type": "StringHandler", "required": True},
                "day": {"type": "DateHandler", "required": False},
            },
        },
    },
}

ECPDS = {
    "username": "svc",
    "password": "pw",
    "servers": ["http://127.0.0.1:9"],
    "match_key": "station",
}


_DELETE = object()


def _gauge(document: dict[str, Any]) -> dict[str, Any]:
    return document["notification_schema"]["river_gauge"]


def _collide(document: dict[str, Any]) -> None:
    # Bases differing only in case ("Gauge") start with a warning since the upstream
    # compatibility rule (aviso-server 0.7.1 accepted them; this case once used "Gauge"
    # and expected a refusal); the same base twice is still refused.
    document["notification_schema"]["gauge_upper"] = {
        "topic": {"base": "gauge", "key_order": []},
        "identifier": {},
    }


def _auth(block: dict[str, Any], with_ecpds: bool = False) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        _gauge(document)["auth"] = block
        if with_ecpds:
            document["ecpds"] = dict(ECPDS)

    return change


def _field(name: str, **changes: Any) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        definition = _gauge(document)["identifier"][name]
        for key, value in changes.items():
            if value is _DELETE:
                del definition[key]
            else:
                definition[key] = value

    return change


def _key_order(document: dict[str, Any]) -> None:
    _gauge(document)["topic"]["key_order"] = ["basin", "sensor"]


def _compression(document: dict[str, Any]) -> None:
    _gauge(document)["storage_policy"] = {"compression": True}


def _policy_without_topic(document: dict[str, Any]) -> None:
    document["notification_schema"]["no_topic"] = {
        "identifier": {"tag": {"type": "StringHandler", "required": True}},
        "storage_policy": {},
    }


# name -> (change, words the error message must contain: event type first, then the key)
CASES: dict[str, tuple[Callable[[dict[str, Any]], None], tuple[str, ...]]] = {
    "60-same-base": (_collide, ("gauge_upper", "topic.base")),
    "61-auth-without-required": (_auth({}), ("river_gauge", "auth", "required")),
    "61-plugins-empty": (
        _auth({"required": False, "plugins": []}),
        ("river_gauge", "auth.plugins"),
    ),
    "61-ecpds-with-required-false": (
        _auth({"required": False, "plugins": ["ecpds"]}, with_ecpds=True),
        ("river_gauge", "auth.plugins"),
    ),
    "62-max-length-on-int": (_field("level_band", max_length=3), ("river_gauge", "max_length")),
    "62-unquoted-enum-values": (_field("basin", values=[1, 2]), ("river_gauge", "basin")),
    "62-missing-required": (_field("station", required=_DELETE), ("river_gauge", "station")),
    "63-key-order-undeclared": (_key_order, ("river_gauge", "key_order", "sensor")),
    "64-compression-in-memory": (
        _compression,
        ("river_gauge", "storage_policy", "compression"),
    ),
    "64-empty-policy-without-topic": (_policy_without_topic, ("no_topic", "storage_policy")),
    "65-unsupported-canonical-format": (
        _field("obs_date", canonical_format="%d/%m/%Y"),
        ("river_gauge", "obs_date", "canonical_format"),
    ),
}

# Extra words per case that pin the reason (not just the location) where it is unambiguous.
REASON: dict[str, tuple[str, ...]] = {
    "62-unquoted-enum-values": ("values",),
    "62-missing-required": ("required",),
    "61-ecpds-with-required-false": ("required",),
}


@dataclass
class Outcome:
    returncode: int
    stderr: str
    port: int
    elapsed: float


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _write(directory: Path, name: str, document: dict[str, Any]) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), "utf-8")
    return path


def _serve_args(path: Path, port: int) -> list[str]:
    return aviso_command("serve", "--config", str(path), "--port", str(port))


def _run(path: Path, port: int, cwd: Path) -> Outcome:
    started = time.monotonic()
    result = subprocess.run(
        _serve_args(path, port),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env=clean_environment(),
        cwd=cwd,
        check=False,
    )
    return Outcome(result.returncode, result.stderr, port, time.monotonic() - started)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    directory = tmp_path_factory.mktemp("schema_startup")
    jobs = []
    for (name, (change, _words)), port in zip(CASES.items(), _free_ports(len(CASES)), strict=True):
        document = copy.deepcopy(VALID)
        change(document)
        jobs.append((name, _write(directory, name, document), port))
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {name: pool.submit(_run, path, port, directory) for name, path, port in jobs}
        return {name: future.result() for name, future in futures.items()}


def assert_refused(outcomes: dict[str, Outcome], case: str) -> None:
    outcome = outcomes[case]
    assert outcome.returncode != 0, outcome.stderr
    for word in CASES[case][1] + REASON.get(case, ()):
        assert word in outcome.stderr, (word, outcome.stderr)
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert not _listening(outcome.port)


def test_same_base_twice(outcomes: dict[str, Outcome]) -> None:
    assert_refused(outcomes, "60-same-base")


@pytest.mark.parametrize("case", [name for name in CASES if name.startswith("61-")])
def test_stream_auth_block(outcomes: dict[str, Outcome], case: str) -> None:
    assert_refused(outcomes, case)


@pytest.mark.parametrize("case", [name for name in CASES if name.startswith("62-")])
def test_field_definition(outcomes: dict[str, Outcome], case: str) -> None:
    assert_refused(outcomes, case)


def test_key_order_names_undeclared_field(outcomes: dict[str, Outcome]) -> None:
    assert_refused(outcomes, "63-key-order-undeclared")


@pytest.mark.parametrize("case", [name for name in CASES if name.startswith("64-")])
def test_storage_policy(outcomes: dict[str, Outcome], case: str) -> None:
    assert_refused(outcomes, case)


def test_unsupported_canonical_format(outcomes: dict[str, Outcome]) -> None:
    assert_refused(outcomes, "65-unsupported-canonical-format")


# -- positive control and a DateHandler without canonical_format ----------------------------------


@dataclass
class CliServer:
    url: str
    process: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def valid_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliServer]:
    """``VALID`` served by the real CLI: proves the broken variants fail for their change."""
    directory = tmp_path_factory.mktemp("schema_startup_valid")
    path = _write(directory, "valid", VALID)
    with aviso_process(path, directory / "stderr.txt") as (url, process):
        yield CliServer(url, process)


def test_to_65_control_valid_configuration_starts(valid_server: CliServer) -> None:
    assert valid_server.process.poll() is None
    response = httpx.get(f"{valid_server.url}/api/v1/schema/plain_date", timeout=10.0)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("value", ["2025-07-06", "20250706", "2025-187"])
def test_omitted_canonical_format_is_yyyymmdd(valid_server: CliServer, value: str) -> None:
    tag = f"fmt-{value}"
    with httpx.Client(base_url=valid_server.url, timeout=10.0) as client:
        body = {"event_type": "plain_date", "identifier": {"tag": tag, "day": value}}
        response = client.post("/api/v1/notification", content=json.dumps(body))
        assert response.status_code == 200, response.text
        replay = {"event_type": "plain_date", "identifier": {"tag": tag}, "from_id": "1"}
        events = collect(client, "/api/v1/replay", replay, until="connection-closing")
    assert events[-1].data["reason"] == "end_of_stream", events[-1].raw
    delivered = [event.data["data"]["identifier"] for event in events if event.kind == "replay"]
    assert [identifier["day"] for identifier in delivered] == ["20250706"]
