"""The host pieces an executor needs, built once per Python worker process.

Executors load the configuration and discover plugins themselves (nothing but option text
is shipped from the driver), so a field handler or sink installed as a plugin on the
workers is used exactly as the server would use it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import Any

from aviso_builtins.backends.jetstream.embedded import URL_FILE, running_url
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

JETSTREAM = "jetstream"


@dataclass(frozen=True)
class HostRuntime:
    registry: PluginRegistry
    settings: Settings
    planner: CatalogPlanner

    def backend(self) -> StorageBackend:
        return build_backend(running_embedded(self.settings), self.registry)

    def sink(self, name: str, options: dict[str, str]) -> Sink:
        return build_sink(self.registry, name, options, self.planner, self.backend)

    def field_defaults(self, event_type: str) -> dict[str, Any]:
        """The schema ``default`` of each identifier field of ``event_type`` that has one."""
        schema = self.settings.schemas.get(event_type)
        if schema is None:
            return {}
        return {
            field: definition["default"]
            for field, definition in schema.identifier.items()
            if definition.get("default") is not None
        }


def running_embedded(settings: Settings) -> Settings:
    """``settings`` whose JetStream backend runs an embedded nats-server (``serve
    --embedded-nats DIR``, ``embedded_store_dir``) made to connect to the server already
    running for that folder, at the URL it wrote there, instead of starting one: a Spark
    task publishes to the server's store, and a second nats-server could not open it."""
    options = settings.backend.options
    store = options.get("embedded_store_dir") if settings.backend.kind == JETSTREAM else None
    if not store:
        return settings
    url = running_url(store)
    if url is None:
        raise ValueError(
            f"no embedded nats-server is running for {store} (no {store}/{URL_FILE}): "
            f"start the server first (aviso-server serve --embedded-nats {store})"
        )
    sections = {
        **settings.backend.sections,
        JETSTREAM: {**options, "nats_url": url, "embedded_store_dir": ""},
    }
    return dataclasses.replace(
        settings, backend=dataclasses.replace(settings.backend, sections=sections)
    )


def embedded_store(settings: Settings, store_dir: str) -> Settings:
    """``settings`` with the JetStream backend of ``serve --embedded-nats store_dir``."""
    sections = {
        **settings.backend.sections,
        JETSTREAM: {
            **settings.backend.sections.get(JETSTREAM, {}),
            "embedded_store_dir": os.path.abspath(store_dir),
        },
    }
    backend = dataclasses.replace(settings.backend, kind=JETSTREAM, sections=sections)
    return dataclasses.replace(settings, backend=backend)


@functools.cache
def host_runtime(config_file: str | None, embedded_nats: str | None = None) -> HostRuntime:
    """Settings from ``config_file`` (else the server's own file lookup) and the plugins;
    with ``embedded_nats`` (a ``serve --embedded-nats`` folder) the backend is the JetStream
    of the server running there.

    Cached: Spark reuses Python workers across tasks, and discovery plus schema building
    would otherwise run once per partition.
    """
    registry = discover()
    environ = dict(os.environ)
    if config_file:
        environ[CONFIG_FILE_ENV] = config_file
    settings = load_settings(registry, environ)
    if embedded_nats:
        settings = embedded_store(settings, embedded_nats)
    return HostRuntime(registry, settings, catalog_planner(settings, registry))
