"""Startup rules of the global ``auth`` section and of per-stream ``auth`` blocks.

The ``auth`` section's rules, checked in the order the
latter gives for error reporting.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from aviso_host.config.errors import at
from aviso_host.config.hygiene import check_role_map, is_padded

BUILTIN_AUTH_MODES = frozenset({"direct", "trusted_proxy"})
"""Modes the specification defines; valid in configuration before their plugins load."""

_ROLE_MAPS = ("read_roles", "write_roles")


def check_global_auth(auth: Mapping[str, Any]) -> None:
    """Rules that apply only once authentication is enabled."""
    if not auth.get("enabled", False):
        return
    url = auth.get("auth_o_tron_url", "")
    secret = auth.get("jwt_secret", "")
    for key, value in (("auth_o_tron_url", url), ("jwt_secret", secret)):
        if is_padded(value):
            raise at(("auth", key), "must not have leading or trailing whitespace")
    if auth.get("timeout_ms", 5000) == 0:
        raise at(("auth", "timeout_ms"), "must be greater than 0 when auth is enabled")
    admin_roles = auth.get("admin_roles", {})
    if not admin_roles:
        raise at(("auth", "admin_roles"), "must name at least one realm when auth is enabled")
    check_role_map(("auth", "admin_roles"), admin_roles)
    mode = auth.get("mode", "direct")
    if mode == "direct" and not url:
        raise at(("auth", "auth_o_tron_url"), "required when auth mode is 'direct'")
    # Both built-in modes verify every JWT locally; a plugin mode checks its own options.
    if mode in BUILTIN_AUTH_MODES and not secret:
        raise at(("auth", "jwt_secret"), f"required when auth mode is {mode!r}")


def check_stream_plugins(
    schemas: Mapping[str, Mapping[str, Any]], registered: Collection[str]
) -> None:
    for event_type, stream_auth in _stream_auth_blocks(schemas):
        if "plugins" not in stream_auth:
            continue
        path = ("notification_schema", event_type, "auth", "plugins")
        plugins = stream_auth["plugins"]
        if not plugins:
            raise at(path, "must not be empty (omit the key instead)")
        for index, name in enumerate(plugins):
            if name not in registered:
                known = ", ".join(sorted(registered)) or "none installed"
                raise at((*path, index), f"unknown plugin {name!r} (known: {known})")
        if not stream_auth["required"]:
            raise at(path, "stream plugins need auth.required: true")


def check_stream_auth(schemas: Mapping[str, Mapping[str, Any]], auth_enabled: bool) -> None:
    """Role maps clean, and each stream's block consistent with the global switch."""
    for event_type, stream_auth in _stream_auth_blocks(schemas):
        path = ("notification_schema", event_type, "auth")
        for key in _ROLE_MAPS:
            if key in stream_auth:
                if not stream_auth[key]:
                    raise at((*path, key), "must not be empty (omit the key instead)")
                check_role_map((*path, key), stream_auth[key])
        role_maps = [key for key in _ROLE_MAPS if key in stream_auth]
        if auth_enabled:
            if role_maps and not stream_auth["required"]:
                raise at(
                    (*path, role_maps[0]),
                    "role restrictions need required: true (a public stream admits everyone)",
                )
        elif stream_auth["required"]:
            raise at(
                (*path, "required"),
                "global auth is disabled (enable auth or remove the stream auth block)",
            )
        elif role_maps:
            raise at(
                (*path, role_maps[0]),
                "global auth is disabled (enable auth or remove the stream auth block)",
            )


def _stream_auth_blocks(
    schemas: Mapping[str, Mapping[str, Any]],
) -> list[tuple[str, Mapping[str, Any]]]:
    return [(name, schema["auth"]) for name, schema in schemas.items() if "auth" in schema]


def check_plugins_installed(auth: Mapping[str, Any], auth_modes: Collection[str]) -> None:
    """Fail closed: authentication that is configured but not enforceable never starts."""
    mode = auth.get("mode", "direct")
    if auth.get("enabled", False) and mode not in auth_modes:
        raise at(
            ("auth", "mode"),
            f"no installed plugin provides auth mode {mode!r}; refusing to start with "
            "authentication enabled but not enforced",
        )
