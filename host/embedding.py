"""The host as applications built on it use it: the one module of ``aviso_host`` that the
Spark data source, the load tests, the plugin starter and the plugin testing kit import (an
import-linter contract in pyproject.toml holds them to it), so the rest of the host can change
without breaking them.

Configuration (``load_settings`` as ``aviso-server serve`` reads it, ``settings_from_document``,
``ConfigError`` worded as ``config check`` words it), plugin discovery, the application and the
server ``aviso-server serve`` runs, and publishing without the HTTP API (``build_backend``,
``catalog_planner``, ``build_sink``). Each name is imported from its module on first use, so
that importing this module costs the command line's start-up nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aviso_host.app import create_app
    from aviso_host.config import ConfigError, Settings, load_settings, settings_from_document
    from aviso_host.config.loader import CONFIG_FILE_ENV, deep_merge
    from aviso_host.config.redact import mask_url_credentials
    from aviso_host.identifiers import CatalogPlanner
    from aviso_host.plugins import HOST_COMMANDS, PluginError, PluginRegistry, discover
    from aviso_host.server import AvisoServer, uvicorn_config
    from aviso_host.service import build_backend
    from aviso_host.sinks import build_sink, catalog_planner

__all__ = [
    "CONFIG_FILE_ENV",
    "HOST_COMMANDS",
    "AvisoServer",
    "CatalogPlanner",
    "ConfigError",
    "PluginError",
    "PluginRegistry",
    "Settings",
    "build_backend",
    "build_sink",
    "catalog_planner",
    "create_app",
    "deep_merge",
    "discover",
    "load_settings",
    "mask_url_credentials",
    "settings_from_document",
    "uvicorn_config",
]

_HOMES = {
    "CONFIG_FILE_ENV": "aviso_host.config.loader",
    "HOST_COMMANDS": "aviso_host.plugins",
    "AvisoServer": "aviso_host.server",
    "CatalogPlanner": "aviso_host.identifiers",
    "ConfigError": "aviso_host.config",
    "PluginError": "aviso_host.plugins",
    "PluginRegistry": "aviso_host.plugins",
    "Settings": "aviso_host.config",
    "build_backend": "aviso_host.service",
    "build_sink": "aviso_host.sinks",
    "catalog_planner": "aviso_host.sinks",
    "create_app": "aviso_host.app",
    "deep_merge": "aviso_host.config.loader",
    "discover": "aviso_host.plugins",
    "load_settings": "aviso_host.config",
    "mask_url_credentials": "aviso_host.config.redact",
    "settings_from_document": "aviso_host.config",
    "uvicorn_config": "aviso_host.server",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
