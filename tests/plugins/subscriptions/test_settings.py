"""The ``subscriptions`` section, declared by the plugin (hook ``aviso_settings_sections``):
validated, converted from ``AVISOSERVER_*`` text and filled with its defaults wherever the
configuration is read, with each delivery kind's options under it; without the plugin, a
section nobody reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from aviso_builtins.subscriptions.settings import SubscriptionSettings
from aviso_host.config import ConfigError, load_settings, settings_from_document
from aviso_host.config.build import with_declared_defaults
from aviso_host.plugins import discover
from tests.support.configs import API_EXAMPLE, with_changes


def test_the_variables_are_converted_and_the_defaults_filled(tmp_path: Path) -> None:
    registry = discover()
    environ = {
        "AVISOSERVER_APPLICATION__HOST": "127.0.0.1",
        "AVISOSERVER_APPLICATION__PORT": "8000",
        "AVISOSERVER_NOTIFICATION_BACKEND__KIND": "in_memory",
        "AVISOSERVER_SUBSCRIPTIONS__MAX_PER_USER": "9",
        "AVISOSERVER_SUBSCRIPTIONS__ENABLED": "false",
    }
    settings = load_settings(registry, environ, cwd=tmp_path, home=tmp_path)
    section = with_declared_defaults(settings.document, registry)["subscriptions"]
    defaults = SubscriptionSettings()
    assert section == {
        "max_per_user": 9,
        "enabled": False,
        "max_total": defaults.max_total,
        "max_definition_bytes": defaults.max_definition_bytes,
    }


def test_a_delivery_kinds_options_are_checked_in_the_section() -> None:
    registry = discover()
    config = with_changes(API_EXAMPLE, subscriptions={"webhook": {"allow_private_networks": 3}})
    with pytest.raises(ConfigError, match=r"subscriptions\.webhook\.allow_private_networks"):
        settings_from_document(config, registry)
    with pytest.raises(ConfigError, match="unknown key 'max_peruser'"):
        settings_from_document(
            with_changes(API_EXAMPLE, subscriptions={"max_peruser": 1}), registry
        )


def test_without_the_plugin_the_section_is_an_unknown_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AVISO_BLOCK_PLUGINS", "subscriptions")
    config = with_changes(API_EXAMPLE, subscriptions={"max_per_user": 0})
    settings = settings_from_document(config, discover())
    assert settings.unknown == (
        "subscriptions: unknown key (known keys: application, auth, ecpds, limits, logging, "
        "metrics, notification_backend, notification_schema, notification_schema_strict, "
        "watch_endpoint)",
    )
