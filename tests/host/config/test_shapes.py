"""Shapes declared once: the JSON Schema, the defaults and the typed value of a configuration
section all come from its typed declaration."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import Field

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.config.build import with_declared_defaults
from aviso_host.config.settings import SECTIONS, LimitSettings, Settings
from aviso_host.config.shape import validate_shape
from aviso_plugins.shapes import ShapeError, read_shape, reference, shape, shape_schema
from tests.host.config.config_stubs import make_registry

MINIMAL_DOCUMENT: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 8000},
    "notification_backend": {"kind": "in_memory"},
}


@shape()
@dataclass(frozen=True, slots=True)
class Inner:
    url: str = "http://x"


@shape(closed=True)
@dataclass(frozen=True, slots=True)
class Options:
    name: str
    retries: Annotated[int, Field(ge=1)] = 3
    """Attempts before giving up."""
    limit: int | None = None
    workers: Annotated[int, Field(ge=1)] | Annotated[str, Field(pattern="^auto$")] = 1
    mode: Literal["fast"] = "fast"
    roles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    inner: Inner = Inner()
    request_id: Annotated[str, reference("#/components/schemas/RequestId")] = ""


def test_the_schema_is_derived_in_the_plain_form_the_host_reads() -> None:
    schema = shape_schema(Options)
    properties = schema["properties"]
    assert schema["additionalProperties"] is False and schema["required"] == ["name"]
    assert properties["retries"] == {
        "default": 3,
        "description": "Attempts before giving up.",
        "minimum": 1,
        "type": "integer",
    }
    # Optional: absent, never null (explicit nulls are dropped before validation).
    assert properties["limit"] == {"type": "integer"}
    assert properties["workers"]["type"] == ["integer", "string"]
    assert (properties["workers"]["minimum"], properties["workers"]["pattern"]) == (1, "^auto$")
    assert properties["mode"]["enum"] == ["fast"] and "const" not in properties["mode"]
    assert properties["inner"]["properties"]["url"]["default"] == "http://x"
    assert "additionalProperties" not in properties["inner"]
    assert properties["request_id"] == {"$ref": "#/components/schemas/RequestId"}
    assert "title" not in str(schema) and "$defs" not in schema


def test_the_derived_schema_words_errors_as_the_host_does() -> None:
    schema = shape_schema(Options)
    with pytest.raises(ConfigError, match=r"^opts\.retries: 0 is less than the minimum 1$"):
        validate_shape({"name": "a", "retries": 0}, schema, ("opts",))
    with pytest.raises(ConfigError, match=r"^opts: unknown key 'retry'$"):
        validate_shape({"name": "a", "retry": 2}, schema, ("opts",))
    with pytest.raises(ConfigError, match=r"^opts\.workers: 'many' does not match"):
        validate_shape({"name": "a", "workers": "many"}, schema, ("opts",))


def test_the_typed_value_is_read_with_the_declared_defaults() -> None:
    options = read_shape(Options, {"name": "a", "roles": {"lab": ["x"]}, "other": 1})
    assert options == Options(name="a", roles={"lab": ("x",)})


def test_each_section_s_schema_defaults_are_its_typed_defaults() -> None:
    settings = settings_from_document(MINIMAL_DOCUMENT, make_registry())
    filled = with_declared_defaults(settings.document)
    reread = settings_from_document(filled, make_registry())
    for name in SECTIONS:
        attribute = {"watch_endpoint": "watch"}.get(name, name)
        assert getattr(reread, attribute) == getattr(settings, attribute), name
    assert filled["limits"]["max_body_bytes"] == 262_144
    assert filled["application"]["homepage"]["client_repository_url"].startswith("https://")


def test_every_section_of_the_settings_is_declared() -> None:
    typed = {item.name for item in fields(Settings)}
    declared: dict[str, Any] = {"watch_endpoint": "watch"}
    assert {declared.get(name, name) for name in SECTIONS} <= typed


def test_a_value_the_schema_admits_but_no_type_holds_fails_in_one_line_naming_its_key() -> None:
    # JSON Schema admits any size of number; a float holds none this large.
    document = {**MINIMAL_DOCUMENT, "limits": {"header_timeout_seconds": 10**400}}
    with pytest.raises(ConfigError) as failure:
        settings_from_document(document, make_registry())
    assert str(failure.value) == "limits.header_timeout_seconds: input should be a valid number"
    with pytest.raises(ShapeError, match=r"^retries: input should be a valid integer"):
        read_shape(Options, {"name": "a", "retries": "many"})


GUARANTEES = Path(__file__).resolve().parents[3] / "docs" / "guarantees.md"
# A table row "| `limits.<key>` | <default> ... |" (or "| `<key>` |" in the value table).
DOCUMENTED_DEFAULT = re.compile(r"^\| `(?:(\w+)\.)?(\w+)` \| ([0-9][0-9.]*)", re.MULTILINE)


def test_the_documented_defaults_are_the_declared_ones() -> None:
    limits = {item.name for item in fields(LimitSettings)}
    documented = [
        (section or "limits", key, value)
        for section, key, value in DOCUMENTED_DEFAULT.findall(GUARANTEES.read_text())
        if section in SECTIONS or (not section and key in limits)
    ]
    assert limits <= {key for _, key, _ in documented}
    declared = with_declared_defaults({})
    for section, key, value in documented:
        assert float(value) == declared[section][key], f"{section}.{key}"
