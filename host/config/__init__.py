"""Configuration: load the document, validate it against the loaded plugins, type it.

``load_settings`` is the whole pipeline; ``settings_from_document`` starts from a document
already in hand (tests, ``create_app``). Both raise :class:`ConfigError` naming the key at
fault, and nothing re-reads the raw document after startup.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from aviso_host.config.build import settings_from_document
from aviso_host.config.errors import ConfigError
from aviso_host.config.loader import (
    CONFIG_FILE_ENV,
    cascade,
    config_files,
    environment_overrides,
    load_document,
)
from aviso_host.config.redact import redact
from aviso_host.config.settings import Settings
from aviso_host.plugins import PluginRegistry


def load_settings(
    registry: PluginRegistry,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> Settings:
    """Read files and environment (defaults: the process's own) and validate the result."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    home = Path.home() if home is None else home
    document = load_document(environ, cwd, home)
    files = tuple(str(path) for path in config_files(environ, cwd, home))
    try:
        settings = settings_from_document(document, registry, environment_overrides(environ))
    except ConfigError as exc:
        if CONFIG_FILE_ENV in environ or files:
            raise
        looked = ", ".join(str(path) for path in cascade(cwd, home))
        raise ConfigError(f"{exc} (no configuration file: looked for {looked})") from exc
    return replace(settings, files=files)


__all__ = [
    "ConfigError",
    "Settings",
    "load_document",
    "load_settings",
    "redact",
    "settings_from_document",
]
