"""Startup rules of the ``ecpds`` section (configuration chapter §6, auth chapter §8.2).

They apply only when some stream lists the plugin; an unused section is merely
shape-checked, so a half-written one does not block a deployment that does not use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from aviso_host.config.errors import at, key_path
from aviso_host.config.hygiene import require_clean
from aviso_host.config.redact import mask_url_credentials
from aviso_plugins.types import FieldHandler

PLUGIN = "ecpds"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
"""Hosts plain ``http`` may reach: the service credentials must not cross a network in clear."""

_POSITIVE = (
    "cache_ttl_seconds",
    "max_entries",
    "request_timeout_seconds",
    "connect_timeout_seconds",
)


def plugin_streams(schemas: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Event types whose ``auth.plugins`` list the ECPDS plugin, in configuration order."""
    return [
        name
        for name, schema in schemas.items()
        if PLUGIN in schema.get("auth", {}).get("plugins", ())
    ]


def check_ecpds(ecpds: Mapping[str, Any] | None, schemas: Mapping[str, Mapping[str, Any]]) -> None:
    streams = plugin_streams(schemas)
    if not streams:
        return
    if ecpds is None:
        raise at((PLUGIN,), f"section required by streams using the plugin: {', '.join(streams)}")
    _check_servers(ecpds["servers"])
    for key in ("username", "password", "target_field"):
        if key in ecpds:
            require_clean((PLUGIN, key), ecpds[key])
    match_key = ecpds["match_key"]
    if not match_key.strip():
        raise at((PLUGIN, "match_key"), "must not be blank")
    if any(char.isspace() or char in "/\0" for char in match_key):
        raise at((PLUGIN, "match_key"), "must not contain whitespace, '/' or NUL")
    for event_type in streams:
        path = ("notification_schema", event_type, "identifier")
        definition = schemas[event_type]["identifier"].get(match_key)
        if definition is None:
            raise at(path, f"the ecpds match_key {match_key!r} must be a declared field")
        if definition["required"] is not True:
            raise at((*path, match_key), "the ecpds match_key field must be required: true")
    for key in _POSITIVE:
        if ecpds.get(key) == 0:
            raise at((PLUGIN, key), "must be greater than 0")


def match_key_warnings(
    ecpds: Mapping[str, Any] | None,
    schemas: Mapping[str, Mapping[str, Any]],
    handlers: Mapping[str, type[FieldHandler]],
) -> list[str]:
    """Run after :func:`check_ecpds`: what aviso-server 0.13 refuses about ``match_key``
    but 0.7.1 accepted (outside ``key_order``, a polygon) is a warning; a point cloud,
    new in 0.11, fails."""
    streams = plugin_streams(schemas)
    if ecpds is None or not streams:
        return []
    match_key = ecpds["match_key"]
    warnings: list[str] = []
    for event_type in streams:
        schema = schemas[event_type]
        path = ("notification_schema", event_type, "identifier", match_key)
        handler = handlers[schema["identifier"][match_key]["type"]]
        if handler.point_cloud:
            raise at(path, "the ecpds match_key cannot be a point cloud")
        if handler.spatial:
            warnings.append(
                f"{key_path(path)}: the ecpds match_key is a spatial field; aviso-server 0.13 "
                "refuses this"
            )
        elif "topic" in schema and match_key not in schema["topic"]["key_order"]:
            warnings.append(
                f"{key_path((PLUGIN, 'match_key'))}: {match_key!r} is not in the key_order of "
                f"{event_type!r}; aviso-server 0.13 requires the match_key in key_order"
            )
    return warnings


def _check_servers(servers: Sequence[str]) -> None:
    if not servers:
        raise at((PLUGIN, "servers"), "must list at least one server")
    for index, server in enumerate(servers):
        problem = _server_problem(server)
        if problem:
            raise at((PLUGIN, "servers", index), problem)


def _server_problem(url: str) -> str | None:
    """What is wrong with one server URL; the URL is quoted with any credentials masked."""
    problem = _raw_server_problem(url)
    return problem.replace(repr(url), repr(mask_url_credentials(url))) if problem else None


def _raw_server_problem(url: str) -> str | None:
    if not url.strip():
        return "must not be blank"
    if any(char.isspace() for char in url):
        return f"{url!r} is not a valid URL (contains whitespace)"
    try:
        parts = urlsplit(url)
        _ = parts.port  # parsing the port is what validates it
    except ValueError as exc:
        return f"{url!r} is not a valid URL ({exc})"
    if not parts.scheme or not parts.hostname:
        return f"{url!r} is not an absolute URL"
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        return f"{url!r}: plain http is only allowed for 127.0.0.1, [::1] or localhost"
    if parts.scheme not in ("http", "https"):
        return f"{url!r}: scheme must be https (or http for a loopback host)"
    # The plugin appends its own query string.
    if "?" in url or "#" in url:
        return f"{url!r} must not contain a query string or fragment"
    return None
