"""A separately installed package adds an auth mode, selected purely by configuration.

``tests/fixtures/aviso_api_keys`` (static API keys sent in an ``X-Api-Key`` header) is built
and installed by pip into a private directory; a real ``aviso-server serve`` with that
directory on its path then authenticates with it over HTTP, with no wrapper around the app,
while every decision (roles, admin, stream policy, error bodies) stays the host's. Its
configuration goes through the same checks as the host's own: ``config check`` and ``serve``
fail with one line naming the plugin and the key, and its secret option is never shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.process import aviso_process, install_into, run_aviso, with_pythonpath

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "aviso_api_keys"

KEYS = [
    {"key": "key-reader-0001", "user": "rita", "realm": "lab", "roles": ["reader"]},
    {"key": "key-admin-0002", "user": "ada", "realm": "lab", "roles": ["admin"]},
    {"key": "key-writer-0003", "user": "wes", "realm": "lab", "roles": ["writer"]},
]

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
    return {"X-Api-Key": key}


def _notify(client: httpx.Client, event_type: str, headers: dict[str, str]) -> httpx.Response:
    body = {"event_type": event_type, "identifier": {"sample": "s1"}}
    return client.post("/api/v1/notification", content=json.dumps(body), headers=headers)


def test_aviso_plugins_lists_the_auth_provider(plugin_path: Path) -> None:
    listing = run_aviso("plugins", env=with_pythonpath(plugin_path))
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if line.startswith("api_keys_auth"))
    assert row.split() == [
        "api_keys_auth",
        "loaded",
        "aviso-api-keys",
        "0.2.0",
        "auth-provider:",
        "api_keys",
    ]


def test_the_plugin_mode_authenticates_over_http(client: httpx.Client) -> None:
    anonymous = _notify(client, "lab_results", {})
    assert anonymous.status_code == 401
    assert anonymous.json()["message"] == "Authentication is required for this stream"
    assert anonymous.headers.get_list("www-authenticate") == ["ApiKey", "Bearer"]
    assert _notify(client, "lab_results", _key("key-writer-0003")).status_code == 200
    denied = _notify(client, "lab_results", _key("key-reader-0001"))
    assert denied.status_code == 403
    assert denied.json()["message"] == "User does not have required write role for this stream"
    assert _notify(client, "lab_results", _key("key-admin-0002")).status_code == 200
    wrong = _notify(client, "open_data", _key("key-unknown"))
    assert wrong.status_code == 401
    assert list(wrong.json()) == ["code", "error", "message", "request_id"]
    assert wrong.json()["message"] == "Invalid API key"
    # pyaviso sends only Bearer or Basic credentials: a key as a bearer token works too.
    assert (
        _notify(client, "lab_results", {"Authorization": "Bearer key-writer-0003"}).status_code
        == 200
    )
    assert _notify(client, "lab_results", {"Authorization": "Bearer x.y.z"}).status_code == 401
    assert _notify(client, "lab_results", {"Authorization": "Basic d2VzOng="}).status_code == 401
    # A malformed key is anonymous on a public stream.
    assert _notify(client, "open_data", {"X-Api-Key": b"\xe9"}).status_code == 200


def test_the_plugin_mode_guards_the_admin_routes(client: httpx.Client) -> None:
    missing = client.delete("/api/v1/admin/wipe/all")
    assert missing.status_code == 401
    assert missing.json()["message"] == "Authorization header is required"
    malformed = client.delete("/api/v1/admin/wipe/all", headers={"X-Api-Key": b"\xe9"})
    assert malformed.status_code == 401
    assert malformed.json()["message"] == "X-Api-Key header must hold an API key"
    assert malformed.headers.get_list("www-authenticate") == ["ApiKey", "Bearer"]
    reader = client.delete("/api/v1/admin/wipe/all", headers=_key("key-reader-0001"))
    assert reader.status_code == 403
    admin = client.delete("/api/v1/admin/wipe/all", headers=_key("key-admin-0002"))
    assert admin.status_code == 200, admin.text


def test_the_plugin_section_is_validated(plugin_path: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(keys="k.json").replace('file: "k.json"', 'fil: "k.json"'))
    check = run_aviso("config", "check", str(config), env=with_pythonpath(plugin_path))
    assert check.returncode != 0
    assert check.stderr == "Error: auth.api_keys: unknown key 'fil'\n"


PLUGIN = "[auth provider 'api_keys' (entry point 'api_keys_auth' of aviso-api-keys 0.2.0)]"


def _config(tmp_path: Path, section: str) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(keys="unused").replace('api_keys: {file: "unused"}', section))
    return config


def _refusals(plugin_path: Path, config: Path) -> list[str]:
    """What ``config check`` and ``serve`` print when they refuse ``config``: the same."""
    env = with_pythonpath(plugin_path)
    check = run_aviso("config", "check", str(config), env=env)
    serve = run_aviso("serve", "--config", str(config), "--port", "0", env=env)
    assert (check.returncode, serve.returncode) == (1, 1), (check.stderr, serve.stderr)
    assert check.stdout == serve.stdout == ""
    assert check.stderr == serve.stderr
    return check.stderr.splitlines()


@pytest.mark.parametrize(
    ("section", "reason"),
    [
        # No section at all: the options schema still applies (defaults filled in), and the
        # constructor's ValueError is one line, not a traceback.
        ("", "give exactly one of 'file' (a JSON file) or 'keys' (inline)"),
        ("api_keys: {header: X-Key}", "give exactly one of 'file' (a JSON file) or 'keys'"),
        # Any other exception is a plugin defect, shown with its type.
        ('api_keys: {file: "/nonexistent/keys.json"}', "FileNotFoundError: [Errno 2] No such"),
    ],
)
def test_a_provider_that_refuses_its_options_is_one_error_line_naming_it(
    plugin_path: Path, tmp_path: Path, section: str, reason: str
) -> None:
    [line] = _refusals(plugin_path, _config(tmp_path, section))
    assert line.startswith(f"Error: auth.api_keys: {reason}"), line
    assert line.endswith(PLUGIN), line


def test_a_secret_option_is_never_shown(plugin_path: Path, tmp_path: Path) -> None:
    inline = "api_keys: {keys: [{key: key-inline-0004, user: ivy, roles: [ens_product]}]}"
    config = _config(tmp_path, inline)
    check = run_aviso("config", "check", str(config), env=with_pythonpath(plugin_path))
    assert check.returncode == 0, check.stderr
    assert "key-inline-0004" not in check.stdout
    # The default header is filled in; only the key is secret, not who it stands for.
    shown = yaml.safe_load(check.stdout)["auth"]["api_keys"]
    assert shown == {
        "keys": [{"key": "[REDACTED]", "user": "ivy", "roles": ["ens_product"]}],
        "header": "X-Api-Key",
    }
    # The same secret in a value that fails a check is masked in the error too.
    broken = _config(tmp_path, "api_keys: {keys: [{key: key-inline-0004, user: 7}]}")
    [line] = _refusals(plugin_path, broken)
    assert "key-inline-0004" not in line
    assert line.startswith("Error: auth.api_keys.keys[0].user: expected text"), line


def test_inline_keys_and_a_custom_header_work_under_serve(
    plugin_path: Path, tmp_path: Path
) -> None:
    section = (
        "api_keys: {header: X-Token, keys: [{key: key-inline-0004, user: ivy-analyst, realm: lab}]}"
    )
    config = _config(tmp_path, section)
    log = tmp_path / "server.log"
    server = aviso_process(config, log, with_pythonpath(plugin_path))
    with server as (url, _), httpx.Client(base_url=url, timeout=10.0) as http:
        assert _notify(http, "lab_results", {"X-Token": "key-inline-0004"}).status_code == 403
        assert _notify(http, "lab_results", {"X-Api-Key": "key-inline-0004"}).status_code == 401
    logged = log.read_text()
    assert "key-inline-0004" not in logged
    # Who called is not a secret: the audit fields name the user.
    assert '"username":"ivy-analyst"' in logged
