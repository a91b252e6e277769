"""Semantic startup rules, run on a document that already has the right shape.

The groups run in a fixed order, so when several things
are wrong the operator is told about the earliest one first.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import fields
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from aviso_host.config.construct import construct
from aviso_host.config.errors import KeyPath, at, key_path
from aviso_host.config.plugin_options import check_authorisers, section_warnings
from aviso_host.config.settings import DEFAULT_HOMEPAGE_URLS
from aviso_host.config.unknown_keys import nearest
from aviso_host.plugins import PluginRegistry
from aviso_plugins._shared.literals import parse_duration, parse_size
from aviso_plugins.types import (
    BackendCapabilities,
    ConfigurationProblem,
    FieldHandler,
    StorageBackend,
)


def check_rules(document: Mapping[str, Any], registry: PluginRegistry) -> list[str]:
    """Fail on the first violated rule; return warnings worth logging at startup."""
    check_homepage(document["application"])
    sections = section_warnings(document, registry)
    backend = _selected_backend(document["notification_backend"], registry)
    check_workqueue(document)
    schemas = document.get("notification_schema", {})
    warnings = sections + check_schemas(
        schemas,
        registry.field_handlers,
        backend,
        lambda name: registry.describe("field_handlers", name),
    )
    auth = document.get("auth", {})
    check_global_auth(auth)
    check_stream_plugins(schemas, registry.authorisers)
    check_stream_auth(schemas, auth.get("enabled", False))
    _check_metrics(document.get("metrics", {}), document["application"]["port"])
    warnings += check_authorisers(document, registry)
    warnings += replay_cap_warnings(document.get("watch_endpoint", {}))
    warnings += log_format_warnings(document.get("logging", {}))
    check_plugins_installed(auth, set(registry.auth_providers))
    return warnings


def _selected_backend(section: Mapping[str, Any], registry: PluginRegistry) -> type[StorageBackend]:
    kind = section["kind"]
    backend = registry.backends.get(kind)
    if backend is None:
        known = ", ".join(repr(name) for name in sorted(registry.backends)) or "none"
        raise at(
            ("notification_backend", "kind"), f"unknown backend {kind!r} (registered: {known})"
        )
    # The backend's own rules; a plugin defect there is reported like one in its constructor.
    construct(
        partial(_check_options, backend, section.get(kind, {})),
        ("notification_backend", kind),
        registry.describe("backends", kind),
    )
    return backend


def _check_options(backend: type[StorageBackend], options: Mapping[str, Any]) -> None:
    try:
        backend.check_options(options)
    except ConfigurationProblem as problem:
        raise at(problem.path, problem.message) from problem


def _check_metrics(metrics: Mapping[str, Any], application_port: int) -> None:
    if not metrics.get("enabled", False):
        return
    port = metrics.get("port")
    if port is None:
        raise at(("metrics",), "missing required key 'port' (metrics are enabled)")
    if port == 0:
        raise at(("metrics", "port"), "must not be 0 when metrics are enabled")
    if port == application_port:
        raise at(("metrics", "port"), f"must differ from application.port ({application_port})")


# -- ``notification_schema`` beyond its shape. Handler-specific rules (a ``DateHandler``
# format, a range with ``min > max``, an empty ``EnumHandler.values``...) belong to the
# handler plugins: each declares them in its ``options`` schema or raises ``ValueError``
# from ``__init__``, which is surfaced here.

RESERVED_FIELD = "point"
"""A watch/replay-only identifier key; a field of that name could never be notified."""

POLYGON_FIELD = "polygon"
POINT_CLOUD_FIELD = "point_cloud"

# aviso-server 0.13's topic base grammar; 0.7.1 accepted any base, so here it only warns.
_TOPIC_BASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")

# A backend declares one capability flag per storage_policy key, named after the key.
STORAGE_POLICY_KEYS = tuple(field.name for field in fields(BackendCapabilities))

# Only ASCII letters are folded: aviso-server compares bases with ASCII case folding.
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _ascii_lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)


def check_schemas(
    schemas: Mapping[str, Mapping[str, Any]],
    handlers: Mapping[str, type[FieldHandler]],
    backend: type[StorageBackend],
    describe: Callable[[str], str] = lambda name: f"field handler {name!r}",
) -> list[str]:
    """Fail on the first broken schema; return warnings worth logging at startup.

    ``describe`` names the plugin of a handler type in error messages."""
    warnings: list[str] = []
    bases: dict[str, tuple[str, str]] = {}  # case-folded base -> (event type, base)
    for event_type, schema in schemas.items():
        path = ("notification_schema", event_type)
        _check_identifier(path, schema["identifier"], handlers, describe)
        warnings += _check_spatial(path, schema, handlers)
        if "topic" in schema:
            warnings += _check_topic(path, schema, bases)
            warnings += _key_order_warnings(path, schema, handlers)
        elif not _TOPIC_BASE.fullmatch(event_type):
            warnings.append(
                f"{key_path(path)}: event type {event_type!r} is used as the topic base and is "
                f"an invalid topic base for aviso-server 0.13 (it must match "
                f"{_TOPIC_BASE.pattern}); accepted for 0.7.1 compatibility"
            )
        if "storage_policy" in schema:
            _check_storage_policy(path, schema, backend)
    return warnings


def _check_topic(
    path: tuple[str, ...], schema: Mapping[str, Any], bases: dict[str, tuple[str, str]]
) -> list[str]:
    topic = schema["topic"]
    base = topic["base"]
    base_path = (*path, "topic", "base")
    if not base:
        raise at(base_path, "must not be empty")
    warnings: list[str] = []
    folded = _ascii_lower(base)
    if folded in bases:
        other, other_base = bases[folded]
        if other_base == base:
            raise at(base_path, f"{base!r} is also the base of event type {other!r}")
        # 0.7.1 accepted bases differing only in case; 0.13 refuses them at startup.
        warnings.append(
            f"{key_path(base_path)}: {base!r} and the base of event type {other!r} differ only "
            "in case; aviso-server 0.13 refuses this (both define topic base "
            f"{folded!r}), and admin wipes by name act on both"
        )
    bases.setdefault(folded, (path[-1], base))
    for index, name in enumerate(topic["key_order"]):
        if name not in schema["identifier"]:
            raise at(
                (*path, "topic", "key_order", index),
                f"{name!r} is not a field declared in identifier",
            )
    if not _TOPIC_BASE.fullmatch(base):
        warnings.append(
            f"{key_path(base_path)}: {base!r} is an invalid topic base for aviso-server 0.13 "
            f"(it must match {_TOPIC_BASE.pattern}); accepted for 0.7.1 compatibility"
        )
    if base != folded:
        # Only a recommendation, but aviso-server's JetStream backend ignores storage
        # policies of bases that are not lower-case.
        warnings.append(
            f"{key_path(base_path)}: {base!r} is not lower-case; prefer lower-case topic bases"
        )
    return warnings


def _key_order_warnings(
    path: tuple[str, ...],
    schema: Mapping[str, Any],
    handlers: Mapping[str, type[FieldHandler]],
) -> list[str]:
    """What aviso-server 0.13 refuses in ``key_order`` but 0.7.1 accepted."""
    key_order: list[str] = schema["topic"]["key_order"]
    order_path = key_path((*path, "topic", "key_order"))
    warnings: list[str] = []
    if not key_order:
        warnings.append(f"{order_path}: is empty; aviso-server 0.13 requires at least one key")
    repeated = sorted({name for name in key_order if key_order.count(name) > 1})
    if repeated:
        warnings.append(
            f"{order_path}: repeats {', '.join(repeated)}; aviso-server 0.13 refuses duplicates"
        )
    for name, definition in schema["identifier"].items():
        if name in key_order or handlers[definition["type"]].spatial:
            continue
        warnings.append(
            f"{order_path}: identifier {name!r} is left out; aviso-server 0.13 requires every "
            "identifier except polygon in key_order (0.7.1 allowed validation-only fields)"
        )
    return warnings


def _check_spatial(
    path: tuple[str, ...],
    schema: Mapping[str, Any],
    handlers: Mapping[str, type[FieldHandler]],
) -> list[str]:
    """Point clouds (new in 0.11, so refused outright) and the polygon's name (a warning)."""
    warnings: list[str] = []
    identifier = schema["identifier"]
    clouds = [name for name, d in identifier.items() if handlers[d["type"]].point_cloud]
    for name in clouds:
        field_path = (*path, "identifier", name)
        type_name = identifier[name]["type"]
        if name != POINT_CLOUD_FIELD:
            raise at(field_path, f"a {type_name} field must be named {POINT_CLOUD_FIELD!r}")
        if "topic" not in schema:
            raise at(field_path, f"a {type_name} field requires a topic block")
        if name in schema["topic"]["key_order"]:
            raise at(
                (*path, "topic", "key_order"),
                f"must not list {name!r}: point clouds are never part of the topic",
            )
        if POLYGON_FIELD in identifier:
            raise at(
                (*path, "identifier", POLYGON_FIELD),
                f"a schema with a {type_name} field cannot also declare {POLYGON_FIELD!r}",
            )
    for name, definition in identifier.items():
        handler = handlers[definition["type"]]
        if handler.spatial and not handler.point_cloud and name != POLYGON_FIELD:
            warnings.append(
                f"{key_path((*path, 'identifier', name))}: a {definition['type']} field must be "
                f"named {POLYGON_FIELD!r} for aviso-server 0.13 and is not used for spatial "
                "filtering under another name"
            )
    return warnings


def _check_identifier(
    path: tuple[str, ...],
    identifier: Mapping[str, Mapping[str, Any]],
    handlers: Mapping[str, type[FieldHandler]],
    describe: Callable[[str], str],
) -> None:
    for name, definition in identifier.items():
        field_path = (*path, "identifier", name)
        if name == RESERVED_FIELD:
            raise at(field_path, f"{RESERVED_FIELD!r} is reserved for spatial watch filters")
        # Built once only to surface semantic problems; the host builds its own later.
        handler = handlers[definition["type"]]
        construct(partial(handler, name, dict(definition)), field_path, describe(handler.type_name))


def _check_storage_policy(
    path: tuple[str, ...], schema: Mapping[str, Any], backend: type[StorageBackend]
) -> None:
    policy_path = (*path, "storage_policy")
    if "topic" not in schema:
        raise at(policy_path, "requires a topic block")
    policy = schema["storage_policy"]
    if "retention_time" in policy:
        try:
            seconds = parse_duration(policy["retention_time"])
        except ValueError as exc:
            raise at((*policy_path, "retention_time"), str(exc)) from exc
        if seconds == 0:
            raise at((*policy_path, "retention_time"), "must be greater than zero")
    if "max_size" in policy:
        try:
            parse_size(policy["max_size"])
        except ValueError as exc:
            raise at((*policy_path, "max_size"), str(exc)) from exc
    if policy.get("max_messages", 1) <= 0:
        raise at((*policy_path, "max_messages"), "must be greater than zero")
    for key in STORAGE_POLICY_KEYS:
        if key in policy and not getattr(backend.capabilities, key):
            raise at((*policy_path, key), f"not supported by the {backend.kind!r} backend")


# -- the global ``auth`` section and per-stream ``auth`` blocks --------------------------

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


# -- text hygiene: a padded role or secret almost always comes from a copy-paste accident
# and would never match at runtime, so it fails startup instead.


def is_padded(text: str) -> bool:
    return text != text.strip()


def require_clean(path: KeyPath, text: str) -> None:
    """Fail unless ``text`` is non-blank and carries no surrounding whitespace."""
    if not text.strip():
        raise at(path, "must not be blank")
    if is_padded(text):
        raise at(path, "must not have leading or trailing whitespace")


def check_role_map(path: KeyPath, roles: Mapping[str, Sequence[str]]) -> None:
    """Realm keys and role names clean, and every realm granting at least one role."""
    for realm, names in roles.items():
        if not realm.strip():
            raise at(path, "realm names must not be blank")
        if is_padded(realm):
            raise at(path, f"realm name {realm!r} must not have leading or trailing whitespace")
        if not names:
            raise at((*path, realm), "must list at least one role")
        for index, name in enumerate(names):
            require_clean((*path, realm, index), name)


# -- the aviso-server 0.13 operations keys (``application.homepage``, the replay caps) and
# ``logging.format``


def check_homepage(application: Mapping[str, Any]) -> None:
    """Each link must be an absolute http(s) URL with a host and no user information."""
    homepage = application.get("homepage", {})
    for key in DEFAULT_HOMEPAGE_URLS:
        if key not in homepage:
            continue
        value = homepage[key]
        if not _is_public_http_url(value):
            raise at(
                ("application", "homepage", key),
                f"must be an absolute http(s) URL with a host and no userinfo, got {value!r}",
            )


def _is_public_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError on a malformed port
    except ValueError:
        return False
    return (
        parts.scheme.lower() in ("http", "https")
        and bool(parts.hostname)
        and "@" not in parts.netloc
        and value == value.strip()
    )


LOG_FORMATS = ("json", "text")


def log_format_warnings(logging_section: Mapping[str, Any]) -> list[str]:
    """``logging.format`` other than ``json`` or ``text`` is accepted (aviso-server files
    carry other values) and keeps JSON lines, with a warning."""
    if "format" not in logging_section or logging_section["format"] in LOG_FORMATS:
        return []
    value = logging_section["format"]
    close = nearest(str(value), LOG_FORMATS)
    hint = f"did you mean {close!r}?" if close else "use 'json' or 'text'"
    return [f"logging.format: {value!r} is not a log format ({hint}); logs stay JSON lines"]


def replay_cap_warnings(watch: Mapping[str, Any]) -> list[str]:
    """0.13 refuses a cap of 0; 0.7.1 accepted it (no history delivered), so it still starts."""
    if watch.get("max_historical_notifications") == 0:
        return [
            "watch_endpoint.max_historical_notifications: 0 delivers no history; aviso-server "
            "0.13 refuses it (positive integers only)"
        ]
    return []


_WORKQUEUE_REFUSED = (
    "'workqueue' is refused (as by aviso-server 0.13): a work-queue stream deletes each "
    "notification once one consumer acknowledged it, so history and concurrent watchers "
    "cannot work; use 'limits' or 'interest'"
)


def check_workqueue(document: Mapping[str, Any]) -> None:
    """``retention_policy: workqueue`` in a schema's storage policy fails startup (whatever
    the backend: the key is JetStream's, and refusing it everywhere keeps a file valid for
    both; the JetStream backend refuses it in its own section)."""
    for event_type, schema in document.get("notification_schema", {}).items():
        policy = schema.get("storage_policy", {})
        if policy.get("retention_policy") == "workqueue":
            raise at(
                ("notification_schema", event_type, "storage_policy", "retention_policy"),
                _WORKQUEUE_REFUSED,
            )
