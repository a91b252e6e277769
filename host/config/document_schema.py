"""The JSON Schema (Draft 2020-12) of the whole configuration document.

The host's own sections come from their declarations (:data:`settings.SECTIONS`); the rest
is composed here from the loaded plugins.

It encodes the loading-time rules of the configuration: required keys, types,
enumerations, and unknown keys failing only in the strict locations (global
``auth``, stream ``auth``, ``payload``, identifier field definitions, and wherever a
plugin's schema says so). Parts depend on the loaded plugins: field definitions are built
from the registered handler classes, each registered backend contributes the schema of its
own section and each stream authoriser the schema of the top-level section it claims.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aviso_host.config.coerce import NO_TEXT_COERCION
from aviso_host.config.plugin_options import claimed_sections, declared_sections, place_sections
from aviso_host.config.rules import BUILTIN_AUTH_MODES
from aviso_host.config.settings import SECTIONS, EventSchemaBlock
from aviso_host.plugins import PluginRegistry
from aviso_plugins.schema_keys import SchemaKey
from aviso_plugins.shapes import shape_schema
from aviso_plugins.types import FieldHandler

_TEXT = {"type": "string"}
_BOOLEAN = {"type": "boolean"}


def document_schema(registry: PluginRegistry) -> dict[str, Any]:
    """The schema every configuration document must satisfy with these plugins loaded."""
    properties = {name: shape_schema(cls) for name, cls in SECTIONS.items()}
    auth = properties["auth"]["properties"]
    auth["mode"]["enum"] = sorted(BUILTIN_AUTH_MODES | set(registry.auth_providers))
    # A plugin mode may declare its own section, named after the mode.
    auth.update(
        (mode, dict(cls.options_schema))
        for mode, cls in registry.auth_providers.items()
        if cls.options_schema is not None
    )
    properties["notification_backend"] = {
        "type": "object",
        "required": ["kind"],
        # Sections of kinds no plugin registers are not checked: aviso-server files
        # often keep a ``jetstream`` block around while running in memory.
        "properties": {
            "kind": _TEXT,
            **{kind: dict(cls.options_schema) for kind, cls in registry.backends.items()},
        },
    }
    properties["notification_schema"] = {
        "type": "object",
        "additionalProperties": _event_schema(registry.field_handlers, registry.schema_keys),
    }
    properties["notification_schema_strict"] = _BOOLEAN
    properties.update(claimed_sections(registry, properties))
    place_sections(properties, declared_sections(registry))
    # Each delivery kind's own section, ``subscriptions.<kind>``, in the section the plugin
    # serving subscriptions declares (a copy: the declared schema is the plugin's).
    subscriptions = properties.get("subscriptions")
    if subscriptions is not None:
        properties["subscriptions"] = {
            **subscriptions,
            "properties": {
                **subscriptions.get("properties", {}),
                **{kind: dict(cls.options_schema) for kind, cls in registry.delivery_kinds.items()},
            },
        }
    return {
        "type": "object",
        "required": ["application", "notification_backend"],
        "properties": properties,
    }


def _event_schema(
    handlers: Mapping[str, type[FieldHandler]], schema_keys: Mapping[str, type[SchemaKey]]
) -> dict[str, Any]:
    schema = shape_schema(EventSchemaBlock)
    schema["properties"]["identifier"] = {
        "type": "object",
        "additionalProperties": field_definition_schema(handlers),
    }
    # The plugins' own keys (``completion``), each checked against its declared schema.
    schema["properties"].update((key, dict(cls.options_schema)) for key, cls in schema_keys.items())
    return schema


def field_definition_schema(handlers: Mapping[str, type[FieldHandler]]) -> dict[str, Any]:
    """One identifier field definition: common keys plus the chosen handler's options.

    Definitions are strictly typed (``required: "true"`` is an error), so text coercion
    stops here.
    """
    branches = []
    for name, handler in sorted(handlers.items()):
        allowed: dict[str, Any] = {
            "type": True,
            "required": True,
            "description": True,
            **handler.options,
        }
        then: dict[str, Any] = {"properties": allowed, "additionalProperties": False}
        if handler.required_options:
            then["required"] = sorted(handler.required_options)
        branches.append(
            {
                "if": {"properties": {"type": {"const": name}}, "required": ["type"]},
                "then": then,
            }
        )
    return {
        NO_TEXT_COERCION: True,
        "type": "object",
        "required": ["type", "required"],
        "properties": {
            "type": {"type": "string", "enum": sorted(handlers)},
            "required": _BOOLEAN,
            "description": _TEXT,
        },
        "allOf": branches,
    }
