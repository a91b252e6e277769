"""Building a sink plugin as a producer uses it: options checked against its schema, the
host's validation (the notify route's checks) as its planner.

Spark's writer and the testing kit's :func:`aviso_plugins.testing.run_sink` both build sinks
here, so a sink tested with the kit meets exactly what Spark gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aviso_host.config import Settings
from aviso_host.config.construct import construct
from aviso_host.config.plugin_options import apply_options_schema, option_secrets
from aviso_host.identifiers import CatalogPlanner
from aviso_host.plugins import PluginRegistry
from aviso_host.schemas import SchemaCatalog
from aviso_plugins.types import Sink, SinkContext, StorageBackend


def catalog_planner(settings: Settings, registry: PluginRegistry) -> CatalogPlanner:
    """The notify route's checks for ``settings``' schemas and limits."""
    limits = settings.limits
    return CatalogPlanner(
        SchemaCatalog(settings, registry.field_handlers),
        limits.max_identifier_value_bytes,
        limits.max_payload_bytes,
        limits.max_topic_bytes,
    )


def build_sink(
    registry: PluginRegistry,
    name: str,
    options: Mapping[str, Any],
    planner: CatalogPlanner,
    backend_factory: Callable[[], StorageBackend],
) -> Sink:
    """The sink ``name`` (not started); an unknown name or unusable options raise
    ``ValueError`` / ``ConfigError`` naming ``sink.<key>``."""
    sink_class = registry.sinks.get(name)
    if sink_class is None:
        installed = ", ".join(sorted(registry.sinks)) or "none"
        raise ValueError(f"unknown sink '{name}' (installed sinks: {installed})")
    # Spark passes ``sink.<key>`` options as ``<key>``: errors name them that way.
    path = ("sink",)
    checked = apply_options_schema(options, sink_class.options_schema, path)
    return construct(
        lambda: sink_class(SinkContext(checked, planner, backend_factory)),
        path,
        registry.describe("sinks", name),
        option_secrets(checked, sink_class.options_schema),
    )
