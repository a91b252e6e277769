"""aviso-server 0.13 configuration: a configuration using every
0.13 key starts and ``aviso-server config check`` accepts it; a bad homepage URL or an OTLP
block without an endpoint fails naming the key; a 0.7.1 example still starts. Plus the
per-schema replay cap (both backends), the stricter cap validation and the JetStream
``workqueue`` refusal.
"""

from __future__ import annotations

import copy
from pathlib import Path

import httpx
import pytest

from aviso_host.service import server_version
from tests.conformance.config_support import Sandbox, config_text, notify_ok
from tests.conformance.helpers import REPLAY, gauge, read_stream, unique_basin
from tests.support.configs import API_EXAMPLE, ForBackend
from tests.support.process import free_port
from tests.support.server import running_server

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

LEGACY_EXAMPLE = Path(__file__).with_name("aviso_server_config.yaml")

HOMEPAGE = {
    "client_documentation_url": "https://docs.example.org/client/",
    "client_repository_url": "https://git.example.org/client",
    "server_documentation_url": "http://docs.example.org:8080/server/",
    "server_repository_url": "https://git.example.org/server?tab=readme",
}


def every_013_key(port: int, metrics_port: int, collector_port: int) -> str:
    """Every key 0.13 adds or changes, next to the unchanged ones."""
    homepage = "\n".join(f"    {key}: '{url}'" for key, url in HOMEPAGE.items())
    return f"""\
application:
  host: 127.0.0.1
  port: {port}
  base_url: http://127.0.0.1:{port}
  homepage:
{homepage}
logging:
  level: info
  format: json
  otlp:
    enabled: true
    endpoint: 127.0.0.1:{collector_port}
    protocol: grpc
metrics: {{enabled: true, host: 127.0.0.1, port: {metrics_port}}}
watch_endpoint:
  max_historical_notifications: 500
  replay_batch_size: 100
notification_backend:
  kind: in_memory
  in_memory: {{max_history_per_topic: 100}}
  jetstream:
    nats_url: nats://127.0.0.1:4222
    storage_type: file
    retention_policy: limits
    discard_policy: old
    replicas: 1
notification_schema:
  swath:
    max_historical_notifications: 20
    topic: {{base: swath, key_order: [satellite]}}
    identifier:
      satellite: {{type: StringHandler, required: true}}
      point_cloud: {{type: PointCloudHandler, required: true, max_points: 500}}
  gauge:
    max_historical_notifications: 3
    topic: {{base: gauge, key_order: [basin]}}
    identifier:
      basin: {{type: StringHandler, required: true}}
"""


def test_a_configuration_with_every_0_13_key_starts_and_passes_config_check(
    sandbox: Sandbox,
) -> None:
    port, metrics_port, collector_port = free_port(), free_port(), free_port()
    path = sandbox.write("full.yaml", every_013_key(port, metrics_port, collector_port))
    checked = sandbox.cli("config", "check", str(path))
    assert checked.returncode == 0, checked.stderr
    assert "warning" not in checked.stderr
    assert "max_historical_notifications: 20" in checked.stdout
    with sandbox.serve("--config", str(path), port=port) as server, server.client() as client:
        notify_ok(client, "gauge", {"basin": "rhine"})
        home = client.get("/")
        schema = client.get("/api/v1/schema/gauge").json()
    assert home.status_code == 200
    assert f"version {server_version()}" in home.text
    for url in HOMEPAGE.values():
        assert f'href="{url}"' in home.text.replace("&amp;", "&")
    # The replay cap override is configuration, not part of the published schema.
    assert "max_historical_notifications" not in str(schema)


def test_the_home_page_links_default_to_the_ecmwf_projects(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("plain.yaml", config_text(port))
    with sandbox.serve("--config", str(path), port=port) as server, server.client() as client:
        page = client.get("/").text
    for url in (
        "https://pyaviso.readthedocs.io/",
        "https://github.com/ecmwf/pyaviso",
        "https://github.com/ecmwf/aviso-server",
    ):
        assert f'href="{url}"' in page


@pytest.mark.parametrize(
    "url",
    [
        "ftp://docs.example.org/",
        "/relative/docs",
        "https://user:secret@docs.example.org/",
        "https://",
    ],
    ids=["scheme", "relative", "userinfo", "no-host"],
)
def test_a_bad_homepage_url_fails_naming_the_key(sandbox: Sandbox, url: str) -> None:
    port = free_port()
    text = config_text(port, application=f"homepage: {{server_documentation_url: '{url}'}}")
    path = sandbox.write("homepage.yaml", text)
    key = "application.homepage.server_documentation_url"
    sandbox.serve_fails("--config", str(path), port=port).names(key, "must be an absolute")
    checked = sandbox.cli("config", "check", str(path))
    assert checked.returncode != 0 and key in checked.stderr, checked.stderr


def test_an_otlp_block_without_an_endpoint_fails_naming_the_key(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("otlp.yaml", config_text(port, "logging: {otlp: {enabled: true}}"))
    sandbox.serve_fails("--config", str(path), port=port).names("logging.otlp.endpoint")
    checked = sandbox.cli("config", "check", str(path))
    assert checked.returncode != 0 and "logging.otlp.endpoint" in checked.stderr


def test_an_unknown_otlp_protocol_fails_naming_the_key(sandbox: Sandbox) -> None:
    path = sandbox.write(
        "proto.yaml",
        config_text(free_port(), "logging: {otlp: {enabled: true, endpoint: x, protocol: udp}}"),
    )
    checked = sandbox.cli("config", "check", str(path))
    assert checked.returncode != 0 and "logging.otlp.protocol" in checked.stderr


def test_a_0_7_1_example_configuration_still_starts(sandbox: Sandbox) -> None:
    port = free_port()
    checked = sandbox.cli("config", "check", str(LEGACY_EXAMPLE))
    assert checked.returncode == 0, checked.stderr
    with sandbox.serve("--config", str(LEGACY_EXAMPLE), "--port", str(port), port=port) as server:
        assert httpx.get(f"{server.url}/health", timeout=10).json() == {"status": "ok"}


def test_a_cap_of_0_that_0_7_1_accepted_starts_with_a_warning(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write(
        "zero.yaml", config_text(port, "watch_endpoint: {max_historical_notifications: 0}")
    )
    checked = sandbox.cli("config", "check", str(path))
    assert checked.returncode == 0, checked.stderr
    assert "warning: watch_endpoint.max_historical_notifications" in checked.stderr
    with sandbox.serve("--config", str(path), port=port) as server:
        warnings = [
            record["message"]
            for record in server.log_records()
            if record.get("event_name") == "config.warning"
        ]
    assert any("max_historical_notifications" in warning for warning in warnings)


@pytest.mark.parametrize("value", ["-1", "2.5", "unlimited"])
def test_a_cap_that_is_not_a_positive_integer_fails_config_load(
    sandbox: Sandbox, value: str
) -> None:
    path = sandbox.write(
        "cap.yaml",
        config_text(free_port(), f"watch_endpoint: {{max_historical_notifications: {value}}}"),
    )
    checked = sandbox.cli("config", "check", str(path))
    assert checked.returncode != 0
    assert "watch_endpoint.max_historical_notifications" in checked.stderr


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "unlimited"])
def test_a_per_schema_cap_must_be_a_positive_integer(sandbox: Sandbox, value: str) -> None:
    schema = f"""
notification_schema:
  gauge:
    max_historical_notifications: {value}
    topic: {{base: gauge, key_order: [basin]}}
    identifier:
      basin: {{type: StringHandler, required: true}}
"""
    path = sandbox.write("schema_cap.yaml", config_text(free_port(), schema))
    checked = sandbox.cli("config", "check", str(path))
    assert checked.returncode != 0
    assert "notification_schema.gauge.max_historical_notifications" in checked.stderr


WORKQUEUE_JETSTREAM = "{kind: jetstream, jetstream: {retention_policy: workqueue}}"
WORKQUEUE_POLICY = """
notification_schema:
  gauge:
    topic: {base: gauge, key_order: [basin]}
    storage_policy: {retention_policy: workqueue}
    identifier:
      basin: {type: StringHandler, required: true}
"""


def test_workqueue_retention_is_refused_at_startup(sandbox: Sandbox) -> None:
    port = free_port()
    section = sandbox.write("wq.yaml", config_text(port, backend=WORKQUEUE_JETSTREAM))
    key = "notification_backend.jetstream.retention_policy"
    sandbox.serve_fails("--config", str(section), port=port).names(key, "workqueue")
    checked = sandbox.cli("config", "check", str(section))
    assert checked.returncode != 0 and key in checked.stderr
    policy = sandbox.write("wq_policy.yaml", config_text(port, WORKQUEUE_POLICY))
    checked = sandbox.cli("config", "check", str(policy))
    assert checked.returncode != 0
    assert "notification_schema.gauge.storage_policy.retention_policy" in checked.stderr


# -- the per-schema cap at work, on both backends ------------------------------------------


def test_a_schema_cap_overrides_the_watch_endpoint_cap(for_backend: ForBackend) -> None:
    document = copy.deepcopy(API_EXAMPLE)
    document["notification_schema"]["river_gauge"]["max_historical_notifications"] = 2
    with (
        running_server(for_backend(document)) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        basin = unique_basin()
        for level in range(4):
            gauge(client, basin, level)
        body = {"event_type": "river_gauge", "identifier": {"basin": basin}, "from_id": "0"}
        result = read_stream(client, REPLAY, body)
    kinds = [event.kind for event in result.events if event.name != "heartbeat"]
    assert kinds.count("replay") == 2
    [limit] = [
        event.data
        for event in result.events
        if event.kind == "replay-control/notification_replay_limit_reached"
    ]
    assert limit["max_allowed"] == 2
