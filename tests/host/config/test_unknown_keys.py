"""Keys nobody reads: accepted where aviso-server ignores them (files written for it keep
working), each reported as a warning naming the key path and the nearest known key; the
same for ``AVISOSERVER_*`` variables that address no key."""

from __future__ import annotations

from pathlib import Path

import pytest

from aviso_host.config import ConfigError, load_settings, settings_from_document
from tests.host.config.config_stubs import document, make_registry, with_schema


def _unknown(doc: dict) -> tuple[str, ...]:
    settings = settings_from_document(doc, make_registry())
    assert set(settings.unknown) <= set(settings.warnings)
    return settings.unknown


def test_a_misspelled_key_is_accepted_with_a_warning_naming_the_nearest_known_key() -> None:
    settings = settings_from_document(document(logging={"levle": "warn"}), make_registry())
    assert settings.logging.level == "info"  # ignored, as aviso-server does
    assert settings.unknown == ("logging.levle: unknown key (did you mean 'level'?)",)
    assert settings.unknown[0] in settings.warnings


def test_every_ignored_section_reports_its_unknown_keys() -> None:
    doc = with_schema(storage_policy={"max_mesages": 5}, colour="blue")
    doc["application"]["bsae_url"] = "http://x"
    doc["watch_endpoint"] = {"replay_batch_sise": 5}
    doc["notification_backend"] = {"kind": "in_memory", "jetstrem": {"nats_url": "nats://a"}}
    doc["extras"] = {"a": 1}
    assert _unknown(doc) == (
        "application.bsae_url: unknown key (did you mean 'base_url'?)",
        "notification_backend.jetstrem: unknown key (did you mean 'jetstream'?)",
        "notification_schema.river_gauge.storage_policy.max_mesages: unknown key "
        "(did you mean 'max_messages'?)",
        "notification_schema.river_gauge.colour: unknown key (known keys: auth, "
        "endpoint, identifier, max_historical_notifications, payload, storage_policy, topic)",
        "watch_endpoint.replay_batch_sise: unknown key (did you mean 'replay_batch_size'?)",
        # No plugin declares ``subscriptions`` in this registry.
        "extras: unknown key (known keys: application, auth, ecpds, limits, logging, "
        "metrics, notification_backend, notification_schema, notification_schema_strict, "
        "watch_endpoint)",
    )


def test_known_keys_and_free_form_maps_are_not_reported() -> None:
    doc = with_schema()
    doc["logging"] = {"level": "debug", "format": "json"}
    doc["notification_backend"] = {
        "kind": "in_memory",
        "in_memory": {"max_history_per_topic": 3},
        "jetstream": {"nats_url": "nats://localhost:4222"},
    }
    assert _unknown(doc) == ()


def test_a_misspelled_required_section_names_the_unknown_key() -> None:
    doc = document()
    doc["notificaton_backend"] = doc.pop("notification_backend")
    with pytest.raises(ConfigError) as refused:
        settings_from_document(doc, make_registry())
    assert str(refused.value) == (
        "missing required key 'notification_backend' "
        "(unknown key 'notificaton_backend' looks like 'notification_backend')"
    )


def test_a_variable_that_addresses_no_key_is_a_warning_under_its_own_name(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "application: {host: 127.0.0.1, port: 0}\nnotification_backend: {kind: in_memory}\n"
    )
    environ = {
        "AVISOSERVER_CONFIG_FILE": str(config),
        "AVISOSERVER_LOGGING__LEVLE": "debug",
        "AVISOSERVER_WATCH_ENDPOINT__NO_SUCH_THING": "1",
        "AVISOSERVER_A____B": "1",
        "AVISOSERVER_LOGGING__LEVEL": "debug",
        "AVISOSERVER_NOTIFICATION_BACKEND__IN_MEMORY__MAX_TOPICS": "7",
    }
    settings = load_settings(make_registry(), environ=environ, cwd=tmp_path, home=tmp_path)
    assert settings.logging.level == "debug"
    assert settings.unknown == (
        "AVISOSERVER_A____B: matches no configuration key (an empty key name between separators)",
        "AVISOSERVER_LOGGING__LEVLE: matches no configuration key "
        "(did you mean AVISOSERVER_LOGGING__LEVEL?)",
        "AVISOSERVER_WATCH_ENDPOINT__NO_SUCH_THING: matches no configuration key "
        "(watch_endpoint.no_such_thing is not a known key)",
    )


def test_a_key_written_a_level_too_high_names_where_it_belongs() -> None:
    doc = document(prot=8001)
    assert _unknown(doc) == ("prot: unknown key (did you mean 'application.port'?)",)


def test_a_misspelled_required_key_inside_a_section_is_named() -> None:
    doc = document()
    doc["application"] = {"host": "127.0.0.1", "prot": 8000}
    with pytest.raises(ConfigError) as refused:
        settings_from_document(doc, make_registry())
    assert str(refused.value) == (
        "application: missing required key 'port' (unknown key 'prot' looks like 'port')"
    )
