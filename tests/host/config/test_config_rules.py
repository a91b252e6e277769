"""Semantic startup rules."""

import copy
import dataclasses
from typing import Any

import pytest

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.config.settings import Settings
from aviso_host.plugins import PluginRegistry
from aviso_plugins.types import AuthProvider, Caller
from tests.host.config.config_stubs import (
    AUTH_ENABLED,
    RIVER_GAUGE,
    document,
    make_registry,
    with_schema,
)

ECPDS = {
    "username": "svc-aviso",
    "password": "svc-secret",
    "servers": ["https://ecpds.example.net/api/"],
    "match_key": "station",
}
ECPDS_STREAM_AUTH = {"required": True, "plugins": ["ecpds"]}


def load(doc: dict[str, Any], registry: PluginRegistry | None = None) -> Settings:
    return settings_from_document(doc, registry or make_registry())


def fails(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(doc)


def on_jetstream(doc: dict[str, Any]) -> dict[str, Any]:
    doc["notification_backend"] = {"kind": "jetstream"}
    return doc


def two_schemas(first_base: str, second_base: str) -> dict[str, Any]:
    second = copy.deepcopy(RIVER_GAUGE)
    second["topic"]["base"] = second_base
    doc = with_schema(topic={"base": first_base, "key_order": []})
    doc["notification_schema"]["second"] = second
    return doc


# -- schemas ---------------------------------------------------------------------------


def test_bases_differing_only_in_case_are_a_warning() -> None:
    # 0.7.1 accepted them; 0.13 refuses them, so they start with a warning (this test
    # expected a startup error before).
    settings = load(two_schemas("Gauge", "gauge"))
    assert any(
        warning.startswith(
            "notification_schema.second.topic.base: 'gauge' and the base of "
            "event type 'river_gauge' differ only in case"
        )
        for warning in settings.warnings
    ), settings.warnings


def test_identical_bases_fail() -> None:
    fails(
        two_schemas("gauge", "gauge"),
        r"^notification_schema\.second\.topic\.base: 'gauge' is also the base of "
        r"event type 'river_gauge'",
    )


def test_only_ascii_letters_are_folded_when_comparing_bases() -> None:
    assert set(load(two_schemas("ä", "Ä")).schemas) == {"river_gauge", "second"}


def test_distinct_bases_and_schemas_without_topic_coexist() -> None:
    doc = two_schemas("gauge", "gauge2")
    doc["notification_schema"]["generic"] = {"identifier": {}}
    settings = load(doc)
    assert settings.schemas["generic"].topic is None
    assert settings.schemas["river_gauge"].topic is not None


def test_upper_case_base_is_a_warning() -> None:
    settings = load(with_schema(topic={"base": "Gauge", "key_order": []}))
    assert any("not lower-case" in warning for warning in settings.warnings)


def test_empty_base_fails() -> None:
    fails(
        with_schema(topic={"base": "", "key_order": []}),
        r"^notification_schema\.river_gauge\.topic\.base: must not be empty$",
    )


def test_key_order_naming_an_undeclared_field_fails() -> None:
    fails(
        with_schema(topic={"base": "gauge", "key_order": ["basin", "sensor"]}),
        r"^notification_schema\.river_gauge\.topic\.key_order\[1\]: 'sensor' is not a field "
        r"declared in identifier$",
    )


def test_empty_and_repeated_key_order_are_allowed() -> None:
    load(with_schema(topic={"base": "gauge", "key_order": []}))
    load(with_schema(topic={"base": "gauge", "key_order": ["basin", "basin"]}))


def test_endpoint_is_parsed_and_otherwise_ignored() -> None:
    settings = load(with_schema(endpoint={"base": "gauge", "key_order": ["nope"]}))
    assert settings.schemas["river_gauge"].topic is not None


def test_field_named_point_fails() -> None:
    identifier = {"point": {"type": "StringHandler", "required": False}}
    fails(
        with_schema(identifier=identifier, topic={"base": "g", "key_order": []}),
        r"^notification_schema\.river_gauge\.identifier\.point: 'point' is reserved",
    )


def test_handler_value_errors_fail_naming_event_type_and_field() -> None:
    identifier = {**RIVER_GAUGE["identifier"]}
    identifier["level_band"] = {"type": "IntHandler", "range": [9, 0], "required": False}
    fails(
        with_schema(identifier=identifier),
        r"^notification_schema\.river_gauge\.identifier\.level_band: "
        r"range minimum 9 exceeds maximum 0 \[field handler 'IntHandler' \(registered in code\)\]$",
    )


def test_handlers_receive_definitions_without_nulls() -> None:
    identifier = {**RIVER_GAUGE["identifier"]}
    identifier["obs_date"] = {"type": "DateHandler", "required": False, "canonical_format": None}
    settings = load(with_schema(identifier=identifier))
    assert settings.schemas["river_gauge"].identifier["obs_date"] == {
        "type": "DateHandler",
        "required": False,
    }


def test_schema_settings_keep_configuration_order_and_blocks() -> None:
    settings = load(
        with_schema(payload={"required": True}, storage_policy={}, auth={"required": False})
    )
    schema = settings.schemas["river_gauge"]
    assert list(schema.identifier) == ["basin", "station", "level_band", "obs_date"]
    assert schema.topic is not None
    assert schema.topic.key_order == ("basin", "station")
    assert schema.payload_required is True
    assert schema.storage_policy == {}
    assert schema.auth is not None
    assert schema.auth.read_roles is None
    assert load(with_schema()).schemas["river_gauge"].payload_required is None


# -- storage policy --------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy",
    [{"compression": True}, {"allow_duplicates": False}, {"retention_time": "7d"}],
)
def test_storage_policy_keys_unsupported_by_in_memory_fail(policy: dict[str, Any]) -> None:
    (key,) = policy
    fails(
        with_schema(storage_policy=policy),
        rf"^notification_schema\.river_gauge\.storage_policy\.{key}: not supported by the "
        r"'in_memory' backend$",
    )


def test_empty_storage_policy_is_tolerated_by_in_memory() -> None:
    assert load(with_schema(storage_policy={})).schemas["river_gauge"].storage_policy == {}


def test_storage_policy_without_topic_fails() -> None:
    fails(
        with_schema(storage_policy={}, topic=None),
        r"^notification_schema\.river_gauge\.storage_policy: requires a topic block$",
    )


@pytest.mark.parametrize("value", ["90M", "30m", " 7d ", "2w"])
def test_retention_time_accepted(value: str) -> None:
    settings = load(on_jetstream(with_schema(storage_policy={"retention_time": value})))
    assert settings.schemas["river_gauge"].storage_policy == {"retention_time": value}


@pytest.mark.parametrize("value", ["1.5h", "10 m", "0s", "0d", "7x", "10"])
def test_retention_time_rejected(value: str) -> None:
    fails(
        on_jetstream(with_schema(storage_policy={"retention_time": value})),
        r"^notification_schema\.river_gauge\.storage_policy\.retention_time: ",
    )


@pytest.mark.parametrize("value", ["100Ki", "512Mi", "2G"])
def test_max_size_accepted(value: str) -> None:
    load(on_jetstream(with_schema(storage_policy={"max_size": value})))


@pytest.mark.parametrize("value", ["10m", "0Mi", "1024", "1KB"])
def test_max_size_rejected(value: str) -> None:
    fails(
        on_jetstream(with_schema(storage_policy={"max_size": value})),
        r"^notification_schema\.river_gauge\.storage_policy\.max_size: invalid size",
    )


@pytest.mark.parametrize("value", [0, -5, "0"])
def test_max_messages_must_be_positive(value: int | str) -> None:
    fails(
        on_jetstream(with_schema(storage_policy={"max_messages": value})),
        r"storage_policy\.max_messages: must be greater than zero$",
    )


def test_full_storage_policy_on_a_capable_backend() -> None:
    policy = {
        "retention_time": "2w",
        "max_messages": "500000",
        "max_size": "4Gi",
        "allow_duplicates": "false",
        "compression": True,
    }
    settings = load(on_jetstream(with_schema(storage_policy=policy)))
    assert settings.schemas["river_gauge"].storage_policy == {
        "retention_time": "2w",
        "max_messages": 500000,
        "max_size": "4Gi",
        "allow_duplicates": False,
        "compression": True,
    }


# -- backend ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["max_history_per_topic", "max_topics"])
def test_in_memory_limits_of_zero_fail_when_selected(key: str) -> None:
    fails(
        document(notification_backend={"kind": "in_memory", "in_memory": {key: 0}}),
        rf"^notification_backend\.in_memory\.{key}: must be greater than 0$",
    )
    unused = {"kind": "jetstream", "in_memory": {key: 0}}
    assert load(document(notification_backend=unused)).backend.kind == "jetstream"


def test_backend_sections_are_exposed_for_every_kind() -> None:
    doc = document(
        notification_backend={
            "kind": "in_memory",
            "in_memory": {"max_topics": "10"},
            "jetstream": {"nats_url": "nats://n:4222"},
        }
    )
    backend = load(doc).backend
    assert backend.options == {"max_topics": 10}
    assert backend.sections["jetstream"] == {"nats_url": "nats://n:4222"}
    assert load(document()).backend.options == {}


# -- global auth -----------------------------------------------------------------------


def test_disabled_auth_is_not_checked_further() -> None:
    settings = load(document(auth={"enabled": False, "timeout_ms": 0, "jwt_secret": " x"}))
    assert settings.auth.enabled is False


def test_missing_auth_section_means_disabled() -> None:
    assert load(document()).auth.enabled is False


def test_enabled_direct_auth_settings() -> None:
    settings = load(document(auth={**AUTH_ENABLED, "timeout_ms": "4000"}))
    assert settings.auth.enabled is True
    assert settings.auth.admin_roles == {"ops": ("admin",)}
    assert settings.auth.timeout_ms == 4000


def test_trusted_proxy_needs_only_secret_and_admin_roles() -> None:
    auth = {
        "enabled": True,
        "mode": "trusted_proxy",
        "jwt_secret": "s",
        "admin_roles": {"o": ["a"]},
    }
    assert load(document(auth=auth)).auth.mode == "trusted_proxy"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"auth_o_tron_url": ""}, r"^auth\.auth_o_tron_url: required when auth mode is 'direct'"),
        ({"auth_o_tron_url": None}, r"^auth\.auth_o_tron_url: required"),
        ({"jwt_secret": ""}, r"^auth\.jwt_secret: required when auth mode is 'direct'"),
        ({"jwt_secret": "", "mode": "trusted_proxy"}, r"^auth\.jwt_secret: required when auth"),
        ({"jwt_secret": " s"}, r"^auth\.jwt_secret: must not have leading or trailing whitespace"),
        ({"jwt_secret": "s\n"}, r"^auth\.jwt_secret: must not have leading or trailing"),
        (
            {"auth_o_tron_url": "http://a ", "mode": "trusted_proxy"},
            r"^auth\.auth_o_tron_url: must not have leading or trailing whitespace",
        ),
        ({"timeout_ms": 0}, r"^auth\.timeout_ms: must be greater than 0"),
        ({"admin_roles": {}}, r"^auth\.admin_roles: must name at least one realm"),
        ({"admin_roles": None}, r"^auth\.admin_roles: must name at least one realm"),
        ({"admin_roles": {"ops": []}}, r"^auth\.admin_roles\.ops: must list at least one role"),
        ({"admin_roles": {" ops": ["a"]}}, r"^auth\.admin_roles: realm name ' ops' must not"),
        ({"admin_roles": {" ": ["a"]}}, r"^auth\.admin_roles: realm names must not be blank"),
        ({"admin_roles": {"ops": [""]}}, r"^auth\.admin_roles\.ops\[0\]: must not be blank"),
        ({"admin_roles": {"ops": ["a", "b "]}}, r"^auth\.admin_roles\.ops\[1\]: must not have"),
    ],
)
def test_enabled_auth_rules(changes: dict[str, Any], message: str) -> None:
    fails(document(auth={**AUTH_ENABLED, **changes}), message)


def test_wildcard_role_is_legal() -> None:
    load(document(auth={**AUTH_ENABLED, "admin_roles": {"ops": ["*"]}}))


class _CustomProvider(AuthProvider):
    mode = "custom"

    async def authenticate(self, headers: Any) -> Caller | None:
        return None


def test_registered_auth_modes_are_valid_and_not_held_to_builtin_rules() -> None:
    registry = make_registry()
    registry.auth_providers["custom"] = _CustomProvider
    auth = {"enabled": True, "mode": "custom", "admin_roles": {"o": ["a"]}}
    assert load(document(auth=auth), registry).auth.mode == "custom"


# -- stream auth -----------------------------------------------------------------------


def test_stream_auth_requires_global_auth_when_required() -> None:
    fails(
        with_schema(auth={"required": True}),
        r"^notification_schema\.river_gauge\.auth\.required: global auth is disabled "
        r"\(enable auth or remove the stream auth block\)$",
    )


def test_stream_role_map_requires_global_auth() -> None:
    fails(
        with_schema(auth={"required": False, "write_roles": {"r": ["w"]}}),
        r"^notification_schema\.river_gauge\.auth\.write_roles: global auth is disabled",
    )


def test_public_stream_block_is_fine_without_global_auth() -> None:
    stream_auth = load(with_schema(auth={"required": False})).schemas["river_gauge"].auth
    assert stream_auth is not None
    assert stream_auth.required is False


def test_role_map_on_a_public_stream_fails_when_auth_is_enabled() -> None:
    doc = with_schema(auth={"required": False, "read_roles": {"r": ["x"]}})
    doc["auth"] = AUTH_ENABLED
    fails(doc, r"^notification_schema\.river_gauge\.auth\.read_roles: role restrictions need")


def test_protected_stream_with_role_maps() -> None:
    doc = with_schema(
        auth={"required": True, "read_roles": {"r": ["a", "*"]}, "write_roles": {"r": ["w"]}}
    )
    doc["auth"] = AUTH_ENABLED
    stream_auth = load(doc).schemas["river_gauge"].auth
    assert stream_auth is not None
    assert stream_auth.read_roles == {"r": ("a", "*")}
    assert stream_auth.write_roles == {"r": ("w",)}
    assert stream_auth.plugins == ()


@pytest.mark.parametrize(
    ("stream_auth", "message"),
    [
        ({"required": True, "read_roles": {}}, r"auth\.read_roles: must not be empty"),
        ({"required": True, "write_roles": {}}, r"auth\.write_roles: must not be empty"),
        ({"required": True, "read_roles": {"r": []}}, r"auth\.read_roles\.r: must list at least"),
        ({"required": True, "read_roles": {"r ": ["a"]}}, r"auth\.read_roles: realm name 'r '"),
        ({"required": True, "read_roles": {"r": [" a"]}}, r"auth\.read_roles\.r\[0\]: must not"),
        ({"required": True, "plugins": []}, r"auth\.plugins: must not be empty"),
        ({"required": True, "plugins": ["acl"]}, r"auth\.plugins\[0\]: unknown plugin 'acl'"),
        ({"required": False, "plugins": ["ecpds"]}, r"auth\.plugins: stream plugins need"),
    ],
)
def test_stream_auth_rules(stream_auth: dict[str, Any], message: str) -> None:
    doc = with_schema(auth=stream_auth)
    doc["auth"] = AUTH_ENABLED
    fails(doc, rf"^notification_schema\.river_gauge\.{message}")


def test_plugin_rules_apply_even_with_auth_disabled() -> None:
    fails(with_schema(auth={"required": True, "plugins": []}), r"auth\.plugins: must not be")


# -- metrics and watch endpoint ----------------------------------------------------------


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"enabled": True}, r"^metrics: missing required key 'port'"),
        ({"enabled": True, "port": 0}, r"^metrics\.port: must not be 0"),
        ({"enabled": "yes", "port": "8000"}, r"^metrics\.port: must differ from application"),
    ],
)
def test_enabled_metrics_rules(metrics: dict[str, Any], message: str) -> None:
    fails(document(metrics=metrics), message)


def test_metrics_settings() -> None:
    assert load(document(metrics={"enabled": False, "port": 0})).metrics.enabled is False
    metrics = load(document(metrics={"enabled": True, "port": 9464})).metrics
    assert (metrics.enabled, metrics.host, metrics.port) == (True, "127.0.0.1", 9464)


def test_watch_endpoint_keys_fall_back_to_defaults_individually() -> None:
    watch = load(document(watch_endpoint={"sse_heartbeat_interval_sec": 5})).watch
    assert watch.sse_heartbeat_interval_sec == 5
    assert watch.connection_max_duration_sec == 3600
    assert watch.replay_batch_size == 100
    assert watch.max_historical_notifications == 10000
    assert watch.replay_batch_delay_ms == 100
    assert watch.concurrent_notification_processing == 15


@pytest.mark.parametrize(
    "key",
    [
        "sse_heartbeat_interval_sec",
        "connection_max_duration_sec",
        "replay_batch_size",
        "concurrent_notification_processing",
    ],
)
def test_watch_endpoint_zero_fails(key: str) -> None:
    fails(document(watch_endpoint={key: 0}), rf"^watch_endpoint\.{key}: must be greater than 0$")


def test_watch_endpoint_zero_is_fine_where_it_means_something() -> None:
    watch = load(
        document(watch_endpoint={"replay_batch_delay_ms": 0, "max_historical_notifications": 0})
    ).watch
    assert (watch.replay_batch_delay_ms, watch.max_historical_notifications) == (0, 0)


# -- ecpds -----------------------------------------------------------------------------


def ecpds_document(ecpds: dict[str, Any] | None = ECPDS, **stream_auth: Any) -> dict[str, Any]:
    doc = with_schema(auth={**ECPDS_STREAM_AUTH, **stream_auth})
    doc["auth"] = AUTH_ENABLED
    if ecpds is not None:
        doc["ecpds"] = ecpds
    return doc


def test_plugin_stream_with_valid_ecpds_section() -> None:
    settings = load(ecpds_document())
    assert settings.authorisers["ecpds"] == {
        **ECPDS,
        "target_field": "name",
        "cache_ttl_seconds": 300,
        "max_entries": 10000,
        "request_timeout_seconds": 30,
        "connect_timeout_seconds": 5,
        "partial_outage_policy": "strict",
        "recheck_seconds": 60,
    }
    stream_auth = settings.schemas["river_gauge"].auth
    assert stream_auth is not None
    assert stream_auth.plugins == ("ecpds",)


def test_plugin_stream_without_ecpds_section_fails() -> None:
    fails(ecpds_document(None), r"^ecpds: section required by streams using the plugin: river_")


@pytest.mark.parametrize(
    "server",
    [
        "https://ecpds.example.net",
        "https://gw.example/ecpds-api/",
        "http://localhost:9000",
        "http://127.0.0.1:8080",
        "http://[::1]:8080/",
        "HTTPS://ECPDS.example.net",
    ],
)
def test_accepted_ecpds_servers(server: str) -> None:
    load(ecpds_document({**ECPDS, "servers": [server]}))


@pytest.mark.parametrize(
    "server",
    [
        "http://ecpds.example.net",
        "http://10.0.0.5",
        "http://127.0.0.2",
        "ftp://ecpds.example.net",
        "https://ecpds.example.net/?x=1",
        "https://ecpds.example.net/#frag",
        "https://ecpds.example.net?",
        "ecpds.example.net",
        "/relative/path",
        "https://host:99999",
        "https://ecp ds.example",
        "",
        "  ",
    ],
)
def test_rejected_ecpds_servers(server: str) -> None:
    fails(
        ecpds_document({**ECPDS, "servers": ["https://ok.example", server]}),
        r"^ecpds\.servers\[1\]: ",
    )


def test_unused_ecpds_section_is_only_shape_checked() -> None:
    doc = document(
        ecpds={**ECPDS, "servers": ["http://ecpds.example.net", "::bad"], "max_entries": 0}
    )
    assert load(doc).authorisers["ecpds"]["max_entries"] == 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"servers": []}, r"^ecpds\.servers: must list at least one server$"),
        ({"username": " svc"}, r"^ecpds\.username: must not have leading or trailing whitespace"),
        ({"password": ""}, r"^ecpds\.password: must not be blank"),
        ({"target_field": "  "}, r"^ecpds\.target_field: must not be blank"),
        ({"match_key": ""}, r"^ecpds\.match_key: must not be blank"),
        ({"match_key": "sta tion"}, r"^ecpds\.match_key: must not contain whitespace, '/' or NUL"),
        ({"match_key": "a/b"}, r"^ecpds\.match_key: must not contain"),
        ({"match_key": "a\0b"}, r"^ecpds\.match_key: must not contain"),
        ({"cache_ttl_seconds": 0}, r"^ecpds\.cache_ttl_seconds: must be greater than 0$"),
        ({"max_entries": 0}, r"^ecpds\.max_entries: must be greater than 0$"),
        ({"request_timeout_seconds": "0"}, r"^ecpds\.request_timeout_seconds: must be greater"),
        ({"connect_timeout_seconds": 0}, r"^ecpds\.connect_timeout_seconds: must be greater"),
    ],
)
def test_ecpds_rules_when_used(changes: dict[str, Any], message: str) -> None:
    fails(ecpds_document({**ECPDS, **changes}), message)


def test_match_key_must_be_a_declared_field() -> None:
    fails(
        ecpds_document({**ECPDS, "match_key": "destination"}),
        r"^notification_schema\.river_gauge\.identifier: the ecpds match_key 'destination' "
        r"must be a declared field$",
    )


def test_match_key_field_must_be_required() -> None:
    fails(
        ecpds_document({**ECPDS, "match_key": "level_band"}),
        r"^notification_schema\.river_gauge\.identifier\.level_band: the ecpds match_key field "
        r"must be required: true$",
    )


def test_match_key_need_not_be_in_key_order() -> None:
    identifier = {**RIVER_GAUGE["identifier"]}
    identifier["destination"] = {"type": "StringHandler", "required": True}
    doc = ecpds_document({**ECPDS, "match_key": "destination"})
    doc["notification_schema"]["river_gauge"]["identifier"] = identifier
    load(doc)


# -- strictness ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "strict", "configured"),
    [
        (with_schema(), True, True),
        (document(), False, False),
        (document(notification_schema={}), False, True),
        (document(notification_schema_strict=True), True, False),
        ({**with_schema(), "notification_schema_strict": "true"}, True, True),
        ({**with_schema(), "notification_schema_strict": None}, True, True),
    ],
)
def test_effective_strict_mode(doc: dict[str, Any], strict: bool, configured: bool) -> None:
    settings = load(doc)
    assert settings.strict is strict
    assert settings.schemas_configured is configured


def test_non_strict_with_schemas_warns() -> None:
    doc = with_schema()
    doc["notification_schema_strict"] = False
    settings = load(doc)
    assert settings.strict is False
    assert any("notification_schema_strict is false" in warning for warning in settings.warnings)
    assert load(document(notification_schema_strict=False)).warnings == ()


def test_auth_enabled_without_an_installed_provider_fails_closed() -> None:
    registry = make_registry(with_auth_plugins=False)
    with pytest.raises(ConfigError, match=r"auth\.mode: no installed plugin provides auth mode"):
        settings_from_document(document(auth=AUTH_ENABLED), registry)


def test_stream_authoriser_without_an_installed_plugin_fails_closed() -> None:
    registry = dataclasses.replace(make_registry(), authorisers={})
    config = ecpds_document()
    # The section of an authoriser nobody installed is claimed by no one: the stream fails.
    with pytest.raises(ConfigError, match=r"plugins\[0\]: unknown plugin 'ecpds' \(known: none"):
        settings_from_document(config, registry)
