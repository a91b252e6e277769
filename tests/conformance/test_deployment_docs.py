"""The deployment examples (docs/deploy/) use only flags, paths, keys and
probe paths that exist. The Kubernetes manifest and the systemd unit are parsed, their
command lines checked against ``aviso-server serve --help`` and click's own parser, the
configuration they reference goes through ``aviso-server config check`` with their
environment, and a server started as the manifest starts it answers its probes and metrics.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
import pytest
import yaml

from aviso_host.cli import main
from aviso_host.routes.ops import ops_routes
from aviso_host.server import GRACEFUL_SHUTDOWN_SECONDS, uvicorn_config
from aviso_host.supervisor import STOP_DEADLINE_SECONDS
from tests.conformance.config_support import Sandbox
from tests.support.nats import NatsServer
from tests.support.process import free_port

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy"
MANIFEST = DEPLOY / "kubernetes.yaml"
UNIT = DEPLOY / "aviso-server.service"
CONFIG = DEPLOY / "config.yaml"
CONFIG_PATH = "/etc/aviso_server/config.yaml"
HAS_READY = any(getattr(route, "path", "") == "/ready" for route in ops_routes(".", "0"))


def manifest() -> dict[str, dict[str, Any]]:
    return {document["kind"]: document for document in yaml.safe_load_all(MANIFEST.read_text())}


def container() -> dict[str, Any]:
    [only] = manifest()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return only


def unit() -> dict[str, list[str]]:
    """``key -> values`` of the unit (systemd allows repeated keys such as Environment)."""
    entries: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            entries.setdefault(key.strip(), []).append(value.strip())
    return entries


def serve_arguments(command: list[str]) -> list[str]:
    """The arguments after ``aviso-server serve``, checked by click's own parser."""
    assert PurePosixPath(command[0]).name == "aviso-server", command
    assert command[1] == "serve", command
    arguments = command[2:]
    main.commands["serve"].make_context("serve", list(arguments))  # raises on unknown flags
    return arguments


def config_option(arguments: list[str]) -> str:
    return arguments[arguments.index("--config") + 1]


def manifest_environment() -> dict[str, str]:
    return {item["name"]: item["value"] for item in container()["env"] if "value" in item}


def unit_environment() -> dict[str, str]:
    return dict(item.split("=", 1) for item in unit()["Environment"])


@pytest.mark.parametrize(
    "command",
    [container()["command"], shlex.split(unit()["ExecStart"][0])],
    ids=["kubernetes", "systemd"],
)
def test_the_command_lines_use_existing_flags_and_the_helm_config_path(
    sandbox: Sandbox, command: list[str]
) -> None:
    arguments = serve_arguments(command)
    usage = sandbox.cli("serve", "--help")
    assert usage.returncode == 0, usage.stderr
    for flag in (argument for argument in arguments if argument.startswith("--")):
        assert flag in usage.stdout, flag
    assert config_option(arguments) == CONFIG_PATH


def test_the_manifest_mounts_the_example_configuration_where_the_command_reads_it() -> None:
    documents = manifest()
    mounted = documents["ConfigMap"]["data"]["config.yaml"]
    assert mounted == CONFIG.read_text()
    [mount] = container()["volumeMounts"]
    path = PurePosixPath(config_option(serve_arguments(container()["command"])))
    assert PurePosixPath(mount["mountPath"]) == path.parent
    [volume] = documents["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert volume["configMap"]["name"] == documents["ConfigMap"]["metadata"]["name"]


@pytest.mark.parametrize(
    "environment", [manifest_environment(), unit_environment()], ids=["kubernetes", "systemd"]
)
def test_config_check_accepts_the_configuration_with_the_deployment_environment(
    sandbox: Sandbox, environment: Mapping[str, str]
) -> None:
    checked = sandbox.cli("config", "check", str(CONFIG), env=environment)
    assert checked.returncode == 0, checked.stderr
    effective = yaml.safe_load(checked.stdout)
    # Every override reached a key (none was silently misspelt).
    for name, value in environment.items():
        node: Any = effective
        for key in name.removeprefix("AVISOSERVER_").lower().split("__"):
            node = node[key]
        assert str(node).lower() == value.lower(), name


def test_ports_probes_and_the_grace_period_match_the_server() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    ports = {port["name"]: port["containerPort"] for port in container()["ports"]}
    assert ports == {"http": config["application"]["port"], "metrics": config["metrics"]["port"]}
    assert container()["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container()["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    pod = manifest()["Deployment"]["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])
    drain = uvicorn_config(None, "127.0.0.1", 0).timeout_graceful_shutdown
    assert drain is not None
    assert pod["spec"]["terminationGracePeriodSeconds"] > drain
    assert int(unit()["TimeoutStopSec"][0]) > drain
    # Under --workers the supervisor kills workers still draining at its own deadline first.
    assert pod["spec"]["terminationGracePeriodSeconds"] > STOP_DEADLINE_SECONDS
    assert int(unit()["TimeoutStopSec"][0]) > STOP_DEADLINE_SECONDS
    guide = (DEPLOY.parent / "deployment.md").read_text()
    assert f"at most {GRACEFUL_SHUTDOWN_SECONDS} s" in guide
    assert f"{STOP_DEADLINE_SECONDS} s after the first" in guide
    assert unit()["KillSignal"] == ["SIGTERM"]


def test_a_server_started_as_the_manifest_starts_it_answers_probes_and_metrics(
    sandbox: Sandbox, nats_session: NatsServer
) -> None:
    """The manifest's command and environment; only addresses are moved to this machine."""
    port, metrics_port = free_port(), free_port()
    arguments = serve_arguments(container()["command"])
    arguments[arguments.index("--config") + 1] = str(CONFIG)
    env = {
        **manifest_environment(),
        "AVISOSERVER_NOTIFICATION_BACKEND__JETSTREAM__NATS_URL": nats_session.url,
        "AVISOSERVER_APPLICATION__HOST": "127.0.0.1",
        "AVISOSERVER_APPLICATION__PORT": str(port),
        "AVISOSERVER_METRICS__PORT": str(metrics_port),
    }
    with sandbox.serve(*arguments, port=port, env=env) as server:
        liveness = httpx.get(f"{server.url}{container()['livenessProbe']['httpGet']['path']}")
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
        readiness = httpx.get(f"{server.url}{container()['readinessProbe']['httpGet']['path']}")
    assert liveness.json() == {"status": "ok"}
    assert "aviso_otlp_export_failures_total" in metrics.text
    if HAS_READY:  # GET /ready is built on the nats branch; asserted once merged
        assert readiness.status_code == 200, readiness.text
