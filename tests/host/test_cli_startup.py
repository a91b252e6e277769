"""``aviso-server --version``, ``--help`` and ``plugins`` answer without importing what only
serving needs.

``--help`` and ``plugins`` discover every plugin, which imports every module of the ``aviso``
entry-point group: those modules import their heavy libraries where they use them (the
geometry parsers, the auth plugins' upstream calls; not nats-py, which the JetStream
backend's hot path uses, nor httpx, which the webhook delivery kind is built on), and the CLI
imports the
configuration, logging and the app inside the commands that need them. Checked by module
name in a fresh interpreter, not by timing (the figures are in docs/performance.md).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.support.process import CLI_TIMEOUT, clean_environment

# Top-level modules a quick command must not import, each with what it is for.
NOT_FOR_QUICK_COMMANDS = {
    "numpy": "coordinate parsing (aviso_plugins._shared.geometry)",
    "shapely": "spatial filtering",
    "nats": "the JetStream backend's connection",
    "httpx": "the auth plugins' upstream calls and the http sink",
    "jsonschema": "configuration validation",
    "yaml": "configuration files",
    "starlette": "the HTTP app",
    "uvicorn": "the HTTP server",
    "prometheus_client": "metrics",
    "orjson": "the wire encoding",
    "opentelemetry": "log export",
    "grpc": "log export",
    "pyspark": "the spark commands",
    "pyarrow": "the spark commands",
    "locust": "the load commands",
}
# What discovery may load all the same, for the commands that discover plugins: the
# JetStream backend module imports nats-py at its top, since imports inside its publish path
# would cost every notify; the webhook delivery kind is written on httpx's types throughout.
DISCOVERY_MAY_LOAD = ("nats", "httpx")
# The host's own heavy parts, imported by the commands that need them.
HOST_MODULES = ("aviso_host.config", "aviso_host.logs", "aviso_host.app")
# Plugin modules --help and plugins import (discovery), to show the check is not vacuous.
DISCOVERED = (
    "aviso_plugins._shared.geometry",
    "aviso_builtins.auth.auth_o_tron",
    "aviso_builtins.auth.ecpds",
    "aviso_builtins.backends.jetstream.backend",
    "aviso_builtins.sinks.http",
)

CHILD = """
import json, sys
from aviso_host.cli import main
status = None
try:
    main(sys.argv[1:])
except SystemExit as exc:
    status = exc.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def loaded_by(*args: str) -> tuple[str, set[str]]:
    """The command's standard output and the modules loaded once it answered."""
    result = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        env=clean_environment({"AVISO_BLOCK_PLUGINS": ""}),
    )
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report["status"] in (0, None), result.stderr
    return result.stdout, set(report["modules"])


def heavy_in(modules: set[str], allowed: tuple[str, ...] = ()) -> list[str]:
    tops = {name.split(".")[0] for name in modules} - set(allowed)
    return sorted(
        [f"{name} ({why})" for name, why in NOT_FOR_QUICK_COMMANDS.items() if name in tops]
        + [name for name in HOST_MODULES if name in modules]
    )


def test_the_listed_libraries_are_installed() -> None:
    # A module that is not installed could never be loaded, and the checks below would pass
    # whatever the CLI imported: the test environment installs every one of them.
    missing = [name for name in NOT_FOR_QUICK_COMMANDS if importlib.util.find_spec(name) is None]
    assert missing == []


def test_version_imports_neither_plugins_nor_heavy_libraries() -> None:
    stdout, modules = loaded_by("--version")
    assert stdout.startswith("aviso-server, version ")
    assert heavy_in(modules) == []
    # Nor plugin discovery: pluggy, the plugin API, the host's discovery module.
    tops = {name.split(".")[0] for name in modules}
    assert not tops & {"aviso_builtins", "aviso_plugins", "pluggy"}
    assert "aviso_host.plugins" not in modules


@pytest.mark.parametrize(
    ("command", "shown"),
    [("--help", ("  spark ", "  load ")), ("plugins", ("jetstream_backend", "spark_commands"))],
)
def test_discovering_plugins_imports_no_heavy_library(command: str, shown: tuple[str, ...]) -> None:
    stdout, modules = loaded_by(command)
    # Every built-in plugin was imported, and what the plugins provide is listed.
    assert set(DISCOVERED) <= modules
    for text in shown:
        assert text in stdout
    assert heavy_in(modules, DISCOVERY_MAY_LOAD) == []
