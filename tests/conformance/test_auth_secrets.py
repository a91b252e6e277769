"""Secrets (``jwt_secret``, the ECPDS password, the NATS token) never appear in logs, in
``aviso-server config check`` output or in any response.

A real ``aviso-server serve`` subprocess logs at debug level while it answers successes and every
kind of auth failure; its whole stderr and every response body are then searched.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conformance.auth_support import NOTIFY, WATCH, body, call, document, read_body
from tests.support.fake_auth_o_tron import fake_auth_o_tron
from tests.support.fake_ecpds import SERVICE_PASSWORD, fake_ecpds
from tests.support.process import aviso_process, run_aviso
from tests.support.tokens import OTHER_SECRET, SECRET, basic, bearer, mint

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

NATS_TOKEN = "nats-token-do-not-print"
SECRETS = (SECRET, SERVICE_PASSWORD, NATS_TOKEN)


def _config(tmp_path: Path, aot_url: str, ecpds_url: str) -> Path:
    doc = document("direct", aot_url, [ecpds_url])
    doc["logging"] = {"level": "debug"}
    doc["notification_backend"]["jetstream"] = {"token": NATS_TOKEN}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_config_check_redacts_every_secret(tmp_path: Path) -> None:
    path = _config(tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:9")
    check = run_aviso("config", "check", str(path))
    assert check.returncode == 0, check.stderr
    printed = yaml.safe_load(check.stdout)
    assert printed["auth"]["jwt_secret"] == "[REDACTED]"
    assert printed["ecpds"]["password"] == "[REDACTED]"
    assert printed["notification_backend"]["jetstream"]["token"] == "[REDACTED]"
    for secret in SECRETS:
        assert secret not in check.stdout + check.stderr


def test_secrets_stay_out_of_logs_and_responses(tmp_path: Path) -> None:
    with fake_auth_o_tron() as aot, fake_ecpds() as ecpds:
        config = _config(tmp_path, aot.url, ecpds.url)
        log = tmp_path / "server.log"
        texts: list[str] = []
        with (
            aviso_process(config, log) as (url, _),
            httpx.Client(base_url=url, timeout=10.0) as client,
        ):
            requests = [
                (NOTIFY, body("protected_feed"), basic("admin-user", "admin-pass")),
                (NOTIFY, body("protected_feed"), basic("reader-user", "reader-pass")),
                (NOTIFY, body("public_feed"), basic("badsig-user", "x")),
                (NOTIFY, body("public_feed"), basic("boom-user", "x")),
                (NOTIFY, body("public_feed"), bearer(mint("x", secret=OTHER_SECRET))),
                (
                    WATCH,
                    read_body("dissemination_ecpds", WATCH, {"destination": "CIP"}),
                    basic("ecpds-user", "ecpds-pass"),
                ),
                (
                    WATCH,
                    read_body("dissemination_ecpds", WATCH, {"destination": "CIP"}),
                    basic("ecpds-unavailable", "ecpds-pass"),
                ),
                (
                    WATCH,
                    read_body("dissemination_ecpds", WATCH, {"destination": "X"}),
                    basic("ecpds-noaccess", "ecpds-pass"),
                ),
            ]
            for path, payload, headers in requests:
                response = call(client, path, payload, headers)
                streamed = response.headers["content-type"].startswith("text/event-stream")
                texts.append(
                    json.dumps(dict(response.headers)) + ("" if streamed else response.text)
                )
            for path in (
                "/api/v1/schema",
                "/api/v1/schema/dissemination_ecpds",
                "/api-docs/openapi.json",
                "/",
            ):
                texts.append(client.get(path).text)
            texts.append(client.delete("/api/v1/admin/wipe/all").text)
            ecpds.mode = "down"
            fresh = bearer(mint("ecpds-user-secrets", "localrealm", ["reader"]))
            texts.append(
                call(
                    client,
                    WATCH,
                    read_body("dissemination_ecpds", WATCH, {"destination": "CIP"}),
                    fresh,
                ).text
            )
        logged = log.read_text(errors="replace")
    assert "ECPDS" in logged and "auth" in logged, "the failures above were logged"
    for secret in SECRETS:
        assert secret not in logged, secret
        assert all(secret not in text for text in texts), secret
    # Client credentials are not logged either.
    assert basic("admin-user", "admin-pass")["Authorization"].split()[1] not in logged
