"""Where the configuration document comes from.

The result is a plain mapping: files deep-merged in cascade order, then ``AVISOSERVER_*``
environment overrides on top. Override values stay text here; turning text into numbers
and booleans is the job of the schema-driven coercion that runs next.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from aviso_host.config.errors import ConfigError
from aviso_host.config.yaml12 import load_yaml

CONFIG_FILE_ENV = "AVISOSERVER_CONFIG_FILE"
ENV_PREFIX = "AVISOSERVER_"
ENV_SEPARATOR = "__"

SYSTEM_CONFIG = Path("/etc/aviso_server/config.yaml")
"""The system-wide file of the default cascade (a module attribute so tests can move it)."""

EXAMPLE_CONFIG = Path(__file__).with_name("example.yaml")
"""The example configuration shipped in the package (in a checkout, also
``configuration/config.yaml``)."""

# The sections without which no server can start: variables addressing both configure the
# server by the environment alone, so the example is not read under them.
REQUIRED_SECTIONS = frozenset({"application", "notification_backend"})


def load_document(
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> dict[str, Any]:
    """Merge the configuration files and environment overrides into one document."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    home = Path.home() if home is None else home

    document: dict[str, Any] = {}
    for path in config_files(environ, cwd, home):
        document = deep_merge(document, _read_file(path))
    return apply_environment(document, environ)


def config_files(environ: Mapping[str, str], cwd: Path, home: Path) -> list[Path]:
    """The files read, in merge order: ``AVISOSERVER_CONFIG_FILE`` alone when set, else
    those of the default cascade that exist."""
    if CONFIG_FILE_ENV not in environ:
        return [path for path in cascade(cwd, home) if _probe(path.exists)]
    raw = environ[CONFIG_FILE_ENV]
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        # os.environ smuggles undecodable bytes in as surrogates.
        raise ConfigError(f"{CONFIG_FILE_ENV} is not valid text") from None
    name = raw.strip()
    if not name:
        raise ConfigError(f"{CONFIG_FILE_ENV} is set but empty")
    path = cwd / name
    if not _probe(path.is_file):
        looked = "" if Path(name).is_absolute() else f" (looked for {path})"
        raise ConfigError(f"{CONFIG_FILE_ENV} does not point to a file: {name}{looked}")
    return [path]


def cascade(cwd: Path, home: Path) -> list[Path]:
    """The files of the default cascade, in merge order, whether they exist or not."""
    return [
        cwd / "configuration" / "config.yaml",
        SYSTEM_CONFIG,
        home / ".aviso_server" / "config.yaml",
    ]


def packaged_example(environ: Mapping[str, str], cwd: Path, home: Path) -> Path | None:
    """The shipped example configuration when nothing else configures the server: no
    ``AVISOSERVER_CONFIG_FILE``, no file of the cascade, and no variables addressing every
    required section (a deployment configured by the environment alone keeps only that; a
    variable or two, such as the port, apply over the example)."""
    try:
        if CONFIG_FILE_ENV in environ or config_files(environ, cwd, home):
            return None
    except ConfigError:  # e.g. an unreadable /etc/aviso_server: loading says so
        return None
    if {path[0] for path in environment_overrides(environ).values()} >= REQUIRED_SECTIONS:
        return None
    return EXAMPLE_CONFIG


def _probe(check: Callable[[], bool]) -> bool:
    """Run a ``Path`` existence check; being denied the answer fails startup."""
    try:
        return check()
    except OSError as exc:  # e.g. an unreadable /etc/aviso_server
        raise ConfigError(
            f"{exc.filename}: cannot access configuration file: {exc.strerror}"
        ) from exc


def _read_file(path: Path) -> dict[str, Any]:
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise ConfigError(
            f"{path}: unsupported configuration file extension (use .yaml, .yml or .json)"
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read configuration file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: configuration file is not valid UTF-8: {exc}") from exc
    try:
        content = (
            json.loads(text, parse_constant=_reject_constant)
            if suffix == ".json"
            else (load_yaml(text))
        )
    except (yaml.YAMLError, ValueError) as exc:
        raise ConfigError(f"{path}: malformed configuration file: {exc}") from exc
    if content is None:  # an empty (or comment-only) YAML file
        return {}
    if not isinstance(content, dict):
        raise ConfigError(f"{path}: the configuration must be a mapping at the top level")
    return content


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge mappings key by key, recursively; any other value replaces the earlier one."""
    merged = dict(base)
    for key, value in override.items():
        previous = merged.get(key)
        if isinstance(previous, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(previous, value)
        else:
            merged[key] = value
    return merged


def environment_overrides(environ: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """Every ``AVISOSERVER_*`` variable -> the key path it sets: lower case, split at ``__``
    (``AVISOSERVER_CONFIG_FILE`` too: it lands in the document as ``config_file``, which
    aviso-server ignores as an unknown key)."""
    return {
        name: tuple(name[len(ENV_PREFIX) :].lower().split(ENV_SEPARATOR))
        for name in environ
        if name[: len(ENV_PREFIX)].upper() == ENV_PREFIX
    }


def apply_environment(document: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Apply every ``AVISOSERVER_*`` variable as a text leaf at its ``__``-separated path.

    Variables are applied in name order so the outcome does not depend on the order the
    operating system lists them in.
    """
    result = dict(document)
    for name, path in sorted(environment_overrides(environ).items()):
        if "" in path:  # e.g. a bare ``AVISOSERVER_``: addresses no key
            continue
        node = result
        for key in path[:-1]:
            child = node.get(key)
            # Copy along the path so the caller's document is never mutated; the
            # environment always wins, even over a non-mapping written in a file.
            node[key] = dict(child) if isinstance(child, Mapping) else {}
            node = node[key]
        node[path[-1]] = environ[name]
    return result
