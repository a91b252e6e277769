"""Log records exported over OTLP (``logging.otlp``) to a loopback
collector started by the test, the audit fields ``username`` / ``auth_realm`` on every
request log line (JSON and OTLP), and a collector that is down or hangs never blocking a
request nor holding more than the export queue (``aviso_otlp_*`` counters).

Every server is a real ``aviso-server serve`` child process.
"""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from aviso_builtins.otlp.export import MAX_QUEUE_SIZE
from tests.conformance.config_support import Sandbox, config_text, notify, notify_ok
from tests.support.fake_auth_o_tron import fake_auth_o_tron
from tests.support.fake_otlp import LOGS_PATH, otlp_grpc_receiver, otlp_receiver
from tests.support.process import free_port
from tests.support.tokens import basic

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

SCHEMAS = """
notification_schema:
  alerts:
    topic: {base: alerts, key_order: [site]}
    identifier:
      site: {type: StringHandler, required: true}
"""
# The batch delay (default 1 s) shortened so the test does not wait for it.
QUICK_EXPORT = {"OTEL_BLRP_SCHEDULE_DELAY": "50"}
MAX_REQUEST_ROUNDS = 40
FAILURE_WAIT = 60.0  # the exporter retries a refused export for its 5 s timeout first
POLL_STEP = 0.2
ROUND = 250


def otlp_config(port: int, endpoint: str, extra: str = "", metrics_port: int | None = None) -> str:
    metrics = (
        f"metrics: {{enabled: true, host: 127.0.0.1, port: {metrics_port}}}\n"
        if metrics_port
        else ""
    )
    return config_text(
        port,
        f"logging: {{level: info, otlp: {{enabled: true, endpoint: '{endpoint}', "
        f"protocol: http}}}}\n{metrics}{extra}{SCHEMAS}",
    )


def request_lines(records: list[dict[str, Any]], request_id: str) -> list[dict[str, Any]]:
    return [
        record
        for record in records
        if record.get("request_id") == request_id and record.get("event_name") == "http.request"
    ]


def scrape(metrics_port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    return {
        match[1]: float(match[2])
        for match in re.finditer(r"^(aviso_otlp_\w+_total) (\S+)$", text, re.MULTILINE)
    }


def test_records_reach_the_collector_with_request_ids_and_audit_fields(sandbox: Sandbox) -> None:
    port = free_port()
    with fake_auth_o_tron() as aot, otlp_receiver() as receiver:
        auth = (
            f"auth: {{enabled: true, mode: direct, auth_o_tron_url: '{aot.url}', "
            "jwt_secret: test-jwt-secret, admin_roles: {localrealm: [admin]}}\n"
        )
        path = sandbox.write("otlp.yaml", otlp_config(port, receiver.endpoint, auth))
        with sandbox.serve("--config", str(path), port=port, env=QUICK_EXPORT) as server:
            with server.client() as client:
                client.headers.update(basic("producer-user", "producer-pass"))
                signed = client.post(
                    "/api/v1/notification",
                    json={"event_type": "alerts", "identifier": {"site": "a"}},
                )
                assert signed.status_code == 200, signed.text
            anonymous = httpx.get(f"{server.url}/api/v1/schema", timeout=10)
            assert anonymous.status_code == 200
            ids = {
                "signed": signed.headers["x-request-id"],
                "anonymous": anonymous.headers["x-request-id"],
            }
            receiver.wait_for(
                lambda: all(receiver.with_attribute("request_id", rid) for rid in ids.values())
            )
            json_lines = server.log_records()

    # Missing scheme became http://, the http protocol appended /v1/logs.
    assert set(receiver.paths) == {LOGS_PATH}
    expected = {"signed": ("producer-user", "localrealm"), "anonymous": ("anonymous", "none")}
    for name, request_id in ids.items():
        [exported] = [
            record
            for record in receiver.with_attribute("request_id", request_id)
            if record.attributes.get("event_name") == "http.request"
        ]
        [line] = request_lines(json_lines, request_id)
        username, realm = expected[name]
        assert (exported.attributes["username"], exported.attributes["auth_realm"]) == (
            username,
            realm,
        )
        assert (line["username"], line["auth_realm"]) == (username, realm)
        assert exported.body == line["message"]
        assert exported.severity == "INFO"
        assert exported.resource["service.name"] == "aviso-server"


def test_records_reach_a_grpc_collector_by_default(sandbox: Sandbox) -> None:
    """No ``protocol``: gRPC, plaintext for a scheme-less endpoint. The resource carries
    ``OTEL_RESOURCE_ATTRIBUTES`` under aviso's own name and version, and each export the
    headers of ``OTEL_EXPORTER_OTLP_LOGS_HEADERS``."""
    port = free_port()
    with otlp_grpc_receiver() as receiver:
        text = config_text(
            port,
            f"logging: {{otlp: {{enabled: true, endpoint: '{receiver.endpoint}'}}}}\n{SCHEMAS}",
        )
        path = sandbox.write("grpc.yaml", text)
        env = {
            **QUICK_EXPORT,
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test,service.name=other",
            "OTEL_EXPORTER_OTLP_LOGS_HEADERS": "x-collector-key=k%20ey",
        }
        with sandbox.serve("--config", str(path), port=port, env=env) as server:
            with server.client() as client:
                notified = notify(client, "alerts", {"site": "g"})
                assert notified.status_code == 200, notified.text
                request_id = notified.headers["x-request-id"]
            receiver.wait_for(lambda: bool(receiver.with_attribute("request_id", request_id)))
            [line] = request_lines(server.log_records(), request_id)
    [exported] = [
        record
        for record in receiver.with_attribute("request_id", request_id)
        if record.attributes.get("event_name") == "http.request"
    ]
    assert exported.body == line["message"]
    assert exported.severity == "INFO"
    assert exported.attributes == {
        key: value
        for key, value in line.items()
        if key not in {"timestamp", "level", "message"} and value is not None
    }
    assert exported.resource["service.name"] == "aviso-server"
    assert exported.resource["deployment.environment"] == "test"
    assert all(metadata["x-collector-key"] == "k ey" for metadata in receiver.metadata)


def test_audit_fields_without_auth_and_the_endpoint_from_the_environment(
    sandbox: Sandbox,
) -> None:
    """``AVISOSERVER_LOGGING__OTLP__ENDPOINT`` supplies the endpoint a file leaves out; every
    request line says ``anonymous`` / ``none`` when auth is off."""
    port = free_port()
    with otlp_receiver() as receiver:
        text = config_text(port, f"logging: {{otlp: {{enabled: true, protocol: http}}}}\n{SCHEMAS}")
        path = sandbox.write("env.yaml", text)
        env = {**QUICK_EXPORT, "AVISOSERVER_LOGGING__OTLP__ENDPOINT": receiver.url}
        with sandbox.serve("--config", str(path), port=port, env=env) as server:
            with server.client() as client:
                notify_ok(client, "alerts", {"site": "b"})
                missing = client.get("/no/such/page")
            request_id = missing.headers["x-request-id"]
            receiver.wait_for(lambda: bool(receiver.with_attribute("request_id", request_id)))
            records = server.log_records()
    lines = [record for record in records if record.get("event_name") == "http.request"]
    assert {line["path"] for line in lines} >= {"/api/v1/notification", "/no/such/page"}
    assert all((line["username"], line["auth_realm"]) == ("anonymous", "none") for line in lines)
    [exported] = receiver.with_attribute("request_id", request_id)
    assert exported.attributes["status"] == 404
    assert (exported.attributes["username"], exported.attributes["auth_realm"]) == (
        "anonymous",
        "none",
    )


def test_a_hanging_collector_blocks_no_request_and_holds_at_most_the_queue(
    sandbox: Sandbox,
) -> None:
    """While the collector holds an export unanswered, requests keep answering; records
    beyond the bounded queue are dropped and counted, not accumulated."""
    port, metrics_port = free_port(), free_port()
    with otlp_receiver(hang=True) as receiver:
        path = sandbox.write(
            "hang.yaml", otlp_config(port, receiver.endpoint, metrics_port=metrics_port)
        )
        with sandbox.serve("--config", str(path), port=port, env=QUICK_EXPORT) as server:
            receiver.wait_for(lambda: receiver.hanging > 0)
            answered = 0
            with server.client() as client:
                for _ in range(MAX_REQUEST_ROUNDS):
                    for _ in range(ROUND):
                        assert client.get("/health").status_code == 200
                        answered += 1
                    counters = scrape(metrics_port)
                    if counters["aviso_otlp_suppressed_log_records_total"] > 0:
                        break
            assert receiver.hanging > 0, "the collector must still be hanging"
            with receiver.changed:
                received = len(receiver.records)
    suppressed = counters["aviso_otlp_suppressed_log_records_total"]
    assert suppressed > 0
    # Each request logged one line. Whatever the collector did not take is either queued
    # (at most the queue) or in the batch being exported (at most one batch), or dropped.
    in_flight_batch = 512
    assert suppressed >= answered - received - MAX_QUEUE_SIZE - in_flight_batch


def test_a_collector_that_is_down_counts_failed_exports(sandbox: Sandbox) -> None:
    """Nothing listens at the endpoint: requests answer as usual and the failed exports
    show in ``aviso_otlp_export_failures_total`` (after the exporter's own retries)."""
    port, metrics_port, dead = free_port(), free_port(), free_port()
    path = sandbox.write(
        "down.yaml", otlp_config(port, f"127.0.0.1:{dead}", metrics_port=metrics_port)
    )
    server = sandbox.serve("--config", str(path), port=port, env=QUICK_EXPORT)
    with server as running, running.client() as client:
        notify_ok(client, "alerts", {"site": "c"})
        deadline = time.monotonic() + FAILURE_WAIT
        while scrape(metrics_port)["aviso_otlp_export_failures_total"] == 0:
            assert time.monotonic() < deadline, "no failed export counted"
            notify_ok(client, "alerts", {"site": "c"})  # still answering meanwhile
            time.sleep(POLL_STEP)
