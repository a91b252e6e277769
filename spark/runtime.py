"""The host pieces an executor needs, built once per Python worker process.

Executors load the configuration and discover plugins themselves (nothing but option text
is shipped from the driver), so a field handler or sink installed as a plugin on the
workers is used exactly as the server would use it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from aviso_host.embedding import (
    CONFIG_FILE_ENV,
    CatalogPlanner,
    PluginRegistry,
    Settings,
    build_backend,
    build_sink,
    catalog_planner,
    discover,
    load_settings,
)
from aviso_plugins.types import Sink, StorageBackend


@dataclass(frozen=True)
class HostRuntime:
    registry: PluginRegistry
    settings: Settings
    planner: CatalogPlanner

    def backend(self) -> StorageBackend:
        return build_backend(self.settings, self.registry)

    def sink(self, name: str, options: dict[str, str]) -> Sink:
        return build_sink(self.registry, name, options, self.planner, self.backend)


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
    return HostRuntime(registry, settings, catalog_planner(settings, registry))
