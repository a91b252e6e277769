"""Configuration sources end to end.

Every test runs the real ``aviso-server serve`` (or ``aviso-server config check``) as a
subprocess with a temporary working directory and HOME and no inherited ``AVISOSERVER_*`` variables.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from aviso_host.config.loader import EXAMPLE_CONFIG
from tests.conformance.config_support import (
    SYSTEM_CONFIG,
    Sandbox,
    ServerProcess,
    cloudevents,
    config_text,
    no_system_config,
    nothing_listens,
    notify,
    notify_ok,
    replay,
    sandbox_at,
)
from tests.support.process import free_port

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py


def env_only(port: int) -> dict[str, str]:
    return {
        "AVISOSERVER_APPLICATION__HOST": "127.0.0.1",
        "AVISOSERVER_APPLICATION__PORT": str(port),
        "AVISOSERVER_NOTIFICATION_BACKEND__KIND": "in_memory",
    }


@pytest.fixture(scope="module")
def env_only_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """No configuration file anywhere; three variables and nothing else.

    Shared by several tests (each uses its own event type). The port is a free one
    rather than the item's 8000, which other processes on the machine may hold.
    """
    if SYSTEM_CONFIG.exists():
        pytest.skip(f"{SYSTEM_CONFIG} exists on this machine: the default cascade would read it")
    port = free_port()
    with (
        sandbox_at(tmp_path_factory.mktemp("env_only")) as box,
        box.serve(port=port, env=env_only(port)) as server,
    ):
        yield server


# -- environment alone ------------------------------------------------------------------


@no_system_config
def test_environment_alone_starts_with_default_base_url(
    env_only_server: ServerProcess,
) -> None:
    with env_only_server.client() as client:
        notify_ok(client, "item01_anything", {"site": "reading"}, {"note": "generic"})
        events = cloudevents(replay(client, "item01_anything", {"site": "reading"}))
    assert len(events) == 1, events
    event = events[0]
    assert event["source"] == "http://localhost"
    assert event["dataschema"] == "http://localhost/schema/item01_anything"
    assert event["type"] == "int.ecmwf.aviso.item01_anything"
    assert event["data"]["identifier"] == {"site": "reading"}
    assert event["data"]["payload"] == {"note": "generic"}


# -- no file, no environment ------------------------------------------------------------


@no_system_config
def test_no_file_and_no_environment_serves_the_packaged_example_and_says_so(
    sandbox: Sandbox,
) -> None:
    """Deviation: the reference refuses to start; an installed aviso-py run in an empty
    folder serves the example configuration it ships (a variable such as the port applies
    over it)."""
    port = free_port()
    with sandbox.serve(port=port, env={"AVISOSERVER_APPLICATION__PORT": str(port)}) as server:
        with server.client() as client:
            schemas = client.get("/api/v1/schema").json()
        records = server.log_records()
    assert "dissemination" in schemas["event_types"]
    (started,) = [r for r in records if r.get("event_name") == "service.started"]
    assert started["config_files"] == [str(EXAMPLE_CONFIG)]
    assert str(EXAMPLE_CONFIG) in started["message"]


@no_system_config
def test_an_environment_configuring_the_server_is_read_alone(sandbox: Sandbox) -> None:
    """Variables addressing both required sections: no example, and the error says which
    files were looked for."""
    environment = {
        "AVISOSERVER_APPLICATION__HOST": "127.0.0.1",
        "AVISOSERVER_NOTIFICATION_BACKEND__KIND": "in_memory",
    }
    failure = sandbox.serve_fails(env=environment)
    failure.names(
        "missing required key 'port'",
        f"looked for {sandbox.cwd / 'configuration' / 'config.yaml'}, {SYSTEM_CONFIG}, "
        f"{sandbox.home / '.aviso_server' / 'config.yaml'}",
    )


# -- AVISOSERVER_CONFIG_FILE missing or blank -------------------------------------------


@no_system_config
def test_missing_config_file_fails_despite_default_file(sandbox: Sandbox) -> None:
    default_port = free_port()
    sandbox.default_file(config_text(default_port))
    failure = sandbox.serve_fails(
        env={"AVISOSERVER_CONFIG_FILE": "/nonexistent.yaml"}, port=default_port
    )
    failure.names("AVISOSERVER_CONFIG_FILE", "/nonexistent.yaml")


@no_system_config
def test_blank_config_file_variable_fails(sandbox: Sandbox) -> None:
    default_port = free_port()
    sandbox.default_file(config_text(default_port))
    failure = sandbox.serve_fails(env={"AVISOSERVER_CONFIG_FILE": "   "}, port=default_port)
    failure.names("AVISOSERVER_CONFIG_FILE")


# -- AVISOSERVER_CONFIG_FILE replaces the cascade ---------------------------------------


def test_config_file_variable_replaces_the_cascade(sandbox: Sandbox) -> None:
    default_port, explicit_port = free_port(), free_port()
    sandbox.default_file(
        config_text(
            default_port,
            """
            notification_schema:
              default_only:
                identifier:
                  k: {type: StringHandler, required: true}
            """,
            application="base_url: 'http://default.example'",
        )
    )
    sandbox.home_file("application: {base_url: 'http://home.example'}\n")
    explicit = sandbox.write("explicit.yaml", config_text(explicit_port))
    with sandbox.serve(port=explicit_port, env={"AVISOSERVER_CONFIG_FILE": str(explicit)}) as srv:
        assert nothing_listens(default_port)
        with srv.client() as client:
            schemas = client.get("/api/v1/schema").json()
            assert schemas["event_types"] == [], schemas
            # Strictness would follow from the default file's schema: it must not apply.
            notify_ok(client, "item05_generic", {"k": "v"})
            events = cloudevents(replay(client, "item05_generic", {"k": "v"}))
    assert [event["source"] for event in events] == ["http://localhost"]


# -- home file over default file --------------------------------------------------------


@no_system_config
def test_home_file_merges_over_default_file(sandbox: Sandbox) -> None:
    default_port, home_port = free_port(), free_port()
    sandbox.default_file(config_text(default_port, "logging: {level: debug}"))
    sandbox.home_file(f"application: {{port: {home_port}}}\n")
    with sandbox.serve(port=home_port) as server:
        assert nothing_listens(default_port)
        with server.client() as client:
            notify_ok(client, "item06_generic", {"k": "v"})
        # notify logs "api.notification.stored" at debug level only.
        stored = [
            r for r in server.log_records() if r.get("event_name") == "api.notification.stored"
        ]
        assert [r["level"] for r in stored] == ["debug"], server.stderr()


# -- environment over file --------------------------------------------------------------


def test_environment_port_wins_over_file(sandbox: Sandbox) -> None:
    file_port, env_port = free_port(), free_port()
    path = sandbox.write("config.yaml", config_text(file_port))
    env = {"AVISOSERVER_CONFIG_FILE": str(path), "AVISOSERVER_APPLICATION__PORT": str(env_port)}
    with sandbox.serve(port=env_port, env=env):
        assert nothing_listens(file_port)


# -- typed environment values -----------------------------------------------------------


def test_non_numeric_replay_batch_size_fails(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port))
    env = {
        "AVISOSERVER_CONFIG_FILE": str(path),
        "AVISOSERVER_WATCH_ENDPOINT__REPLAY_BATCH_SIZE": "abc",
    }
    sandbox.serve_fails(env=env, port=port).names("watch_endpoint.replay_batch_size")


def test_numeric_replay_batch_size_is_used(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port, "watch_endpoint: {replay_batch_size: 7}"))
    env = {
        "AVISOSERVER_CONFIG_FILE": str(path),
        "AVISOSERVER_WATCH_ENDPOINT__REPLAY_BATCH_SIZE": "200",
    }
    with sandbox.serve(port=port, env=env) as server, server.client() as client:
        notify_ok(client, "item08_generic", {"k": "v"})
        events = replay(client, "item08_generic", {"k": "v"})
    started = [e.data for e in events if e.kind == "replay-control/replay_started"]
    assert [s["batch_size"] for s in started] == [200], events


# -- auth from the environment ----------------------------------------------------------

AUTH_FILE = """
auth:
  enabled: false
  mode: trusted_proxy
  jwt_secret: "item09-secret"
  admin_roles:
    ecmwf: ["admin"]
"""

AUTH_FILE_WITHOUT_ROLES = """
auth:
  enabled: false
  mode: trusted_proxy
  jwt_secret: "item09-secret"
  admin_roles: {}
"""


def test_auth_enabled_yes_from_environment(sandbox: Sandbox) -> None:
    """The effective value shows in ``aviso-server config check``; on the server, the admin
    routes (open while auth is disabled) now demand credentials."""
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port, AUTH_FILE))
    env = {"AVISOSERVER_AUTH__ENABLED": "YES"}
    check = sandbox.cli("config", "check", str(path), env=env)
    assert check.returncode == 0, check.stderr
    assert yaml.safe_load(check.stdout)["auth"]["enabled"] is True, check.stdout
    serve_env = {**env, "AVISOSERVER_CONFIG_FILE": str(path)}
    with sandbox.serve(port=port, env=serve_env) as server, server.client() as client:
        response = client.delete("/api/v1/admin/wipe/all")
        assert response.status_code == 401, response.text
        assert response.headers.get_list("www-authenticate") == ["Bearer"]


def test_auth_enabled_from_environment_triggers_auth_rules(sandbox: Sandbox) -> None:
    """Evidence on the real server that the override switches auth on: with an empty
    ``admin_roles`` the file is valid as written (auth disabled), but an enabled-only rule
    fails startup once ``AVISOSERVER_AUTH__ENABLED=On`` is set."""
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port, AUTH_FILE_WITHOUT_ROLES))
    check = sandbox.cli("config", "check", str(path))
    assert check.returncode == 0, check.stderr
    failure = sandbox.serve_fails(
        "--config", str(path), env={"AVISOSERVER_AUTH__ENABLED": "On"}, port=port
    )
    failure.names("auth.admin_roles")


# -- defaults without schemas ----------------------------


@no_system_config
def test_no_schema_accepts_any_event_type(env_only_server: ServerProcess) -> None:
    with env_only_server.client() as client:
        response = notify(client, "anything", {"k": "v"})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "success"


@no_system_config
def test_default_in_memory_history_is_one_per_topic(
    env_only_server: ServerProcess,
) -> None:
    with env_only_server.client() as client:
        for payload in ("first", "second", "third"):
            notify_ok(client, "item29_generic", {"k": "same"}, payload)
        notify_ok(client, "item29_generic", {"k": "other"}, "elsewhere")
        same = cloudevents(replay(client, "item29_generic", {"k": "same"}))
        every = cloudevents(replay(client, "item29_generic", {"k": "*"}))
    assert [event["data"]["payload"] for event in same] == ["third"], same
    assert sorted(event["data"]["payload"] for event in every) == ["elsewhere", "third"]
