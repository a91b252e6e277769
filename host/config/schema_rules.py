"""Startup rules of ``notification_schema`` beyond its shape (schema chapter §1.6).

Handler-specific rules (a ``DateHandler`` format, a range with ``min > max``, an empty
``EnumHandler.values``...) belong to the handler plugins: each declares them in its
``options`` schema or raises ``ValueError`` from ``__init__``, which is surfaced here.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from aviso_host.config.errors import at, key_path
from aviso_plugins.literals import parse_duration, parse_size
from aviso_plugins.types import BackendCapabilities, FieldHandler, StorageBackend

RESERVED_FIELD = "point"
"""A watch/replay-only identifier key; a field of that name could never be notified."""

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
) -> list[str]:
    """Fail on the first broken schema; return warnings worth logging at startup."""
    warnings: list[str] = []
    bases: dict[str, str] = {}  # case-folded base -> event type that claimed it
    for event_type, schema in schemas.items():
        path = ("notification_schema", event_type)
        _check_identifier(path, schema["identifier"], handlers)
        if "topic" in schema:
            warnings += _check_topic(path, schema, bases)
        if "storage_policy" in schema:
            _check_storage_policy(path, schema, backend)
    return warnings


def _check_topic(
    path: tuple[str, ...], schema: Mapping[str, Any], bases: dict[str, str]
) -> list[str]:
    topic = schema["topic"]
    base = topic["base"]
    base_path = (*path, "topic", "base")
    if not base:
        raise at(base_path, "must not be empty")
    folded = _ascii_lower(base)
    if folded in bases:
        raise at(
            base_path,
            f"{base!r} collides with the base of event type {bases[folded]!r} "
            "(bases are compared ignoring case)",
        )
    bases[folded] = path[-1]
    for index, name in enumerate(topic["key_order"]):
        if name not in schema["identifier"]:
            raise at(
                (*path, "topic", "key_order", index),
                f"{name!r} is not a field declared in identifier",
            )
    if base == folded:
        return []
    # Only a recommendation, but aviso-server's JetStream backend ignores storage
    # policies of bases that are not lower-case.
    return [f"{key_path(base_path)}: {base!r} is not lower-case; prefer lower-case topic bases"]


def _check_identifier(
    path: tuple[str, ...],
    identifier: Mapping[str, Mapping[str, Any]],
    handlers: Mapping[str, type[FieldHandler]],
) -> None:
    for name, definition in identifier.items():
        field_path = (*path, "identifier", name)
        if name == RESERVED_FIELD:
            raise at(field_path, f"{RESERVED_FIELD!r} is reserved for spatial watch filters")
        # Built once only to surface semantic problems; the host builds its own later.
        try:
            handlers[definition["type"]](name, dict(definition))
        except ValueError as exc:
            raise at(field_path, str(exc)) from exc


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
