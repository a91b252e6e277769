"""Configuration validated against the built-in handler, backend and auth plugins.

Handler-specific startup rules
live in the handler plugins; these tests pin that they surface as configuration errors.
"""

from pathlib import Path
from typing import Any

import pytest

from aviso_builtins.auth.direct import DirectAuthProvider
from aviso_builtins.auth.ecpds import EcpdsAuthoriser
from aviso_builtins.auth.trusted_proxy import TrustedProxyAuthProvider
from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_builtins.schema_handlers import numeric, spatial, temporal, text
from aviso_host.config import ConfigError, load_settings, loader, settings_from_document
from aviso_host.config.yaml12 import load_yaml
from aviso_host.plugins import PluginRegistry
from tests.host.config.config_stubs import JetStreamStub

ROOT = Path(__file__).resolve().parents[3]


def registry() -> PluginRegistry:
    handlers = [
        handler
        for module in (text, temporal, numeric, spatial)
        for handler in module.aviso_field_handlers()
    ]
    return PluginRegistry(
        field_handlers={handler.type_name: handler for handler in handlers},
        backends={"in_memory": InMemoryBackend, "jetstream": JetStreamStub},
        auth_providers={"direct": DirectAuthProvider, "trusted_proxy": TrustedProxyAuthProvider},
        authorisers={"ecpds": EcpdsAuthoriser},
    )


def schema_with(field: dict[str, Any]) -> dict[str, Any]:
    return {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": {"kind": "in_memory"},
        "notification_schema": {"ev": {"identifier": {"f": field}}},
    }


@pytest.mark.parametrize(
    "field",
    [
        {"type": "IntHandler", "required": True, "max_length": 3},
        {"type": "StringHandler", "required": True, "default": "x"},
        {"type": "TimeHandler", "required": True, "canonical_format": "%Y%m%d"},
        {"type": "EnumHandler", "required": True, "values": [1, 2]},
        {"type": "EnumHandler", "required": True},
        {"type": "ExpverHandler", "required": True, "default": 1},
        {"type": "StringHandler"},
        {"type": "DateHandler", "required": True, "canonical_format": "%d/%m/%Y"},
        {"type": "IntHandler", "required": True, "range": [9, 0]},
        {"type": "FloatHandler", "required": True, "range": [1.5, -1]},
        {"type": "IntHandler", "required": True, "range": [0, 1, 2]},
        {"type": "EnumHandler", "required": True, "values": []},
        {"type": "ExpverHandler", "required": True, "default": ""},
    ],
)
def test_invalid_field_definitions_fail_naming_the_field(field: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"^notification_schema\.ev\.identifier\.f[.:]"):
        settings_from_document(schema_with(field), registry())


def test_date_format_defaults_when_omitted() -> None:
    settings = settings_from_document(
        schema_with({"type": "DateHandler", "required": False}), registry()
    )
    definition = settings.schemas["ev"].identifier["f"]
    handler = registry().field_handlers["DateHandler"]("f", definition)
    assert handler.canonicalise("2025-07-06") == "20250706"


SPEC_EXAMPLE = Path(__file__).with_name("spec_example.yaml").read_text(encoding="utf-8")


def test_the_complete_example_configuration() -> None:
    settings = settings_from_document(load_yaml(SPEC_EXAMPLE), registry())
    assert settings.application.base_url == "https://notify.hydro.example.net"
    assert settings.auth.admin_roles == {"hydro": ("platform-admin",)}
    assert settings.metrics.port == 9464
    assert settings.backend.kind == "jetstream"
    assert settings.backend.options["max_reconnect_attempts"] == 0
    assert settings.strict is True
    assert list(settings.schemas) == ["river_gauge", "model_run", "bulletin"]
    model_run = settings.schemas["model_run"]
    assert model_run.auth is not None
    assert model_run.auth.read_roles == {"hydro": ("forecaster", "analyst"), "partners": ("*",)}
    assert model_run.storage_policy == {
        "retention_time": "2w",
        "max_messages": 500000,
        "max_size": "4Gi",
        "allow_duplicates": False,
        "compression": True,
    }
    assert settings.watch.replay_batch_size == 250


def test_the_complete_example_fails_on_the_in_memory_backend() -> None:
    document = load_yaml(SPEC_EXAMPLE)
    document["notification_backend"]["kind"] = "in_memory"
    with pytest.raises(ConfigError, match=r"storage_policy\.\w+: not supported by the 'in_me"):
        settings_from_document(document, registry())


def test_the_shipped_default_configuration_loads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(loader, "SYSTEM_CONFIG", tmp_path / "absent.yaml")
    settings = load_settings(registry(), environ={}, cwd=ROOT, home=tmp_path)
    assert settings.application.port == 8000
    assert settings.backend.kind == "in_memory"
    # As written, with the backend's declared defaults filled in.
    assert settings.backend.options == {
        "max_history_per_topic": 100,
        "max_topics": 10000,
        "max_bytes": 268435456,
        "duplicate_window": "2m",
        "duplicate_window_max_keys": 100_000,
        "duplicate_window_max_keys_per_writer": 10_000,
    }
    assert set(settings.schemas) == {"dissemination", "mars", "test_polygon", "river_gauge"}
    assert settings.strict is True
    # aviso-server 0.13 would refuse nothing in it: a default start logs no warning.
    assert settings.warnings == ()
    domain = settings.schemas["mars"].identifier["domain"]["values"]
    assert "y" in domain
    assert "n" in domain  # YAML 1.1 would have read these two as booleans
