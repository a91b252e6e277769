"""Auth conformance: what fails startup and what starts.

Every case is a one-change variant of ``VALID``. Refusals are checked through the startup
validation itself (``ConfigError`` naming the key), and one per group also as a
real ``aviso-server serve`` that must exit non-zero without a traceback; accepted variants must
serve ``/health`` on a real server.
"""

from __future__ import annotations

import copy
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.plugins import discover
from tests.support.process import aviso_command, clean_environment, free_port, stop
from tests.support.server import running_server

DEADLINE = 60.0

VALID: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {"kind": "in_memory"},
    "auth": {
        "enabled": True,
        "mode": "direct",
        "auth_o_tron_url": "http://127.0.0.1:9",
        "jwt_secret": "startup-secret",
        "admin_roles": {"ops": ["admin"]},
        "timeout_ms": 1000,
    },
    "notification_schema": {
        "feed": {
            "topic": {"base": "feed", "key_order": ["name"]},
            "identifier": {"name": {"type": "StringHandler", "required": True}},
            "auth": {"required": True},
        },
        "dissemination": {
            "topic": {"base": "diss", "key_order": ["class"]},
            "identifier": {
                "class": {"type": "StringHandler", "required": False},
                "destination": {"type": "StringHandler", "required": True},
            },
        },
    },
    "ecpds": {
        "username": "svc",
        "password": "svc-pass",
        "servers": ["https://ecpds.example.net"],
        "match_key": "destination",
    },
}

Change = Callable[[dict[str, Any]], None]


def auth(**changes: Any) -> Change:
    def change(document: dict[str, Any]) -> None:
        document["auth"].update(changes)

    return change


def stream(name: str, block: dict[str, Any] | None, **auth_changes: Any) -> Change:
    def change(document: dict[str, Any]) -> None:
        entry = document["notification_schema"][name]
        if block is None:
            entry.pop("auth", None)
        else:
            entry["auth"] = block
        document["auth"].update(auth_changes)

    return change


def plugin_stream(**ecpds: Any) -> Change:
    """Put ``dissemination`` behind the ECPDS plugin and change the ``ecpds`` section."""

    def change(document: dict[str, Any]) -> None:
        document["notification_schema"]["dissemination"]["auth"] = {
            "required": True,
            "plugins": ["ecpds"],
        }
        for key, value in ecpds.items():
            if value is None:
                document["ecpds"].pop(key, None)
            else:
                document["ecpds"][key] = value

    return change


def no_ecpds_section(document: dict[str, Any]) -> None:
    plugin_stream()(document)
    del document["ecpds"]


def match_key_optional(document: dict[str, Any]) -> None:
    plugin_stream()(document)
    document["notification_schema"]["dissemination"]["identifier"]["destination"]["required"] = (
        False
    )


def both(*changes: Change) -> Change:
    def change(document: dict[str, Any]) -> None:
        for item in changes:
            item(document)

    return change


def _trusted(**changes: Any) -> Change:
    return auth(mode="trusted_proxy", **changes)


# name -> (change, fragments stderr must contain); REFUSED fail, ACCEPTED start.
REFUSED: dict[str, tuple[Change, tuple[str, ...]]] = {
    "03-admin-roles-empty": (auth(admin_roles={}), ("auth.admin_roles",)),
    "04-realm-empty-list": (auth(admin_roles={"ops": []}), ("auth.admin_roles.ops",)),
    "04-padded-realm": (auth(admin_roles={" ops": ["admin"]}), ("auth.admin_roles",)),
    "04-blank-role": (auth(admin_roles={"ops": [""]}), ("auth.admin_roles.ops[0]",)),
    "04-whitespace-role": (auth(admin_roles={"ops": ["  "]}), ("auth.admin_roles.ops[0]",)),
    "04-padded-role": (auth(admin_roles={"ops": ["admin "]}), ("auth.admin_roles.ops[0]",)),
    "04-blank-realm": (auth(admin_roles={"": ["admin"]}), ("auth.admin_roles",)),
    "05-direct-empty-url": (auth(auth_o_tron_url=""), ("auth.auth_o_tron_url",)),
    "05-direct-empty-secret": (auth(jwt_secret=""), ("auth.jwt_secret",)),
    "05-proxy-empty-secret": (_trusted(jwt_secret=""), ("auth.jwt_secret",)),
    "06-zero-timeout": (auth(timeout_ms=0), ("auth.timeout_ms",)),
    "06-secret-trailing-space": (auth(jwt_secret="startup-secret "), ("auth.jwt_secret",)),
    "06-proxy-padded-unused-url": (
        _trusted(auth_o_tron_url=" http://x"),
        ("auth.auth_o_tron_url",),
    ),
    "07-unknown-key": (auth(secret="x"), ("auth", "secret")),
    "07-unknown-mode": (auth(mode="proxy"), ("auth.mode", "proxy")),
    "08-stream-without-required": (
        stream("feed", {"read_roles": {"ops": ["r"]}}),
        ("feed", "required"),
    ),
    "08-stream-unknown-key": (stream("feed", {"required": True, "foo": 1}), ("feed", "foo")),
    "09-required-while-disabled": (stream("feed", {"required": True}, enabled=False), ("feed",)),
    "09-role-map-while-disabled": (
        stream("feed", {"required": False, "read_roles": {"ops": ["r"]}}, enabled=False),
        ("feed", "read_roles"),
    ),
    "10-not-required-with-read-roles": (
        stream("feed", {"required": False, "read_roles": {"ops": ["r"]}}),
        ("feed", "read_roles"),
    ),
    "11-empty-read-roles": (
        stream("feed", {"required": True, "read_roles": {}}),
        ("feed", "read_roles"),
    ),
    "11-empty-write-roles": (
        stream("feed", {"required": True, "write_roles": {}}),
        ("feed", "write_roles"),
    ),
    "11-padded-read-role": (
        stream("feed", {"required": True, "read_roles": {"ops": [" r"]}}),
        ("feed", "read_roles"),
    ),
    "11-empty-plugins": (stream("feed", {"required": True, "plugins": []}), ("feed", "plugins")),
    "11-unknown-plugin": (
        stream("feed", {"required": True, "plugins": ["ldap"]}),
        ("feed", "ldap"),
    ),
    "11-plugin-not-required": (
        stream("feed", {"required": False, "plugins": ["ecpds"]}),
        ("feed", "plugins", "required"),
    ),
    "36-no-ecpds-section": (no_ecpds_section, ("ecpds", "dissemination")),
    "37-remote-http": (plugin_stream(servers=["http://10.0.0.5"]), ("ecpds.servers[0]",)),
    "37-other-loopback-http": (
        plugin_stream(servers=["http://127.0.0.2:8"]),
        ("ecpds.servers[0]",),
    ),
    "37-ftp": (plugin_stream(servers=["ftp://ecpds.example.net"]), ("ecpds.servers[0]",)),
    "37-query": (plugin_stream(servers=["https://ecpds.example.net/?x=1"]), ("ecpds.servers[0]",)),
    "37-fragment": (
        plugin_stream(servers=["https://ecpds.example.net/#frag"]),
        ("ecpds.servers[0]",),
    ),
    "37-no-servers": (plugin_stream(servers=[]), ("ecpds.servers",)),
    "37-zero-ttl": (plugin_stream(cache_ttl_seconds=0), ("ecpds.cache_ttl_seconds",)),
    "37-zero-max-entries": (plugin_stream(max_entries=0), ("ecpds.max_entries",)),
    "37-zero-request-timeout": (
        plugin_stream(request_timeout_seconds=0),
        ("ecpds.request_timeout_seconds",),
    ),
    "37-zero-connect-timeout": (
        plugin_stream(connect_timeout_seconds=0),
        ("ecpds.connect_timeout_seconds",),
    ),
    "37-missing-password": (plugin_stream(password=None), ("ecpds", "password")),
    "37-unknown-ecpds-key": (plugin_stream(retries=3), ("ecpds", "retries")),
    "38-match-key-not-a-field": (plugin_stream(match_key="target"), ("match_key", "target")),
    "38-match-key-optional": (match_key_optional, ("dissemination", "destination", "required")),
}

ACCEPTED: dict[str, Change] = {
    "valid": lambda document: None,
    "15-trusted-proxy-secret-and-admin-roles": _trusted(auth_o_tron_url=""),
    "37-loopback-ipv4": plugin_stream(servers=["http://127.0.0.1:9"]),
    "37-loopback-name": plugin_stream(servers=["http://localhost:9"]),
    "37-loopback-ipv6": plugin_stream(servers=["http://[::1]:9"]),
    "37-https-with-path": plugin_stream(servers=["https://gw.example/ecpds-api/"]),
    "38-match-key-outside-key-order": plugin_stream(),
    "39-unused-section-unparsable-url": lambda document: document["ecpds"].update(
        servers=["http://[::1", "ftp://x?y#z"]
    ),
    "05-direct-url-syntax-not-checked": auth(auth_o_tron_url="not a url"),
    "disabled-auth-ignores-its-rules": both(
        stream("feed", None), auth(enabled=False, admin_roles={}, jwt_secret=" x ")
    ),
}


# A refusal from each rule group (global, stream, plugin, ECPDS) also runs as a real
# ``aviso-server serve`` (exit status, stderr).
END_TO_END = (
    "03-admin-roles-empty",
    "09-required-while-disabled",
    "11-unknown-plugin",
    "37-remote-http",
)


def variant(change: Change) -> dict[str, Any]:
    document = copy.deepcopy(VALID)
    change(document)
    return document


@dataclass
class Outcome:
    started: bool
    returncode: int | None
    stderr: str


def _serve(path: Path, port: int) -> Outcome:
    log = path.with_suffix(".log")
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            aviso_command("serve", "--config", str(path), "--port", str(port)),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=clean_environment(),
        )
        started = False
        deadline = time.monotonic() + DEADLINE
        with httpx.Client(timeout=1.0) as client:
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    started = client.get(f"http://127.0.0.1:{port}/health").status_code == 200
                except httpx.TransportError:
                    started = False
                if started:
                    break
                time.sleep(0.1)
        stop(process, 15.0)
    return Outcome(started, process.returncode, log.read_text(errors="replace"))


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    directory = tmp_path_factory.mktemp("auth_startup")
    jobs = []
    for name in END_TO_END:
        path = directory / f"{name}.yaml"
        path.write_text(yaml.safe_dump(variant(REFUSED[name][0]), sort_keys=False), "utf-8")
        jobs.append((name, path, free_port()))
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {name: pool.submit(_serve, path, port) for name, path, port in jobs}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("case", list(REFUSED))
def test_to_11_and_36_to_38_refused(case: str) -> None:
    change, fragments = REFUSED[case]
    with pytest.raises(ConfigError) as failure:
        settings_from_document(variant(change), discover())
    for fragment in fragments:
        assert fragment in str(failure.value), (case, fragment, str(failure.value))
    assert "svc-pass" not in str(failure.value) and "startup-secret" not in str(failure.value)


# Child processes (see tests/conftest.py): the fast tier checks the same refusals and their
# messages in process (``test_to_11_and_36_to_38_refused``).
@pytest.mark.heavy
@pytest.mark.parametrize("case", END_TO_END)
def test_refusals_stop_aviso_serve(processes: dict[str, Outcome], case: str) -> None:
    outcome = processes[case]
    assert not outcome.started, f"{case} started:\n{outcome.stderr}"
    assert outcome.returncode not in (0, None), outcome.stderr
    assert "Traceback" not in outcome.stderr, outcome.stderr
    for fragment in REFUSED[case][1]:
        assert fragment in outcome.stderr, (case, fragment, outcome.stderr)
    assert "svc-pass" not in outcome.stderr and "startup-secret" not in outcome.stderr


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_37_38_39_accepted(case: str) -> None:
    with running_server(variant(ACCEPTED[case])) as server:
        assert httpx.get(f"{server.url}/health").status_code == 200
        assert httpx.get(f"{server.url}/api/v1/schema").status_code == 200
