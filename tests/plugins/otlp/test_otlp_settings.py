"""``logging.otlp``, the section the built-in OTLP plugin declares: read, checked and shown
by the host as its own sections are (endpoint normalisation, defaults, the rules beyond its
shape, ``AVISOSERVER_*`` text, ``config check --defaults``)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from aviso_builtins.otlp.export import otlp_settings
from aviso_host.config import ConfigError, settings_from_document
from aviso_host.config.build import with_declared_defaults
from aviso_host.plugins import discover

REGISTRY = discover()


def document(**sections: Any) -> dict[str, Any]:
    return {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": {"kind": "in_memory"},
        **sections,
    }


@pytest.mark.parametrize(
    ("endpoint", "protocol", "expected"),
    [
        ("collector:4317", "grpc", "http://collector:4317"),
        ("https://collector:4317", "grpc", "https://collector:4317"),
        ("collector:4318", "http", "http://collector:4318/v1/logs"),
        ("https://collector:4318/", "http", "https://collector:4318/v1/logs"),
        ("http://collector:4318/v1/logs", "http", "http://collector:4318/v1/logs"),
    ],
)
def test_otlp_endpoint_gets_a_scheme_and_the_http_logs_path(
    endpoint: str, protocol: str, expected: str
) -> None:
    otlp = {"enabled": True, "endpoint": endpoint, "protocol": protocol}
    settings = settings_from_document(document(logging={"otlp": otlp}), REGISTRY)
    assert otlp_settings(settings.document).endpoint == expected


def test_otlp_defaults_are_off_and_grpc() -> None:
    otlp = otlp_settings(settings_from_document(document(), REGISTRY).document)
    assert (otlp.enabled, otlp.protocol) == (False, "grpc")


def test_an_otlp_block_switched_off_needs_no_endpoint() -> None:
    settings_from_document(document(logging={"otlp": {"enabled": False}}), REGISTRY)


def test_enabled_text_from_the_environment_is_a_boolean() -> None:
    with pytest.raises(ConfigError, match=r"^logging\.otlp\.endpoint: is required"):
        settings_from_document(document(logging={"otlp": {"enabled": "true"}}), REGISTRY)


def test_export_enabled_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)  # as if not installed
    otlp = {"enabled": True, "endpoint": "http://127.0.0.1:9"}
    with pytest.raises(ConfigError) as refused:
        settings_from_document(document(logging={"otlp": otlp}), REGISTRY)
    assert str(refused.value) == (
        "logging.otlp.enabled needs the otlp extra, which is not installed: "
        "pip install 'aviso-py[otlp]'"
    )
    settings_from_document(document(logging={"otlp": {"enabled": False}}), REGISTRY)


def test_an_unknown_otlp_key_is_reported_with_the_nearest_declared_one() -> None:
    settings = settings_from_document(document(logging={"otlp": {"endpont": "x"}}), REGISTRY)
    assert any("logging.otlp.endpont" in warning for warning in settings.unknown)
    assert any("endpoint" in warning for warning in settings.unknown)


def test_the_effective_configuration_shows_the_section_as_written_and_its_defaults() -> None:
    written = settings_from_document(document(logging={"otlp": {"enabled": False}}), REGISTRY)
    assert written.document["logging"] == {"otlp": {"enabled": False}}
    unwritten = settings_from_document(document(), REGISTRY)
    assert "logging" not in unwritten.document
    defaults = with_declared_defaults(unwritten.document, REGISTRY)
    assert defaults["logging"]["otlp"] == {"enabled": False, "endpoint": "", "protocol": "grpc"}
