"""Misspelled secret keys: a value nobody reads is never shown, whatever its key is called.

``application.admin_pasword`` does not name a secret to the key-name rule (``password``), so
before it was masked as an unknown key it was printed in clear by ``config check --show`` and
by every configuration dump. Each output of aviso is searched for the values: the effective
configuration, the warnings, and ``serve``'s log.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from aviso_host.config.redact import REDACTED
from tests.support.process import aviso_process, run_aviso

pytestmark = pytest.mark.heavy

ADMIN_PASSWORD = "hunter2-admin-password"
LOGGING_CREDENTIAL = "a-logging-credential-42"
VARIABLE_SECRET = "a-variable-held-secret-77"
CONFIG = f"""
application: {{host: 127.0.0.1, port: 0, admin_pasword: {ADMIN_PASSWORD}}}
notification_backend: {{kind: in_memory}}
logging: {{credentails: {LOGGING_CREDENTIAL}}}
"""
VARIABLES = {"AVISOSERVER_METRICS__CREDENTAILS": VARIABLE_SECRET}
SECRETS = (ADMIN_PASSWORD, LOGGING_CREDENTIAL, VARIABLE_SECRET)


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    return config


def test_config_check_show_masks_the_values_of_unknown_keys(tmp_path: Path) -> None:
    shown = run_aviso("config", "check", "--show", str(_config(tmp_path)), env=VARIABLES)
    assert shown.returncode == 0, shown.stderr
    for secret in SECRETS:
        assert secret not in shown.stdout + shown.stderr
    effective = yaml.safe_load(shown.stdout)
    assert effective["application"]["admin_pasword"] == REDACTED
    assert effective["logging"]["credentails"] == REDACTED
    assert effective["metrics"]["credentails"] == REDACTED
    # The warnings still name every key, so the operator can fix the spelling.
    assert "application.admin_pasword: unknown key" in shown.stderr
    assert "logging.credentails: unknown key" in shown.stderr
    assert "AVISOSERVER_METRICS__CREDENTAILS: matches no configuration key" in shown.stderr


def test_strict_errors_do_not_quote_the_values_of_unknown_keys(tmp_path: Path) -> None:
    strict = run_aviso("config", "check", "--strict", str(_config(tmp_path)), env=VARIABLES)
    assert strict.returncode == 1
    assert "application.admin_pasword: unknown key" in strict.stderr
    for secret in SECRETS:
        assert secret not in strict.stdout + strict.stderr


def test_serve_never_logs_the_values_of_unknown_keys(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with aviso_process(_config(tmp_path), log, VARIABLES) as (url, _):
        assert httpx.get(f"{url}/health", timeout=10.0).status_code == 200
    text = log.read_text()
    assert "config.warning" in text  # the warnings were logged, without the values
    for secret in SECRETS:
        assert secret not in text
