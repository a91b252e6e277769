"""The host pieces an executor needs, built once per Python worker process.

Executors load the configuration and discover plugins themselves (nothing but option text
is shipped from the driver), so a field handler or sink installed as a plugin on the
workers is used exactly as the server would use it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from aviso_host.config import Settings, load_settings
from aviso_host.config.construct import construct
from aviso_host.config.plugin_options import apply_options_schema, option_secrets
from aviso_host.identifiers import CatalogPlanner
from aviso_host.plugins import PluginRegistry, discover
from aviso_host.schemas import SchemaCatalog
from aviso_host.service import build_backend
from aviso_plugins.types import Sink, SinkContext, StorageBackend

CONFIG_FILE_ENV = "AVISOSERVER_CONFIG_FILE"


@dataclass(frozen=True)
class HostRuntime:
    registry: PluginRegistry
    settings: Settings
    planner: CatalogPlanner

    def backend(self) -> StorageBackend:
        return build_backend(self.settings, self.registry)

    def sink(self, name: str, options: dict[str, str]) -> Sink:
        sink_class = self.registry.sinks.get(name)
        if sink_class is None:
            installed = ", ".join(sorted(self.registry.sinks)) or "none"
            raise ValueError(f"unknown sink '{name}' (installed sinks: {installed})")
        # Spark passes ``sink.<key>`` options as ``<key>``: errors name them that way.
        path = ("sink",)
        checked = apply_options_schema(options, sink_class.options_schema, path)
        return construct(
            lambda: sink_class(SinkContext(checked, self.planner, self.backend)),
            path,
            self.registry.describe("sinks", name),
            option_secrets(checked, sink_class.options_schema),
        )


@functools.cache
def host_runtime(config_file: str | None) -> HostRuntime:
    """Settings from ``config_file`` (else the server's own file lookup) and the plugins.

    Cached: Spark reuses Python workers across tasks, and discovery plus schema building
    would otherwise run once per partition.
    """
    registry = discover()
    environ = dict(os.environ)
    if config_file:
        environ[CONFIG_FILE_ENV] = config_file
    settings = load_settings(registry, environ)
    limits = settings.limits
    planner = CatalogPlanner(
        SchemaCatalog(settings, registry.field_handlers),
        limits.max_identifier_value_bytes,
        limits.max_payload_bytes,
        limits.max_topic_bytes,
    )
    return HostRuntime(registry, settings, planner)
