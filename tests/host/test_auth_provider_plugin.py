"""A separately installed package adds an auth mode, selected purely by configuration.

``tests/fixtures/aviso_api_keys`` (static API keys from a file) is built and installed by
pip into a private directory; a real ``aviso-server serve`` with that directory on its path then
authenticates with it over HTTP, while every decision (roles, admin, stream policy, error
bodies) stays the host's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.process import aviso_process, install_into, run_aviso, with_pythonpath

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "aviso_api_keys"

KEYS = {
    "key-reader-0001": {"username": "rita", "realm": "lab", "roles": ["reader"]},
    "key-admin-0002": {"username": "ada", "realm": "lab", "roles": ["admin"]},
    "key-writer-0003": {"username": "wes", "realm": "lab", "roles": ["writer"]},
}

CONFIG = """
application: {{host: 127.0.0.1, port: 0}}
notification_backend: {{kind: in_memory}}
auth:
  enabled: true
  mode: api_keys
  admin_roles: {{lab: [admin]}}
  api_keys: {{file: "{keys}"}}
notification_schema:
  lab_results:
    topic: {{base: lab, key_order: [sample]}}
    identifier: {{sample: {{type: StringHandler, required: true}}}}
    auth: {{required: true, write_roles: {{lab: [writer]}}}}
  open_data:
    topic: {{base: open, key_order: [sample]}}
    identifier: {{sample: {{type: StringHandler, required: true}}}}
"""


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    install_into(target, FIXTURE)
    return target


@pytest.fixture(scope="module")
def client(plugin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    directory = tmp_path_factory.mktemp("api_keys")
    keys = directory / "keys.json"
    keys.write_text(json.dumps(KEYS))
    config = directory / "config.yaml"
    config.write_text(CONFIG.format(keys=keys))
    server = aviso_process(config, directory / "server.log", with_pythonpath(plugin_path))
    with server as (url, _), httpx.Client(base_url=url, timeout=10.0) as http:
        yield http


def _key(key: str) -> dict[str, str]:
    return {"Authorization": f"ApiKey {key}"}


def _notify(client: httpx.Client, event_type: str, headers: dict[str, str]) -> httpx.Response:
    body = {"event_type": event_type, "identifier": {"sample": "s1"}}
    return client.post("/api/v1/notification", content=json.dumps(body), headers=headers)


def test_aviso_plugins_lists_the_auth_provider(plugin_path: Path) -> None:
    listing = run_aviso("plugins", env=with_pythonpath(plugin_path))
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if line.startswith("api_keys_auth"))
    assert row.split() == [
        "api_keys_auth",
        "aviso-api-keys",
        "0.1.0",
        "auth-provider:",
        "api_keys",
    ]


def test_the_plugin_mode_authenticates_over_http(client: httpx.Client) -> None:
    anonymous = _notify(client, "lab_results", {})
    assert anonymous.status_code == 401
    assert anonymous.json()["message"] == "Authentication is required for this stream"
    assert anonymous.headers.get_list("www-authenticate") == ["ApiKey"]
    assert _notify(client, "lab_results", _key("key-writer-0003")).status_code == 200
    denied = _notify(client, "lab_results", _key("key-reader-0001"))
    assert denied.status_code == 403
    assert denied.json()["message"] == "User does not have required write role for this stream"
    assert _notify(client, "lab_results", _key("key-admin-0002")).status_code == 200
    wrong = _notify(client, "open_data", _key("key-unknown"))
    assert wrong.status_code == 401
    assert list(wrong.json()) == ["code", "error", "message", "request_id"]
    assert wrong.json()["message"] == "Invalid API key"
    # A header in another scheme is malformed: anonymous on a public stream.
    assert _notify(client, "open_data", {"Authorization": "Bearer x.y.z"}).status_code == 200


def test_the_plugin_mode_guards_the_admin_routes(client: httpx.Client) -> None:
    missing = client.delete("/api/v1/admin/wipe/all")
    assert missing.status_code == 401
    assert missing.json()["message"] == "Authorization header is required"
    malformed = client.delete("/api/v1/admin/wipe/all", headers={"Authorization": "Bearer x"})
    assert malformed.status_code == 401
    assert malformed.json()["message"] == "Authorization header must use ApiKey scheme"
    reader = client.delete("/api/v1/admin/wipe/all", headers=_key("key-reader-0001"))
    assert reader.status_code == 403
    admin = client.delete("/api/v1/admin/wipe/all", headers=_key("key-admin-0002"))
    assert admin.status_code == 200, admin.text


def test_the_plugin_section_is_validated(plugin_path: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(keys="k.json").replace('file: "k.json"', 'fil: "k.json"'))
    check = run_aviso("config", "check", str(config), env=with_pythonpath(plugin_path))
    assert check.returncode != 0
    assert "auth.api_keys" in check.stderr, check.stderr
