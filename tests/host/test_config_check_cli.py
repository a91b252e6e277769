"""``aviso-server config check`` as an operator runs it: on a file, or on exactly what
``serve`` would read (its file cascade and ``AVISOSERVER_*`` variables); unknown keys and
variables are warnings (errors with ``--strict``), and ``serve`` logs the same warnings."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.process import (
    CLI_TIMEOUT,
    aviso_command,
    aviso_process,
    clean_environment,
)

pytestmark = pytest.mark.heavy

CONFIG = """
application: {host: 127.0.0.1, port: 0}
notification_backend: {kind: in_memory}
logging: {levle: warn}
auth: {jwt_secret: a-long-jwt-signing-secret}
"""

LEVLE = "logging.levle: unknown key (did you mean 'level'?)"
VARIABLE = (
    "AVISOSERVER_WATCH_ENDPOINT__REPLAY_BATCH_SIZ: matches no configuration key "
    "(did you mean AVISOSERVER_WATCH_ENDPOINT__REPLAY_BATCH_SIZE?)"
)


def _check(directory: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    """``config check`` run in ``directory`` (also the home directory), as an operator would."""
    return subprocess.run(
        aviso_command("config", "check", *args),
        env=clean_environment({"HOME": str(directory), **variables}),
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def _cascade(tmp_path: Path, text: str = CONFIG) -> Path:
    (tmp_path / "configuration").mkdir()
    config = tmp_path / "configuration" / "config.yaml"
    config.write_text(text)
    return config


def test_without_a_path_it_checks_what_serve_would_read(tmp_path: Path) -> None:
    config = _cascade(tmp_path)
    variables = {"AVISOSERVER_WATCH_ENDPOINT__REPLAY_BATCH_SIZ": "5"}
    check = _check(tmp_path, **variables)
    assert check.returncode == 0, check.stderr
    assert check.stdout == f"OK: {config}, AVISOSERVER_WATCH_ENDPOINT__REPLAY_BATCH_SIZ\n"
    assert check.stderr.splitlines() == [f"warning: {LEVLE}", f"warning: {VARIABLE}"]

    shown = _check(tmp_path, "--show", AVISOSERVER_METRICS__PORT="9191")
    assert shown.returncode == 0, shown.stderr
    effective = yaml.safe_load(shown.stdout)
    assert effective["metrics"] == {"port": 9191}  # the environment applied, as at serve
    assert effective["auth"]["jwt_secret"] == "[REDACTED]"
    assert "a-long-jwt-signing-secret" not in shown.stdout + shown.stderr

    other = tmp_path / "other.yaml"
    other.write_text("application: {host: 127.0.0.1, port: 0}\n")
    chosen = _check(tmp_path, AVISOSERVER_CONFIG_FILE=str(other))
    assert chosen.returncode == 1
    assert chosen.stderr == "Error: missing required key 'notification_backend'\n"


def test_defaults_shows_every_setting_the_server_runs_with(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG + "limits: {max_body_bytes: 4096}\n")
    shown = _check(tmp_path, str(config), "--defaults")
    assert shown.returncode == 0, shown.stderr
    effective = yaml.safe_load(shown.stdout)
    assert effective["limits"]["max_body_bytes"] == 4096  # as written
    assert effective["limits"]["max_json_depth"] == 64  # the declared default
    assert effective["metrics"] == {"enabled": False, "host": "127.0.0.1"}
    assert effective["notification_backend"]["in_memory"]["max_topics"] == 10_000
    assert effective["auth"]["jwt_secret"] == "[REDACTED]"
    assert "a-long-jwt-signing-secret" not in shown.stdout + shown.stderr


def test_strict_makes_unknown_keys_and_variables_errors(tmp_path: Path) -> None:
    config = _cascade(tmp_path)
    variables = {"AVISOSERVER_WATCH_ENDPOINT__REPLAY_BATCH_SIZ": "5"}
    for args in ((), (str(config),)):
        strict = _check(tmp_path, "--strict", *args, **variables)
        assert strict.returncode == 1
        assert strict.stdout == ""
        assert strict.stderr.splitlines() == [f"Error: {LEVLE}", f"Error: {VARIABLE}"]
    # A path keeps printing the effective configuration, as it always did.
    lenient = _check(tmp_path, str(config))
    assert lenient.returncode == 0, lenient.stderr
    # An unknown key's value is masked like a secret: nothing reads it to say otherwise.
    assert yaml.safe_load(lenient.stdout)["logging"] == {"levle": "[REDACTED]"}


def test_a_misspelled_required_section_names_the_unknown_key(tmp_path: Path) -> None:
    _cascade(tmp_path, CONFIG.replace("notification_backend", "notificaton_backend"))
    check = _check(tmp_path)
    assert check.returncode == 1
    assert check.stderr == (
        "Error: missing required key 'notification_backend' "
        "(unknown key 'notificaton_backend' looks like 'notification_backend')\n"
    )


def test_serve_logs_each_unknown_key_and_variable_as_a_config_warning(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    log = tmp_path / "server.log"
    variables = {"AVISOSERVER_WATCH_ENDPOINT__REPLAY_BATCH_SIZ": "5"}
    with aviso_process(config, log, variables) as (url, _):
        assert httpx.get(f"{url}/health", timeout=10.0).status_code == 200
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    warned = [event["message"] for event in events if event.get("event_name") == "config.warning"]
    assert LEVLE in warned
    assert VARIABLE in warned
