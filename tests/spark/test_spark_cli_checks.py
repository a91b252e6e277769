"""``aviso-server spark publish`` refuses, before Spark starts and in one line, what would
fail or lose every row: a process-local backend behind ``--sink backend``, a missing
configuration or sink option, a server the http sink cannot reach. No Spark session is
needed: the checks run first."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from aviso_host.cli import main
from aviso_spark.cli import check_sink, rfc3339_utc
from tests.support.nats import NatsServer
from tests.support.process import free_port

SCHEMA = {
    "rain": {
        "topic": {"base": "rain", "key_order": ["station"]},
        "identifier": {"station": {"type": "StringHandler", "required": True}},
    }
}


def _config(tmp_path: Path, backend: dict) -> Path:
    config = tmp_path / "aviso.yaml"
    document = {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": backend,
        "notification_schema": SCHEMA,
    }
    config.write_text(yaml.safe_dump(document))
    return config


def _publish(tmp_path: Path, *args: str) -> Result:
    command = ["spark", "publish", "--input", str(tmp_path / "rows.json"), "--format", "json"]
    command += ["--event-type", "rain", "--deadletter", str(tmp_path / "dead"), *args]
    return CliRunner().invoke(main, command)


def _one_error_line(result: Result) -> str:
    assert result.exit_code == 1, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: "), line
    return line


def test_backend_sink_with_a_process_local_backend_is_refused_at_once(tmp_path: Path) -> None:
    config = _config(tmp_path, {"kind": "in_memory"})
    line = _one_error_line(_publish(tmp_path, "--config", str(config), "--sink", "backend"))
    assert "'in_memory' backend" in line
    assert "--sink http" in line and "jetstream" in line
    assert not (tmp_path / "dead").exists()  # nothing ran


def test_backend_sink_with_a_store_down_is_refused_at_once(tmp_path: Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    config = _config(tmp_path, {"kind": "jetstream", "jetstream": {"nats_url": url}})
    options = ("--sink-option", "unavailable_after_seconds=1")
    line = _one_error_line(
        _publish(tmp_path, "--config", str(config), "--sink", "backend", *options)
    )
    assert line.startswith(
        "Error: cannot reach the store: the jetstream backend did not start within 1 s"
    ), line
    assert not (tmp_path / "dead").exists()  # nothing ran


def test_backend_sink_with_a_shared_backend_up_passes_the_checks(
    tmp_path: Path, nats_session: NatsServer
) -> None:
    jetstream = {"kind": "jetstream", "jetstream": {"nats_url": nats_session.url}}
    check_sink(str(_config(tmp_path, jetstream)), "backend", {})


def test_http_sink_without_a_configuration_says_to_give_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no configuration/config.yaml here
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in list(os.environ):
        if name.upper().startswith("AVISOSERVER_"):
            monkeypatch.delenv(name)
    line = _one_error_line(_publish(tmp_path, "--url", "http://127.0.0.1:8000"))
    assert line.startswith("Error: missing required keys 'application', 'notification_backend'")
    assert line.endswith("(give --config FILE, the server's configuration)")


def test_http_sink_options_are_checked_before_spark_starts(tmp_path: Path) -> None:
    config = str(_config(tmp_path, {"kind": "in_memory"}))
    line = _one_error_line(_publish(tmp_path, "--config", config))
    assert "the http sink needs the option 'url'" in line
    line = _one_error_line(_publish(tmp_path, "--config", config, "--sink", "nowhere"))
    assert "unknown sink 'nowhere'" in line


def test_an_unreachable_server_is_one_line_naming_it(tmp_path: Path) -> None:
    config = str(_config(tmp_path, {"kind": "in_memory"}))
    url = f"http://user:pw-for-the-server@127.0.0.1:{free_port()}"
    line = _one_error_line(_publish(tmp_path, "--config", config, "--url", url))
    assert line.startswith(
        f"Error: cannot reach the aviso server at http://[REDACTED]@127.0.0.1:{url.rsplit(':')[-1]}"
    ), line
    assert "pw-for-the-server" not in line


def test_history_times_are_rfc3339_utc() -> None:
    naive_local = datetime.datetime.fromtimestamp(1_780_000_000.25)  # as PySpark gives them
    assert rfc3339_utc(naive_local) == "2026-05-28T20:26:40.250000Z"
