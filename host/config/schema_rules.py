"""Startup rules of ``notification_schema`` beyond its shape.

Handler-specific rules (a ``DateHandler`` format, a range with ``min > max``, an empty
``EnumHandler.values``...) belong to the handler plugins: each declares them in its
``options`` schema or raises ``ValueError`` from ``__init__``, which is surfaced here.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import fields
from functools import partial
from typing import Any

from aviso_host.config.construct import construct
from aviso_host.config.errors import at, key_path
from aviso_plugins._shared.literals import parse_duration, parse_size
from aviso_plugins.types import BackendCapabilities, FieldHandler, StorageBackend

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
