"""Configuration compatibility: a file aviso-server 0.7.1 accepted still starts
(with a warning for each thing 0.13 would refuse, naming the key and the upstream rule),
a 0.13-style file with a ``PointCloudHandler`` starts, and ``aviso-server config check``
reports the same warnings.
"""

from __future__ import annotations

import pytest

from tests.conformance.config_support import (
    Sandbox,
    cloudevents,
    config_text,
    notify_ok,
    replay,
)
from tests.support.process import free_port

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

# Everything here was valid for 0.7.1 and is a startup error for 0.13.
LEGACY_SCHEMAS = """
notification_schema:
  gauge_reading:
    topic: {base: "gauge.v1", key_order: [basin]}
    identifier:
      basin: {type: StringHandler, required: true}
      stage_m: {type: FloatHandler, required: false}
  Rain:
    topic: {base: Rain, key_order: [region]}
    identifier:
      region: {type: StringHandler, required: true}
  rain_copy:
    topic: {base: rain, key_order: [region]}
    identifier:
      region: {type: StringHandler, required: true}
  outline:
    topic: {base: outline, key_order: [tag]}
    identifier:
      tag: {type: StringHandler, required: true}
      area: {type: PolygonHandler, required: false}
"""

LEGACY_WARNINGS = [
    "notification_schema.gauge_reading.topic.base: 'gauge.v1' is an invalid topic base",
    "notification_schema.gauge_reading.topic.key_order: identifier 'stage_m' is left out",
    "notification_schema.rain_copy.topic.base: 'rain' and the base of event type 'Rain' "
    "differ only in case",
    "notification_schema.outline.identifier.area: a PolygonHandler field must be named 'polygon'",
]

POINT_CLOUD_SCHEMAS = """
notification_schema:
  swath:
    topic: {base: swath, key_order: [satellite]}
    identifier:
      satellite: {type: StringHandler, required: true}
      point_cloud: {type: PointCloudHandler, required: true, max_points: 500}
"""


def config_warnings(records: list[dict[str, object]]) -> list[str]:
    return [
        str(record["message"]) for record in records if record.get("event_name") == "config.warning"
    ]


def test_a_0_7_1_configuration_starts_with_warnings(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("legacy.yaml", config_text(port, LEGACY_SCHEMAS))
    with sandbox.serve("--config", str(path), port=port) as server:
        with server.client() as client:
            notify_ok(client, "gauge_reading", {"basin": "rhine", "stage_m": 3.5})
            delivered = cloudevents(replay(client, "gauge_reading", {"basin": "rhine"}))
        warnings = config_warnings(server.log_records())
    assert [event["data"]["identifier"]["stage_m"] for event in delivered] == ["3.5"]
    for expected in LEGACY_WARNINGS:
        [warning] = [warning for warning in warnings if warning.startswith(expected)]
        assert "aviso-server 0.13" in warning, warning


def test_a_0_13_configuration_with_a_point_cloud_starts(sandbox: Sandbox) -> None:
    port = free_port()
    path = sandbox.write("current.yaml", config_text(port, POINT_CLOUD_SCHEMAS))
    with sandbox.serve("--config", str(path), port=port) as server:
        with server.client() as client:
            schema = client.get("/api/v1/schema/swath").json()
            cloud = [[47.1, 8.2], [47.3, 8.4]]
            notify_ok(client, "swath", {"satellite": "s1", "point_cloud": cloud})
            square = [[47.0, 8.0], [47.0, 8.3], [47.2, 8.3], [47.2, 8.0], [47.0, 8.0]]
            query = {"satellite": "s1", "polygon": square}
            delivered = cloudevents(replay(client, "swath", query))
        warnings = config_warnings(server.log_records())
    assert schema["schema"]["identifier"]["point_cloud"]["max_points"] == 500, schema
    assert [event["data"]["identifier"] for event in delivered] == [
        {"satellite": "s1", "point_cloud": cloud}
    ]
    assert warnings == []


def test_config_check_reports_the_warnings(sandbox: Sandbox) -> None:
    path = sandbox.write("legacy.yaml", config_text(8000, LEGACY_SCHEMAS))
    result = sandbox.cli("config", "check", str(path))
    assert result.returncode == 0, result.stderr
    reported = [
        line.removeprefix("warning: ")
        for line in result.stderr.splitlines()
        if line.startswith("warning: ")
    ]
    for expected in LEGACY_WARNINGS:
        assert any(line.startswith(expected) for line in reported), (expected, result.stderr)
    assert "gauge_reading:" in result.stdout  # stdout is still the effective configuration


def test_config_check_of_a_point_cloud_configuration_is_clean(sandbox: Sandbox) -> None:
    path = sandbox.write("current.yaml", config_text(8000, POINT_CLOUD_SCHEMAS))
    result = sandbox.cli("config", "check", str(path))
    assert result.returncode == 0, result.stderr
    assert "warning:" not in result.stderr, result.stderr
