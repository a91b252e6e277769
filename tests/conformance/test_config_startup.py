"""What starts and what fails startup, end to end.

Each case runs ``aviso-server serve --config FILE`` as a subprocess. "Starts" means ``GET /health``
answers on the configured port; "fails" means a non-zero exit within a timeout with the
offending key named on stderr.
"""

from __future__ import annotations

import pytest

from tests.conformance.config_support import (
    Failure,
    Sandbox,
    config_text,
    notify_ok,
)
from tests.support.process import free_port

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py


def fails(sandbox: Sandbox, extra: str = "", backend: str = "{kind: in_memory}") -> Failure:
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port, extra, backend=backend))
    return sandbox.serve_fails("--config", str(path), port=port)


def starts(sandbox: Sandbox, extra: str = "", backend: str = "{kind: in_memory}") -> None:
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port, extra, backend=backend))
    with sandbox.serve("--config", str(path), port=port) as server, server.client() as client:
        assert client.get("/api/v1/schema").status_code == 200


# -- quoted port ------------------------------------------------------------------------


def test_quoted_port_is_accepted(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("config.yaml", config_text(f'"{port}"'))
    with sandbox.serve("--config", str(path), port=port):
        pass


# -- unknown backend kind ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "InMemory"])
def test_unknown_backend_kind_fails(sandbox: Sandbox, kind: str) -> None:
    fails(sandbox, backend=f"{{kind: {kind}}}").names("notification_backend.kind", kind)


# -- unused jetstream section -----------------------------------------------------------


def test_invalid_enum_in_unused_jetstream_section_fails(sandbox: Sandbox) -> None:
    failure = fails(sandbox, backend="{kind: in_memory, jetstream: {storage_type: disk}}")
    failure.names("notification_backend.jetstream.storage_type")


def test_zero_timeout_in_unused_jetstream_section_starts(sandbox: Sandbox) -> None:
    starts(sandbox, backend="{kind: in_memory, jetstream: {timeout_seconds: 0}}")


def test_zero_timeout_with_jetstream_fails(sandbox: Sandbox) -> None:
    failure = fails(sandbox, backend="{kind: jetstream, jetstream: {timeout_seconds: 0}}")
    failure.names("timeout_seconds")


# -- retention time ---------------------------------------------------------------------


@pytest.mark.parametrize("literal", ["7x", "0d"])
def test_invalid_retention_time_with_jetstream_fails(sandbox: Sandbox, literal: str) -> None:
    failure = fails(
        sandbox, backend=f'{{kind: jetstream, jetstream: {{retention_time: "{literal}"}}}}'
    )
    failure.names("retention_time")


def test_valid_retention_time_passes_the_retention_check(sandbox: Sandbox) -> None:
    """No NATS server is available here: the server is pointed at a closed local port and
    must fail on the connection, not on ``retention_time``."""
    nats = f"nats://127.0.0.1:{free_port()}"
    backend = (
        f'{{kind: jetstream, jetstream: {{retention_time: "30d", nats_url: "{nats}", '
        "retry_attempts: 1, timeout_seconds: 1, reconnect_delay_ms: 100}}"
    )
    failure = fails(sandbox, backend=backend)
    assert failure.returncode != 0
    assert "retention_time" not in failure.stderr, failure.stderr


# -- auth -------------------------------------------------------------------------------

DIRECT = 'enabled: true, mode: direct, jwt_secret: "s3cret", admin_roles: {ecmwf: [admin]}'


def test_unknown_key_in_disabled_auth_fails(sandbox: Sandbox) -> None:
    fails(sandbox, "auth: {enabled: false, foo: 1}").names("auth", "foo")


def test_direct_mode_without_auth_o_tron_url_fails(sandbox: Sandbox) -> None:
    fails(sandbox, f"auth: {{{DIRECT}}}").names("auth.auth_o_tron_url")


def test_trusted_proxy_with_secret_and_admin_roles_starts(sandbox: Sandbox) -> None:
    starts(
        sandbox,
        'auth: {enabled: true, mode: trusted_proxy, jwt_secret: "s3cret", '
        "admin_roles: {ecmwf: [admin]}}",
    )


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ("admin_roles: {}", "auth.admin_roles"),
        ("timeout_ms: 0", "auth.timeout_ms"),
        ('jwt_secret: " s"', "auth.jwt_secret"),
    ],
    ids=["empty_admin_roles", "zero_timeout", "padded_secret"],
)
def test_enabled_auth_rules_fail(sandbox: Sandbox, change: str, key: str) -> None:
    base = {
        "enabled": "true",
        "mode": "direct",
        "auth_o_tron_url": '"http://127.0.0.1:9"',
        "jwt_secret": '"s3cret"',
        "admin_roles": "{ecmwf: [admin]}",
    }
    name, value = change.split(": ", 1)
    base[name] = value
    section = ", ".join(f"{k}: {v}" for k, v in base.items())
    fails(sandbox, f"auth: {{{section}}}").names(key)


def test_unknown_auth_mode_fails(sandbox: Sandbox) -> None:
    fails(sandbox, "auth: {mode: proxy}").names("auth.mode", "proxy")


# -- metrics ----------------------------------------------------------------------------


def test_metrics_enabled_without_port_fails(sandbox: Sandbox) -> None:
    fails(sandbox, "metrics: {enabled: true}").names("metrics", "port")


def test_metrics_port_zero_fails(sandbox: Sandbox) -> None:
    fails(sandbox, "metrics: {enabled: true, port: 0}").names("metrics.port")


def test_metrics_port_equal_to_application_port_fails(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write(
        "config.yaml", config_text(port, f"metrics: {{enabled: true, port: {port}}}")
    )
    sandbox.serve_fails("--config", str(path), port=port).names("metrics.port")


def test_disabled_metrics_with_port_zero_starts(sandbox: Sandbox) -> None:
    starts(sandbox, "metrics: {enabled: false, port: 0}")


# -- logging ----------------------------------------------------------------------------


def test_unknown_level_starts_and_logs_at_info(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port, "logging: {level: verbose}"))
    with sandbox.serve("--config", str(path), port=port) as server:
        with server.client() as client:
            notify_ok(client, "item19_generic", {"k": "v"})  # logs at debug only
        levels = {record["level"] for record in server.log_records()}
    assert "info" in levels, server.stderr()
    assert "debug" not in levels, server.stderr()


def test_level_without_format_starts(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port, "logging: {level: warn}"))
    with sandbox.serve("--config", str(path), port=port) as server:
        with server.client() as client:
            notify_ok(client, "item19_generic", {"k": "v"})
        levels = {record["level"] for record in server.log_records()}
    assert not levels & {"debug", "info"}, server.stderr()


# -- literals in storage_policy ---------------------------------------------------------
#
# The in_memory backend supports no storage_policy key, and no other backend is installed
# yet, so no configuration with a storage_policy can start. The literal rules are still
# observable: a malformed literal is reported as such, whereas a well-formed one gets past
# the literal check and is refused only for the backend capability.

STREAM = """
notification_schema:
  item_stream:
    topic: {{base: item, key_order: [k]}}
    identifier:
      k: {{type: StringHandler, required: true}}
    storage_policy: {{{policy}}}
"""
UNSUPPORTED = "not supported by the 'in_memory' backend"


@pytest.mark.parametrize("literal", ["1.5h", "10 m", "0s"])
def test_invalid_retention_time_fails(sandbox: Sandbox, literal: str) -> None:
    failure = fails(sandbox, STREAM.format(policy=f'retention_time: "{literal}"'))
    failure.names("notification_schema.item_stream.storage_policy.retention_time")
    assert UNSUPPORTED not in failure.stderr, "refused for the backend, not for the literal"


def test_retention_time_90M_is_a_valid_literal(sandbox: Sandbox) -> None:
    failure = fails(sandbox, STREAM.format(policy='retention_time: "90M"'))
    failure.names("notification_schema.item_stream.storage_policy.retention_time", UNSUPPORTED)


@pytest.mark.parametrize("literal", ["10m", "0Mi", "1024", "1KB"])
def test_invalid_max_size_fails(sandbox: Sandbox, literal: str) -> None:
    failure = fails(sandbox, STREAM.format(policy=f'max_size: "{literal}"'))
    failure.names("notification_schema.item_stream.storage_policy.max_size")
    assert UNSUPPORTED not in failure.stderr, "refused for the backend, not for the literal"


def test_max_size_100Ki_is_a_valid_literal(sandbox: Sandbox) -> None:
    failure = fails(sandbox, STREAM.format(policy='max_size: "100Ki"'))
    failure.names("notification_schema.item_stream.storage_policy.max_size", UNSUPPORTED)


# -- unknown keys -----------------------------------------------------------------------


def test_unknown_top_level_key_is_ignored(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("config.yaml", config_text(port, "extras: {a: 1}"))
    with sandbox.serve("--config", str(path), port=port) as server, server.client() as client:
        notify_ok(client, "item27_generic", {"k": "v"})


def test_unknown_key_in_stream_auth_fails(sandbox: Sandbox) -> None:
    extra = """
    notification_schema:
      item_stream:
        identifier:
          k: {type: StringHandler, required: true}
        auth: {required: false, foo: 1}
    """
    fails(sandbox, extra).names("notification_schema.item_stream.auth", "foo")


# -- ecpds ------------------------------------------------------------------------------

ECPDS_AUTH = """
auth:
  enabled: true
  mode: trusted_proxy
  jwt_secret: "s3cret"
  admin_roles: {ecmwf: [admin]}
"""
ECPDS_STREAM = """
notification_schema:
  dissemination:
    topic: {base: diss, key_order: [destination]}
    identifier:
      destination: {type: StringHandler, required: true}
    auth: {required: true, plugins: [ecpds]}
"""
PLAIN_STREAM = """
notification_schema:
  dissemination:
    topic: {base: diss, key_order: [destination]}
    identifier:
      destination: {type: StringHandler, required: true}
"""


def ecpds(server: str) -> str:
    return f"""
ecpds:
  username: "svc-aviso"
  password: "ecpds-password"
  servers: ["{server}"]
  match_key: destination
"""


def test_plugin_stream_without_ecpds_section_fails(sandbox: Sandbox) -> None:
    fails(sandbox, ECPDS_AUTH + ECPDS_STREAM).names("ecpds", "dissemination")


def test_plain_http_remote_server_fails_when_plugin_used(sandbox: Sandbox) -> None:
    failure = fails(sandbox, ECPDS_AUTH + ECPDS_STREAM + ecpds("http://ecpds.example.net"))
    failure.names("ecpds.servers")


def test_plain_http_remote_server_starts_when_plugin_unused(sandbox: Sandbox) -> None:
    starts(sandbox, PLAIN_STREAM + ecpds("http://ecpds.example.net"))


def test_plain_http_localhost_server_is_accepted(sandbox: Sandbox) -> None:
    """Global auth must be on for a stream to use the plugin; the server starts with it."""
    port = free_port()
    extra = ECPDS_AUTH + ECPDS_STREAM + ecpds("http://localhost:9000")
    path = sandbox.write("config.yaml", config_text(port, extra))
    with sandbox.serve("--config", str(path), port=port) as server, server.client() as client:
        assert client.get("/api/v1/schema").json()["event_types"] == ["dissemination"]
