"""A plugin that cannot start fails ``aviso-server serve`` with one ``Error:`` line naming the
key, the reason and the plugin, as a constructor failure does; the traceback is logged at
debug level only."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.process import aviso_command, clean_environment

pytestmark = pytest.mark.heavy

SERVE_TIMEOUT = 60.0


def _serve(config: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        aviso_command("serve", "--config", str(config), "--port", "0"),
        env=clean_environment(env),
        capture_output=True,
        text=True,
        timeout=SERVE_TIMEOUT,
        check=False,
    )


def _unstartable_distribution(root: Path) -> None:
    (root / "aviso_unstartable.py").write_text(
        "from aviso_builtins.backends.in_memory import InMemoryBackend\n"
        "from aviso_plugins import hookimpl\n"
        "class Unstartable(InMemoryBackend):\n"
        "    kind = 'unstartable'\n"
        "    async def start(self):\n"
        "        raise OSError('the disk is on fire')\n"
        "@hookimpl\n"
        "def aviso_storage_backends():\n"
        "    return [Unstartable]\n"
    )
    info = root / "aviso_unstartable-0.4.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: aviso-unstartable\nVersion: 0.4.0\n"
    )
    (info / "entry_points.txt").write_text("[aviso]\nunstartable = aviso_unstartable\n")


def test_a_backend_whose_start_raises_is_one_error_line(tmp_path: Path) -> None:
    _unstartable_distribution(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(
        "application: {host: 127.0.0.1, port: 0}\nnotification_backend: {kind: unstartable}\n"
    )
    result = _serve(config, {"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "Error: notification_backend.unstartable: OSError: the disk is on fire "
        "[storage backend 'unstartable' (entry point 'unstartable' of aviso-unstartable 0.4.0)]"
    )
    assert [line for line in result.stderr.splitlines() if "disk is on fire" in line] == [
        result.stderr.splitlines()[-1]
    ]


def test_the_traceback_is_logged_at_debug_level(tmp_path: Path) -> None:
    _unstartable_distribution(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(
        "application: {host: 127.0.0.1, port: 0}\nnotification_backend: {kind: unstartable}\n"
        "logging: {level: debug}\n"
    )
    result = _serve(config, {"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "the disk is on fire" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("Error: notification_backend.unstartable:")


@contextmanager
def _silent_listener() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections and never says anything (a NATS
    client waits for the server's INFO until its timeout)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def test_jetstream_that_cannot_connect_says_why_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    with _silent_listener() as port:
        config.write_text(
            "application: {host: 127.0.0.1, port: 0}\n"
            "notification_backend:\n"
            "  kind: jetstream\n"
            f"  jetstream: {{nats_url: 'nats://127.0.0.1:{port}', retry_attempts: 1,"
            " timeout_seconds: 1}\n"
        )
        result = _serve(config)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    error = result.stderr.splitlines()[-1]
    assert error.startswith(
        f"Error: notification_backend.jetstream: BackendUnavailable: could not connect to NATS "
        f"at nats://127.0.0.1:{port} after 1 attempts: no answer within 1 s"
    ), error
    assert error.endswith(
        "[storage backend 'jetstream' (entry point 'jetstream_backend' of aviso-py 0.1.0)]"
    )
