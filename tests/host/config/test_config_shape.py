"""Required keys, types, enumerations and unknown keys."""

from typing import Any

import pytest

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.config.settings import Settings
from tests.host.config.config_stubs import RIVER_GAUGE, document, make_registry, with_schema

ECPDS = {"username": "svc", "password": "pw", "servers": ["https://e.example"], "match_key": "k"}


def load(doc: dict[str, Any]) -> Settings:
    return settings_from_document(doc, make_registry())


def fails(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(doc)


def field(**definition: Any) -> dict[str, Any]:
    return with_schema(identifier={**RIVER_GAUGE["identifier"], "extra": definition})


def test_unknown_keys_are_ignored_in_lenient_locations() -> None:
    doc = document(
        extras={"a": 1},
        application={"host": "h", "port": 1, "colour": "blue"},
        logging={"level": "info", "format": "json", "other": 1},
        metrics={"enabled": False, "x": 1},
        watch_endpoint={"x": 1},
        notification_backend={"kind": "in_memory", "x": 1, "in_memory": {"x": 1}},
    )
    doc["notification_schema"] = {
        "river_gauge": {
            **RIVER_GAUGE,
            "legacy": True,
            "topic": {**RIVER_GAUGE["topic"], "separator": "/"},
            "storage_policy": {"unknown": 1},
        }
    }
    settings = load(doc)
    assert settings.application.host == "h"
    assert settings.schemas["river_gauge"].storage_policy == {}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (document(auth={"enabled": False, "foo": 1}), r"^auth: unknown key 'foo'$"),
        (document(auth={"secret": "x"}), r"^auth: unknown key 'secret'$"),
        (
            with_schema(auth={"required": True, "foo": 1}),
            r"^notification_schema\.river_gauge\.auth: unknown key 'foo'$",
        ),
        (
            with_schema(payload={"required": True, "type": ["String"]}),
            r"^notification_schema\.river_gauge\.payload: unknown key 'type'$",
        ),
        (document(ecpds={**ECPDS, "extra": 1}), r"^ecpds: unknown key 'extra'$"),
        (
            field(type="StringHandler", required=True, colour="red"),
            r"^notification_schema\.river_gauge\.identifier\.extra: "
            r"'colour' is not allowed for StringHandler$",
        ),
    ],
)
def test_unknown_keys_fail_in_strict_locations(doc: dict[str, Any], message: str) -> None:
    fails(doc, message)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (document(application={"port": 1}), r"^application: missing required key 'host'$"),
        (document(notification_backend={}), r"^notification_backend: missing required key 'kind'"),
        (
            with_schema(identifier=None),
            r"^notification_schema\.river_gauge: missing required key 'identifier'$",
        ),
        (field(type="StringHandler"), r"identifier\.extra: missing required key 'required'$"),
        (field(required=True), r"identifier\.extra: missing required key 'type'$"),
        (
            with_schema(auth={"read_roles": {"r": ["x"]}}),
            r"^notification_schema\.river_gauge\.auth: missing required key 'required'$",
        ),
        (with_schema(payload={}), r"\.payload: missing required key 'required'$"),
        (
            field(type="EnumHandler", required=False),
            r"identifier\.extra: missing required key 'values'$",
        ),
        (
            document(ecpds={"username": "u", "password": "p", "servers": []}),
            r"^ecpds: missing required key 'match_key'$",
        ),
        (
            with_schema(topic={"base": "gauge"}),
            r"\.topic: missing required key 'key_order'$",
        ),
        (
            with_schema(endpoint={"key_order": []}),
            r"\.endpoint: missing required key 'base'$",
        ),
    ],
)
def test_missing_required_keys_fail(doc: dict[str, Any], message: str) -> None:
    fails(doc, message)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (document(application={"host": "h", "port": 8000.0}), r"^application\.port: expected an"),
        (document(application={"host": "h", "port": -1}), r"^application\.port: -1 is less"),
        (document(application={"host": "h", "port": 65536}), r"^application\.port: 65536 is"),
        (document(application={"host": 1, "port": 1}), r"^application\.host: expected text"),
        (document(auth={"admin_roles": {"ops": "admin"}}), r"^auth\.admin_roles\.ops: expected a"),
        (document(auth={"timeout_ms": -1}), r"^auth\.timeout_ms: -1 is less than the minimum 0"),
        (document(watch_endpoint={"replay_batch_size": True}), r"replay_batch_size: expected an"),
        (document(notification_schema=[]), r"^notification_schema: expected a mapping, got a list"),
        (document(notification_schema_strict="maybe"), r"^notification_schema_strict: 'maybe'"),
        (document(metrics={"port": 70000}), r"^metrics\.port: 70000 is greater than the maximum"),
        (field(type="StringHandler", required="true"), r"\.extra\.required: expected a boolean"),
        (field(type="StringHandler", required=1), r"\.extra\.required: expected a boolean"),
        (
            field(type="EnumHandler", required=True, values=[1, 2]),
            r"\.extra\.values\[0\]: expected text, got an integer",
        ),
        (
            field(type="StringHandler", required=True, max_length="8"),
            r"\.extra\.max_length: expected an integer, got text '8'",
        ),
        (
            field(type="IntHandler", required=True, range=[1]),
            r"\.extra\.range: expected at least 2 items",
        ),
        (
            field(type="IntHandler", required=True, range=[1.5, 2]),
            r"\.extra\.range\[0\]: expected an integer, got a number",
        ),
        (with_schema(topic={"base": "g", "key_order": "basin"}), r"\.topic\.key_order: expected"),
        (with_schema(storage_policy={"max_size": 1024}), r"\.storage_policy\.max_size: expected"),
        (with_schema(auth={"required": True, "plugins": "ecpds"}), r"\.auth\.plugins: expected a"),
        (document(ecpds={**ECPDS, "servers": "https://e"}), r"^ecpds\.servers: expected a list"),
    ],
)
def test_wrong_types_fail(doc: dict[str, Any], message: str) -> None:
    fails(doc, message)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (document(auth={"mode": "proxy"}), r"^auth\.mode: 'proxy' is not one of"),
        (document(auth={"mode": "Direct"}), r"^auth\.mode: 'Direct' is not one of"),
        (
            document(ecpds={**ECPDS, "partial_outage_policy": "best"}),
            r"^ecpds\.partial_outage_policy: 'best' is not one of 'strict', 'any_success'$",
        ),
        (
            field(type="Stringhandler", required=True),
            r"\.extra\.type: unknown field handler type 'Stringhandler' \(registered: "
            r"'DateHandler', 'EnumHandler', 'IntHandler', 'StringHandler'\)$",
        ),
    ],
)
def test_invalid_enumeration_values_fail(doc: dict[str, Any], message: str) -> None:
    fails(doc, message)


def test_builtin_auth_modes_are_valid_without_their_plugins() -> None:
    assert load(document(auth={"mode": "trusted_proxy"})).auth.mode == "trusted_proxy"


@pytest.mark.parametrize(
    ("key", "value"),
    [("storage_type", "disk"), ("retention_policy", "Limits"), ("discard_policy", "oldest")],
)
def test_enumerations_of_an_unselected_backend_still_fail(key: str, value: str) -> None:
    doc = document(notification_backend={"kind": "in_memory", "jetstream": {key: value}})
    fails(doc, rf"^notification_backend\.jetstream\.{key}: '{value}' is not one of")


def test_range_checks_of_an_unselected_backend_do_not_apply() -> None:
    doc = document(notification_backend={"kind": "in_memory", "jetstream": {"timeout_seconds": 0}})
    assert load(doc).backend.sections["jetstream"] == {"timeout_seconds": 0}


def test_sections_of_unregistered_backend_kinds_are_not_checked() -> None:
    doc = document(
        notification_backend={"kind": "in_memory", "kafka": {"acks": "lots", "retries": "x"}}
    )
    assert load(doc).backend.sections["kafka"] == {"acks": "lots", "retries": "x"}


@pytest.mark.parametrize("kind", ["memory", "InMemory", "IN_MEMORY", ""])
def test_unknown_backend_kind_fails_listing_the_registered_kinds(kind: str) -> None:
    fails(
        document(notification_backend={"kind": kind}),
        rf"^notification_backend\.kind: unknown backend '{kind}' "
        r"\(registered: 'in_memory', 'jetstream'\)$",
    )


def test_logging_level_never_fails() -> None:
    assert load(document(logging={"level": "verbose"})).logging.level == "info"
    assert load(document(logging={"level": 5})).logging.level == "info"
    assert load(document(logging={"level": "WARN"})).logging.level == "warn"
    assert load(document(logging={"level": "warn"})).logging.level == "warn"
