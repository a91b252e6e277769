"""The JSON Schema (Draft 2020-12) of the whole configuration document.

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

from aviso_host.config.auth_rules import BUILTIN_AUTH_MODES
from aviso_host.config.authorisers import claimed_sections
from aviso_host.config.coerce import NO_TEXT_COERCION
from aviso_host.config.ops_rules import OTLP_PROTOCOLS
from aviso_host.config.settings import DEFAULT_HOMEPAGE_URLS
from aviso_host.plugins import PluginRegistry
from aviso_plugins.types import FieldHandler

_TEXT = {"type": "string"}
_BOOLEAN = {"type": "boolean"}
_COUNT = {"type": "integer", "minimum": 0}
_POSITIVE = {"type": "integer", "minimum": 1}
_SECONDS = {"type": "number", "exclusiveMinimum": 0}
_PORT = {"type": "integer", "minimum": 0, "maximum": 65535}
_ROLE_MAP = {"type": "object", "additionalProperties": {"type": "array", "items": _TEXT}}
_TOPIC = {
    "type": "object",
    "required": ["base", "key_order"],
    "properties": {"base": _TEXT, "key_order": {"type": "array", "items": _TEXT}},
}


def document_schema(registry: PluginRegistry) -> dict[str, Any]:
    """The schema every configuration document must satisfy with these plugins loaded."""
    modes = sorted(BUILTIN_AUTH_MODES | set(registry.auth_providers))
    schema: dict[str, Any] = {
        "type": "object",
        "required": ["application", "notification_backend"],
        "properties": {
            "application": {
                "type": "object",
                "required": ["host", "port"],
                "properties": {
                    "host": _TEXT,
                    "port": _PORT,
                    # A count of worker processes, or "auto" (one per usable core).
                    "workers": {"type": ["integer", "string"], "minimum": 1, "pattern": "^auto$"},
                    "base_url": _TEXT,
                    "static_files_path": _TEXT,
                    "homepage": {
                        "type": "object",
                        "properties": {name: _TEXT for name in DEFAULT_HOMEPAGE_URLS},
                    },
                },
            },
            "logging": {
                "type": "object",
                "properties": {
                    # Unconstrained: an unusable level means info, never a failure.
                    "level": {},
                    # json or text; anything else (aviso-server files) warns, keeps JSON.
                    "format": {},
                    "otlp": {
                        "type": "object",
                        "properties": {
                            "enabled": _BOOLEAN,
                            "endpoint": _TEXT,
                            "protocol": {"type": "string", "enum": list(OTLP_PROTOCOLS)},
                        },
                    },
                },
            },
            "auth": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "enabled": _BOOLEAN,
                    "mode": {"type": "string", "enum": modes},
                    "auth_o_tron_url": _TEXT,
                    "jwt_secret": _TEXT,
                    "admin_roles": _ROLE_MAP,
                    "timeout_ms": _COUNT,
                    # A plugin mode may declare its own section, named after the mode.
                    **{
                        mode: dict(cls.options_schema)
                        for mode, cls in registry.auth_providers.items()
                        if cls.options_schema is not None
                    },
                },
            },
            "metrics": {
                "type": "object",
                "properties": {"enabled": _BOOLEAN, "host": _TEXT, "port": _PORT},
            },
            "notification_backend": {
                "type": "object",
                "required": ["kind"],
                # Sections of kinds no plugin registers are not checked: aviso-server files
                # often keep a ``jetstream`` block around while running in memory.
                "properties": {
                    "kind": _TEXT,
                    **{kind: dict(cls.options_schema) for kind, cls in registry.backends.items()},
                },
            },
            "notification_schema": {
                "type": "object",
                "additionalProperties": _event_schema(registry.field_handlers),
            },
            "notification_schema_strict": _BOOLEAN,
            "watch_endpoint": {
                "type": "object",
                "properties": {
                    "sse_heartbeat_interval_sec": _COUNT,
                    "connection_max_duration_sec": _COUNT,
                    "replay_batch_size": _COUNT,
                    "max_historical_notifications": _COUNT,
                    "replay_batch_delay_ms": _COUNT,
                    "concurrent_notification_processing": _COUNT,
                    "max_queue_bytes": _COUNT,
                    "on_backpressure": {"enum": ["disconnect", "drop"]},
                    "bulk_readers": {"type": "array", "items": _TEXT},
                    "bulk_replay_batch_size": _COUNT,
                },
            },
            "limits": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "max_body_bytes": _POSITIVE,
                    "max_json_depth": _POSITIVE,
                    "max_header_bytes": _POSITIVE,
                    "header_timeout_seconds": _SECONDS,
                    "body_timeout_seconds": _SECONDS,
                    "idle_timeout_seconds": _SECONDS,
                    "max_connections": _POSITIVE,
                    "max_connections_per_client": _COUNT,
                    "max_identifier_value_bytes": _POSITIVE,
                    "max_payload_bytes": _POSITIVE,
                    "max_topic_bytes": _POSITIVE,
                    "max_polygon_vertices": _POSITIVE,
                    "max_aggregate_groups": _POSITIVE,
                    # Above the largest debounce_ms allowed, every aggregate would be refused.
                    "min_aggregate_debounce_ms": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": 60000,
                    },
                },
            },
        },
    }
    schema["properties"]["subscriptions"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "enabled": _BOOLEAN,
            "max_per_user": _POSITIVE,
            "max_total": _POSITIVE,
            "max_definition_bytes": _POSITIVE,
            # Each delivery kind's own section, ``subscriptions.<kind>``.
            **{kind: dict(cls.options_schema) for kind, cls in registry.delivery_kinds.items()},
        },
    }
    schema["properties"].update(claimed_sections(registry, schema["properties"]))
    return schema


def _event_schema(handlers: Mapping[str, type[FieldHandler]]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["identifier"],
        "properties": {
            "identifier": {
                "type": "object",
                "additionalProperties": field_definition_schema(handlers),
            },
            "topic": _TOPIC,
            "endpoint": _TOPIC,
            "payload": {
                "type": "object",
                "additionalProperties": False,
                "required": ["required"],
                "properties": {"required": _BOOLEAN},
            },
            "auth": {
                "type": "object",
                "additionalProperties": False,
                "required": ["required"],
                "properties": {
                    "required": _BOOLEAN,
                    "read_roles": _ROLE_MAP,
                    "write_roles": _ROLE_MAP,
                    "plugins": {"type": "array", "items": _TEXT},
                },
            },
            "max_historical_notifications": _POSITIVE,
            "storage_policy": {
                "type": "object",
                "properties": {
                    "retention_time": _TEXT,
                    "max_messages": {"type": "integer"},
                    "max_size": _TEXT,
                    "allow_duplicates": _BOOLEAN,
                    "compression": _BOOLEAN,
                },
            },
        },
    }


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
