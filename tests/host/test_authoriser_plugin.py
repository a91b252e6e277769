"""A separately installed package adds a stream authoriser, with no host change.

``tests/fixtures/aviso_allow_list`` (the users allowed per realm) is built and installed by
pip into a private directory. A real ``aviso-server serve`` with that directory on its path
authenticates against the loopback auth-o-tron stand-in, validates the plugin's top-level
``allow_list`` section at startup, enforces it on watch and replay, and exports its
decisions on ``/metrics``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conformance.auth_support import READS, REPLAY, WATCH, assert_auth_error, call
from tests.conformance.metrics_support import Scrape, parse
from tests.support.fake_auth_o_tron import fake_auth_o_tron
from tests.support.process import aviso_process, free_port, install_into, run_aviso, with_pythonpath
from tests.support.sse import collect
from tests.support.tokens import SECRET, basic

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "aviso_allow_list"
EVENT_TYPE = "forecasts"
ALLOWED = basic("reader-user", "reader-pass")
UNLISTED = basic("analyst-user", "analyst-pass")  # right realm, not on its list
OTHER_REALM = basic("partner-user", "partner-pass")
ADMIN = basic("admin-user", "admin-pass")
LABEL = {"authoriser": "allow_list"}


def configuration(auth_o_tron_url: str, metrics_port: int, **allow_list: Any) -> dict[str, Any]:
    return {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": {"kind": "in_memory"},
        "metrics": {"enabled": True, "host": "127.0.0.1", "port": metrics_port},
        "auth": {
            "enabled": True,
            "mode": "direct",
            "auth_o_tron_url": auth_o_tron_url,
            "jwt_secret": SECRET,
            "admin_roles": {"localrealm": ["admin"]},
        },
        "allow_list": {"realms": {"localrealm": ["reader-user"]}, **allow_list},
        "notification_schema": {
            EVENT_TYPE: {
                "topic": {"base": "fc", "key_order": ["name"]},
                "identifier": {"name": {"type": "StringHandler", "required": True}},
                "payload": {"required": False},
                "auth": {"required": True, "plugins": ["allow_list"]},
            }
        },
    }


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    install_into(target, FIXTURE)
    return target


@dataclass
class Deployment:
    client: httpx.Client
    url: str
    metrics_url: str

    def scrape(self) -> Scrape:
        response = httpx.get(self.metrics_url, timeout=10.0)
        assert response.status_code == 200, response.text
        return parse(response.text)


@pytest.fixture(scope="module")
def deployment(plugin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    directory = tmp_path_factory.mktemp("allow_list")
    metrics_port = free_port()
    with fake_auth_o_tron() as aot:
        config = directory / "config.yaml"
        config.write_text(yaml.safe_dump(configuration(aot.url, metrics_port)))
        server = aviso_process(config, directory / "server.log", with_pythonpath(plugin_path))
        with server as (url, _), httpx.Client(base_url=url, timeout=10.0) as client:
            client.post(
                "/api/v1/notification",
                content=json.dumps({"event_type": EVENT_TYPE, "identifier": {"name": "n1"}}),
                headers=ADMIN,
            ).raise_for_status()
            yield Deployment(client, url, f"http://127.0.0.1:{metrics_port}/metrics")


def _read(path: str) -> dict[str, Any]:
    body: dict[str, Any] = {"event_type": EVENT_TYPE, "identifier": {"name": "n1"}}
    return {**body, "from_id": "1"} if path == REPLAY else body


def test_aviso_plugins_lists_the_authoriser(plugin_path: Path) -> None:
    listing = run_aviso("plugins", env=with_pythonpath(plugin_path))
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if line.startswith("allow_list"))
    assert row.split() == [
        "allow_list_authoriser",
        "loaded",
        "aviso-allow-list",
        "0.1.0",
        "stream-authoriser:",
        "allow_list",
    ]


def test_a_listed_user_reads_with_replay_and_watch(deployment: Deployment) -> None:
    with httpx.Client(base_url=deployment.url, headers=ALLOWED, timeout=10.0) as reader:
        kinds = [event.kind for event in collect(reader, REPLAY, _read(REPLAY))]
    assert kinds[:2] == ["replay-control/replay_started", "replay"], kinds
    assert kinds[-1] == "connection-closing", kinds
    watch = call(deployment.client, WATCH, _read(WATCH), ALLOWED)
    assert watch.status_code == 200


@pytest.mark.parametrize("path", READS)
@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (UNLISTED, f"User 'analyst-user' may not read '{EVENT_TYPE}'"),
        (OTHER_REALM, f"Realm 'partnerrealm' may not read '{EVENT_TYPE}'"),
    ],
)
def test_an_unlisted_caller_is_refused(
    deployment: Deployment, path: str, headers: dict[str, str], message: str
) -> None:
    assert_auth_error(call(deployment.client, path, _read(path), headers), 403, message)


def test_admins_and_anonymous_callers_never_reach_the_authoriser(deployment: Deployment) -> None:
    before = deployment.scrape()
    assert call(deployment.client, REPLAY, _read(REPLAY), ADMIN).status_code == 200
    assert_auth_error(call(deployment.client, REPLAY, _read(REPLAY)), 401)
    after = deployment.scrape()
    name = "aviso_authoriser_decisions_total"
    assert _delta(before, after, name, outcome="admin_bypass") == 1
    for outcome in ("allow", "deny", "error"):
        assert _delta(before, after, name, outcome=outcome) == 0


def test_decisions_and_latency_are_on_metrics(deployment: Deployment) -> None:
    before = deployment.scrape()
    for outcome in ("allow", "deny", "unavailable", "admin_bypass"):
        assert (
            before.value("aviso_authoriser_decisions_total", **LABEL, outcome=outcome) is not None
        )
    for outcome in ("allow", "deny_realm", "deny_user"):
        assert before.value("aviso_authoriser_outcomes_total", **LABEL, outcome=outcome) is not None
    assert call(deployment.client, REPLAY, _read(REPLAY), ALLOWED).status_code == 200
    assert call(deployment.client, WATCH, _read(WATCH), UNLISTED).status_code == 403
    assert call(deployment.client, WATCH, _read(WATCH), OTHER_REALM).status_code == 403
    after = deployment.scrape()
    assert _delta(before, after, "aviso_authoriser_decisions_total", outcome="allow") == 1
    assert _delta(before, after, "aviso_authoriser_decisions_total", outcome="deny") == 2
    assert _delta(before, after, "aviso_authoriser_outcomes_total", outcome="deny_user") == 1
    assert _delta(before, after, "aviso_authoriser_outcomes_total", outcome="deny_realm") == 1
    assert _delta(before, after, "aviso_authoriser_decision_duration_seconds_count") == 3


def _delta(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return (after.value(name, **LABEL, **labels) or 0) - (
        before.value(name, **LABEL, **labels) or 0
    )


# -- startup checks ------------------------------------------------------------------------

BAD_SECTIONS = {
    "unknown-key": ({"colour": "red"}, "allow_list: unknown key 'colour'"),
    "not-a-mapping": ({"realms": ["reader-user"]}, "allow_list.realms: expected a mapping"),
    "empty-realm": ({"realms": {"localrealm": []}}, "allow_list.realms.localrealm: must list"),
    "padded-user": (
        {"realms": {"localrealm": [" reader-user"]}},
        "allow_list.realms.localrealm[0]: must be a user name without surrounding whitespace",
    ),
    "negative-recheck": ({"recheck_seconds": -1}, "allow_list.recheck_seconds: "),
}


@pytest.mark.parametrize("command", ["check", "serve"])
@pytest.mark.parametrize("case", sorted(BAD_SECTIONS))
def test_a_bad_section_fails_startup_naming_the_key(
    plugin_path: Path, tmp_path: Path, case: str, command: str
) -> None:
    changes, expected = BAD_SECTIONS[case]
    document = configuration("http://127.0.0.1:9", free_port(), **changes)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(document))
    args = ("config", "check", str(config))
    if command == "serve":
        args = ("serve", "--config", str(config), "--port", str(free_port()))
    result = run_aviso(*args, env=with_pythonpath(plugin_path))
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_a_stream_listing_the_authoriser_needs_its_section(
    plugin_path: Path, tmp_path: Path
) -> None:
    document = configuration("http://127.0.0.1:9", free_port())
    del document["allow_list"]
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(document))
    check = run_aviso("config", "check", str(config), env=with_pythonpath(plugin_path))
    assert check.returncode != 0
    assert f"allow_list: section required by streams: {EVENT_TYPE}" in check.stderr


def test_config_check_accepts_the_section_and_fills_its_defaults(
    plugin_path: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(configuration("http://127.0.0.1:9", free_port())))
    check = run_aviso("config", "check", str(config), env=with_pythonpath(plugin_path))
    assert check.returncode == 0, check.stderr
