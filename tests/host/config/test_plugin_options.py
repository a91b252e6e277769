"""Every plugin kind's options schema is applied whether or not its section is written, its
defaults are filled in, a plugin that fails while being constructed is one error line naming
it and the key, and options marked ``writeOnly`` are secrets wherever text is written."""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from aviso_host.config import ConfigError, redact, settings_from_document
from aviso_host.config.plugin_options import apply_options_schema
from aviso_host.config.redact import REDACTED
from aviso_host.logs import JsonLineFormatter, register_secrets
from aviso_host.plugins import PluginRegistry
from aviso_host.service import Service
from aviso_plugins.types import AuthProvider, AuthRequest, Caller, FieldHandler, StreamAuthoriser
from tests.host.config.config_stubs import InMemoryStub, document, make_registry, with_schema

SECRET = "hunter2-do-not-print"
KEYS_SECRET = "k-0123456789"


class _Backend(InMemoryStub):
    kind = "stub"
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "url": {"type": "string", "default": "stub://local"},
            "retries": {"type": "integer", "minimum": 1, "default": 3},
            "password_file": {"type": "string"},
            "credential": {"type": "string", "writeOnly": True, "minLength": 30},
            "keys": {"type": "object", "writeOnly": True},
        },
    }


class _RequiringBackend(_Backend):
    kind = "requiring"
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "required": ["url"],
        "properties": {"url": {"type": "string"}},
    }

    def __init__(self, context: Any) -> None:  # the crash a missing section used to cause
        super().__init__(context)
        self.url = context.options["url"]


class _BrokenBackend(_Backend):
    kind = "broken"

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        raise KeyError(f"no such store for credential {context.options['credential']}")


class _Provider(AuthProvider):
    mode = "custom"
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "properties": {"realm": {"type": "string", "default": "lab"}},
    }

    async def authenticate(self, request: AuthRequest) -> Caller | None:
        return None


class _RefusingProvider(_Provider):
    mode = "refusing"

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        raise ValueError(f"realm {options['mode_options']['realm']!r} is not served")


class _Authoriser(StreamAuthoriser):
    name = "acl"
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "required": ["allow"],
        "properties": {
            "allow": {"type": "array", "items": {"type": "string"}},
            "cache_seconds": {"type": "integer", "default": 60},
        },
    }

    async def authorise(
        self, caller: Caller, event_type: str, identifier: Mapping[str, str]
    ) -> None:
        return None


class _CrashingHandler(FieldHandler):
    type_name = "CrashingHandler"

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        raise KeyError("minimum")

    def canonicalise(self, text: str) -> str:
        return text


class _DefaultingHandler(FieldHandler):
    type_name = "DefaultingHandler"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "allow_short": {"type": "boolean", "default": False}
    }

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        self.allow_short = definition["allow_short"]

    def canonicalise(self, text: str) -> str:
        return text


def registry() -> PluginRegistry:
    base = make_registry()
    base.backends.update({cls.kind: cls for cls in (_Backend, _RequiringBackend, _BrokenBackend)})
    base.auth_providers.update({cls.mode: cls for cls in (_Provider, _RefusingProvider)})
    base.authorisers["acl"] = _Authoriser
    base.field_handlers["CrashingHandler"] = _CrashingHandler
    base.field_handlers["DefaultingHandler"] = _DefaultingHandler
    return base


def backend(kind: str, section: dict[str, Any] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"kind": kind}
    if section is not None:
        block[kind] = section
    return document(notification_backend=block)


def with_auth(mode: str, section: dict[str, Any] | None = None) -> dict[str, Any]:
    auth: dict[str, Any] = {"enabled": True, "mode": mode, "admin_roles": {"ops": ["admin"]}}
    if section is not None:
        auth[mode] = section
    return document(auth=auth)


# -- applied whether or not the section is written -----------------------------------------


def test_an_absent_backend_section_gets_its_defaults() -> None:
    settings = settings_from_document(backend("stub"), registry())
    assert settings.backend.options == {"url": "stub://local", "retries": 3}
    assert settings.document["notification_backend"]["stub"] == settings.backend.options


def test_written_values_win_over_defaults_and_text_is_converted() -> None:
    settings = settings_from_document(backend("stub", {"retries": "5"}), registry())
    assert settings.backend.options == {"retries": 5, "url": "stub://local"}


def test_an_absent_section_is_checked_against_required_keys() -> None:
    with pytest.raises(ConfigError) as refused:
        settings_from_document(backend("requiring"), registry())
    assert str(refused.value) == "notification_backend.requiring: missing required key 'url'"


def test_a_section_without_defaults_stays_absent_from_the_effective_document() -> None:
    settings = settings_from_document(backend("in_memory"), registry())
    assert "in_memory" not in settings.document["notification_backend"]


def test_an_absent_auth_mode_section_gets_its_defaults() -> None:
    settings = settings_from_document(with_auth("custom"), registry())
    assert settings.auth.mode_options == {"realm": "lab"}


def test_an_authoriser_section_is_checked_and_defaulted_when_written() -> None:
    # An absent section is the authoriser's own call (``check_configuration``); a written
    # one is checked against its schema and reaches the authoriser with its defaults.
    doc = with_schema(auth={"required": True, "plugins": ["acl"]})
    doc["auth"] = with_auth("custom")["auth"]
    doc["acl"] = {}
    with pytest.raises(ConfigError, match=r"^acl: missing required key 'allow'$"):
        settings_from_document(doc, registry())
    doc["acl"] = {"allow": ["alice"]}
    assert settings_from_document(doc, registry()).authorisers["acl"] == {
        "allow": ["alice"],
        "cache_seconds": 60,
    }


def test_field_definitions_get_their_handler_option_defaults() -> None:
    identifier = {
        "colour": {"type": "DefaultingHandler", "required": True},
        "shade": {"type": "DefaultingHandler", "required": False, "allow_short": True},
    }
    doc = with_schema(identifier=identifier, topic={"base": "paint", "key_order": ["colour"]})
    settings = settings_from_document(doc, registry())
    fields = settings.schemas["river_gauge"].identifier
    assert fields["colour"]["allow_short"] is False
    assert fields["shade"]["allow_short"] is True


def test_options_given_outside_the_file_get_the_same_treatment() -> None:
    schema = _Backend.options_schema
    assert apply_options_schema({"retries": "2"}, schema, ("sink",)) == {
        "retries": 2,
        "url": "stub://local",
    }
    with pytest.raises(ConfigError, match=r"^sink\.retries: 0 is less than the minimum 1$"):
        apply_options_schema({"retries": "0"}, schema, ("sink",))
    with pytest.raises(ConfigError) as refused:
        apply_options_schema({"credential": SECRET}, schema, ("sink",))
    assert SECRET not in str(refused.value)


# -- construction: one line naming the plugin and the key ---------------------------------------


def test_a_backend_constructor_crash_is_one_line_naming_the_plugin() -> None:
    credential = "x" * 10 + SECRET + "x" * 10
    settings = settings_from_document(backend("broken", {"credential": credential}), registry())
    with pytest.raises(ConfigError) as refused:
        Service(settings, registry())
    assert str(refused.value) == (
        f"notification_backend.broken: KeyError: 'no such store for credential {REDACTED}' "
        "[storage backend 'broken' (registered in code)]"
    )


def test_an_auth_provider_value_error_is_one_line_naming_the_plugin() -> None:
    settings = settings_from_document(with_auth("refusing", {"realm": "ops"}), registry())
    with pytest.raises(ConfigError) as refused:
        Service(settings, registry())
    assert str(refused.value) == (
        "auth.refusing: realm 'ops' is not served [auth provider 'refusing' (registered in code)]"
    )


def test_a_field_handler_crash_is_one_line_naming_the_plugin() -> None:
    identifier = {"level": {"type": "CrashingHandler", "required": True}}
    doc = with_schema(identifier=identifier, topic={"base": "gauge", "key_order": ["level"]})
    with pytest.raises(ConfigError) as refused:
        settings_from_document(doc, registry())
    assert str(refused.value) == (
        "notification_schema.river_gauge.identifier.level: KeyError: 'minimum' "
        "[field handler 'CrashingHandler' (registered in code)]"
    )


# -- secrets --------------------------------------------------------------------------------


def test_write_only_options_are_redacted_beside_secret_key_names() -> None:
    section = {
        "credential": "c" * 30,
        "keys": {KEYS_SECRET: "alice-of-the-lab"},
        "password_file": "/p",
    }
    settings = settings_from_document(backend("stub", section), registry())
    shown = redact(settings.document, settings.secret_paths, settings.plugin_sections)
    assert shown["notification_backend"]["stub"] == {
        "credential": REDACTED,
        "keys": REDACTED,
        "password_file": REDACTED,
        "url": "stub://local",
        "retries": 3,
    }
    assert {"c" * 30, KEYS_SECRET, "alice-of-the-lab"} <= settings.secrets
    assert settings.backend.options["credential"] == "c" * 30  # the plugin gets the value


def test_a_plugin_section_is_not_redacted_for_its_name() -> None:
    class ApiKeys(_Provider):
        mode = "api_keys"

    plugins = registry()
    plugins.auth_providers["api_keys"] = ApiKeys
    settings = settings_from_document(with_auth("api_keys", {"realm": "ops"}), plugins)
    shown = redact(settings.document, settings.secret_paths, settings.plugin_sections)
    assert shown["auth"]["api_keys"] == {"realm": "ops"}
    # Not selected, so judged by its name as before.
    assert redact(settings.document)["auth"]["api_keys"] == REDACTED


def test_a_secret_value_is_masked_in_configuration_errors() -> None:
    with pytest.raises(ConfigError) as refused:
        settings_from_document(backend("stub", {"credential": SECRET}), registry())
    assert SECRET not in str(refused.value)
    assert str(refused.value).startswith("notification_backend.stub.credential: ")


def test_secret_values_are_masked_in_log_lines() -> None:
    register_secrets({SECRET})
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLineFormatter())
    log = logging.getLogger("tests.plugin_options")
    log.addHandler(handler)
    try:
        log.error("upstream refused %s", SECRET, extra={"fields": {"detail": f'"{SECRET}"'}})
    finally:
        log.removeHandler(handler)
    line = stream.getvalue()
    assert SECRET not in line
    assert line.count(REDACTED) == 2
