"""The event types the plugins' schema keys derive, added to ``notification_schema`` before
the rest of the configuration is checked, so that they are validated like written ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aviso_host.config.errors import at
from aviso_host.plugins import PluginRegistry
from aviso_plugins.auth import ConfigurationProblem


def with_derived_schemas(
    document: Mapping[str, Any], registry: PluginRegistry
) -> Mapping[str, Any]:
    """``document`` with every derived event type in ``notification_schema`` (itself when
    no entry has a plugin's key); raises ``ConfigError`` naming the key at fault."""
    schemas: Mapping[str, Any] = document.get("notification_schema") or {}
    derived: dict[str, Any] = {}
    for event_type, entry in schemas.items():
        for key, cls in sorted(registry.schema_keys.items()):
            if not isinstance(entry, Mapping) or key not in entry:
                continue
            path = ("notification_schema", event_type, key)
            try:
                added = cls(registry.field_handlers).derived_schemas(event_type, entry, entry[key])
            except ConfigurationProblem as problem:
                raise at((*path, *problem.path), problem.message) from None
            for name, added_entry in added.items():
                if name in schemas or name in derived:
                    raise at(path, f"derives event type '{name}', which is already configured")
                derived[name] = dict(added_entry)
    if not derived:
        return document
    return {**document, "notification_schema": {**schemas, **derived}}
