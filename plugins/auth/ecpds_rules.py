"""The ``ecpds`` section: its schema, defaults and startup rules, checked by the host
through ``StreamAuthoriser.check_configuration``.

The rules apply only when some stream lists the plugin; an unused section is merely
shape-checked, so a half-written one does not block a deployment that does not use it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from aviso_plugins.types import AuthoriserConfiguration, ConfigurationProblem

SECTION = "ecpds"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
"""Hosts plain ``http`` may reach: the service credentials must not cross a network in clear."""

_TEXT = {"type": "string"}
_COUNT = {"type": "integer", "minimum": 0}

OPTIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["username", "password", "servers", "match_key"],
    "properties": {
        "username": _TEXT,
        "password": _TEXT,
        "servers": {"type": "array", "items": _TEXT},
        "match_key": _TEXT,
        "target_field": {**_TEXT, "default": "name"},
        "cache_ttl_seconds": {**_COUNT, "default": 300},
        "max_entries": {**_COUNT, "default": 10000},
        "request_timeout_seconds": {**_COUNT, "default": 30},
        "connect_timeout_seconds": {**_COUNT, "default": 5},
        "partial_outage_policy": {
            "type": "string",
            "enum": ["strict", "any_success"],
            "default": "strict",
        },
        "recheck_seconds": {**_COUNT, "default": 60},
    },
}

_POSITIVE = (
    "cache_ttl_seconds",
    "max_entries",
    "request_timeout_seconds",
    "connect_timeout_seconds",
)

# ``scheme://userinfo@``: the credentials an error message must never repeat.
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s]+@")


def check(configuration: AuthoriserConfiguration) -> list[ConfigurationProblem]:
    """Refuse an unusable section; return what aviso-server 0.13 refuses but 0.7.1 accepted."""
    if not configuration.configured:
        raise ConfigurationProblem(
            (SECTION,),
            f"section required by streams using the plugin: {', '.join(configuration.streams)}",
        )
    options = configuration.options
    _check_servers(options["servers"])
    for key in ("username", "password", "target_field"):
        _require_clean((SECTION, key), options[key])
    match_key = options["match_key"]
    if not match_key.strip():
        raise ConfigurationProblem((SECTION, "match_key"), "must not be blank")
    if any(char.isspace() or char in "/\0" for char in match_key):
        raise ConfigurationProblem(
            (SECTION, "match_key"), "must not contain whitespace, '/' or NUL"
        )
    for event_type in configuration.streams:
        path = ("notification_schema", event_type, "identifier")
        definition = configuration.schemas[event_type]["identifier"].get(match_key)
        if definition is None:
            raise ConfigurationProblem(
                path, f"the ecpds match_key {match_key!r} must be a declared field"
            )
        if definition["required"] is not True:
            raise ConfigurationProblem(
                (*path, match_key), "the ecpds match_key field must be required: true"
            )
    for key in _POSITIVE:
        if options[key] == 0:
            raise ConfigurationProblem((SECTION, key), "must be greater than 0")
    return _match_key_warnings(configuration)


def _match_key_warnings(configuration: AuthoriserConfiguration) -> list[ConfigurationProblem]:
    """A ``match_key`` outside ``key_order`` or on a polygon is a warning; a point cloud,
    new in 0.11, fails."""
    match_key = configuration.options["match_key"]
    warnings: list[ConfigurationProblem] = []
    for event_type in configuration.streams:
        schema = configuration.schemas[event_type]
        path = ("notification_schema", event_type, "identifier", match_key)
        handler = configuration.field_handlers[schema["identifier"][match_key]["type"]]
        if handler.point_cloud:
            raise ConfigurationProblem(path, "the ecpds match_key cannot be a point cloud")
        if handler.spatial:
            warnings.append(
                ConfigurationProblem(
                    path, "the ecpds match_key is a spatial field; aviso-server 0.13 refuses this"
                )
            )
        elif "topic" in schema and match_key not in schema["topic"]["key_order"]:
            warnings.append(
                ConfigurationProblem(
                    (SECTION, "match_key"),
                    f"{match_key!r} is not in the key_order of {event_type!r}; aviso-server "
                    "0.13 requires the match_key in key_order",
                )
            )
    return warnings


def _require_clean(path: tuple[str, ...], text: str) -> None:
    if not text.strip():
        raise ConfigurationProblem(path, "must not be blank")
    if text != text.strip():
        raise ConfigurationProblem(path, "must not have leading or trailing whitespace")


def _check_servers(servers: Sequence[str]) -> None:
    if not servers:
        raise ConfigurationProblem((SECTION, "servers"), "must list at least one server")
    for index, server in enumerate(servers):
        problem = _server_problem(server)
        if problem:
            raise ConfigurationProblem((SECTION, "servers", index), problem)


def _server_problem(url: str) -> str | None:
    """What is wrong with one server URL; the URL is quoted with any credentials masked."""
    problem = _raw_server_problem(url)
    masked = _URL_CREDENTIALS.sub(r"\1[REDACTED]@", url)
    return problem.replace(repr(url), repr(masked)) if problem else None


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
