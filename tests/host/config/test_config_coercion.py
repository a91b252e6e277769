"""Text coercion driven by the schema."""

from typing import Any

import pytest

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.config.coerce import NO_TEXT_COERCION, coerce_text, drop_nulls
from aviso_host.config.loader import apply_environment
from tests.host.config.config_stubs import AUTH_ENABLED, document, make_registry, with_schema


def settings_with_environment(base: dict[str, Any], environ: dict[str, str]) -> Any:
    return settings_from_document(apply_environment(base, environ), make_registry())


def test_numeric_text_from_the_environment_is_converted() -> None:
    settings = settings_with_environment(
        document(), {"AVISOSERVER_WATCH_ENDPOINT__REPLAY_BATCH_SIZE": "200"}
    )
    assert settings.watch.replay_batch_size == 200


@pytest.mark.parametrize("value", ["abc", "", "1.5", " 200", "2e2", "٢٠٠", "1_000"])
def test_text_that_is_not_a_decimal_integer_fails(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^watch_endpoint\.replay_batch_size: .* integer"):
        settings_with_environment(
            document(), {"AVISOSERVER_WATCH_ENDPOINT__REPLAY_BATCH_SIZE": value}
        )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("YES", True),
        ("true", True),
        ("On", True),
        ("1", True),
        ("no", False),
        ("FALSE", False),
        ("off", False),
        ("0", False),
    ],
)
def test_boolean_text_in_any_case(value: str, expected: bool) -> None:
    base = document(auth={**AUTH_ENABLED, "enabled": False})
    settings = settings_with_environment(base, {"AVISOSERVER_AUTH__ENABLED": value})
    assert settings.auth.enabled is expected


def test_unconvertible_boolean_text_fails() -> None:
    with pytest.raises(ConfigError, match=r"^auth\.enabled: 'maybe' is not a boolean"):
        settings_with_environment(document(), {"AVISOSERVER_AUTH__ENABLED": "maybe"})


def test_quoted_numbers_in_files_are_accepted() -> None:
    settings = settings_from_document(
        document(application={"host": "h", "port": "8000"}), make_registry()
    )
    assert settings.application.port == 8000


def test_backend_options_are_coerced_by_their_own_schema() -> None:
    base = document(notification_backend={"kind": "in_memory", "in_memory": {}})
    settings = settings_with_environment(
        base,
        {
            "AVISOSERVER_NOTIFICATION_BACKEND__IN_MEMORY__MAX_TOPICS": "5",
            "AVISOSERVER_NOTIFICATION_BACKEND__IN_MEMORY__ENABLE_METRICS": "on",
        },
    )
    assert settings.backend.options == {"max_topics": 5, "enable_metrics": True}


def test_stream_auth_and_payload_accept_text() -> None:
    base = with_schema(payload={"required": "yes"}, auth={"required": "false"})
    settings = settings_from_document(base, make_registry())
    assert settings.schemas["river_gauge"].payload_required is True
    stream_auth = settings.schemas["river_gauge"].auth
    assert stream_auth is not None
    assert stream_auth.required is False


def test_strict_flag_accepts_text() -> None:
    settings = settings_with_environment(
        document(), {"AVISOSERVER_NOTIFICATION_SCHEMA_STRICT": "TRUE"}
    )
    assert settings.strict is True


def test_field_definitions_stay_strictly_typed() -> None:
    base = with_schema()
    environ = {"AVISOSERVER_NOTIFICATION_SCHEMA__RIVER_GAUGE__IDENTIFIER__STATION__MAX_LENGTH": "4"}
    with pytest.raises(
        ConfigError,
        match=r"^notification_schema\.river_gauge\.identifier\.station\.max_length: "
        r"expected an integer, got text '4'",
    ):
        settings_with_environment(base, environ)


def test_text_where_a_list_is_expected_fails() -> None:
    with pytest.raises(ConfigError, match=r"^ecpds\.servers: expected a list, got text"):
        settings_with_environment(
            document(ecpds={"username": "u", "password": "p", "servers": [], "match_key": "k"}),
            {"AVISOSERVER_ECPDS__SERVERS": "https://ecpds.example"},
        )


def test_coercion_follows_unions_and_keeps_allowed_text() -> None:
    schema = {"type": ["integer", "string"]}
    assert coerce_text("12", schema) == 12
    assert coerce_text("twelve", schema) == "twelve"


def test_coercion_converts_numbers() -> None:
    schema = {"type": "object", "properties": {"ratio": {"type": "number"}}}
    assert coerce_text({"ratio": "0.5"}, schema) == {"ratio": 0.5}
    with pytest.raises(ConfigError, match=r"^ratio: 'inf' is not a number"):
        coerce_text({"ratio": "inf"}, schema)


def test_coercion_stops_at_marked_schemas() -> None:
    schema = {"type": "object", "additionalProperties": {NO_TEXT_COERCION: True, "type": "integer"}}
    assert coerce_text({"a": "1"}, schema) == {"a": "1"}


def test_coercion_walks_list_items() -> None:
    schema = {"type": "array", "items": {"type": "boolean"}}
    with pytest.raises(ConfigError, match=r"^\[1\]: 'x' is not a boolean"):
        coerce_text(["yes", "x"], schema)


def test_explicit_nulls_mean_unset() -> None:
    assert drop_nulls({"a": None, "b": {"c": None, "d": 1}, "e": [None, {"f": None}]}) == {
        "b": {"d": 1},
        "e": [None, {}],
    }
    settings = settings_from_document(
        document(
            application={"host": "h", "port": 1, "base_url": None},
            notification_schema_strict=None,
            auth=None,
        ),
        make_registry(),
    )
    assert settings.application.base_url == "http://localhost"
    assert settings.auth.enabled is False
    assert settings.strict is False
