"""Keys nobody reads: accepted where aviso-server ignores them, but each one reported.

A section whose schema lists its keys (``properties``) and says nothing about others
(no ``additionalProperties``, no ``patternProperties``) is one where aviso-server ignores
unknown keys (top level, ``application``, ``logging``, a backend's section...): a file
written for it keeps working, and a misspelling there (``logging: {levle: warn}``) would
otherwise change nothing in silence. So each such key is a warning naming the key path and
the nearest known key, as is every ``AVISOSERVER_*`` variable that addresses no key.
Sections that forbid unknown keys already fail validation; sections whose schema combines
branches (``allOf``...: identifier field definitions) are strict and left to it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from aviso_host.config.errors import KeyPath, key_path
from aviso_host.config.loader import (
    CONFIG_FILE_ENV,
    ENV_PREFIX,
    ENV_SEPARATOR,
    environment_overrides,
)

_COMBINATORS = ("allOf", "anyOf", "oneOf", "if", "$ref")
_CONFIG_FILE_KEY = tuple(environment_overrides({CONFIG_FILE_ENV: ""})[CONFIG_FILE_ENV])


def unknown_key_warnings(
    document: Mapping[str, Any],
    schema: Mapping[str, Any],
    overrides: Mapping[str, KeyPath] | None = None,
) -> list[str]:
    """One warning per unknown key of ``document`` and per variable of ``overrides``
    (``AVISOSERVER_*`` name -> the key path it sets) that addresses no key."""
    overrides = overrides or {}
    warnings = []
    variable_paths = list(overrides.values())
    for path, known in _unknown_in_document(document, schema, ()):
        # Set by a variable: reported below, under the variable's name.
        if any(tuple(variable[: len(path)]) == path for variable in variable_paths):
            continue
        warnings.append(f"{key_path(path)}: unknown key ({_hint(path[-1], known)})")
    for name, path in sorted(overrides.items()):
        if name == CONFIG_FILE_ENV:  # names the file, not a key
            continue
        problem = _unknown_in_variable(path, schema)
        if problem is not None:
            warnings.append(f"{name}: matches no configuration key ({problem})")
    return warnings


def unknown_key_paths(document: Mapping[str, Any], schema: Mapping[str, Any]) -> frozenset[KeyPath]:
    """The key path of every unknown key of ``document``, however it was set (file or
    variable). Their values are treated as secrets: a misspelled ``admin_pasword`` or
    ``credentails`` is no less secret for not matching a secret key name. The key
    ``AVISOSERVER_CONFIG_FILE`` lands in is no secret: it names the file read."""
    return frozenset(
        path for path, _ in _unknown_in_document(document, schema, ()) if path != _CONFIG_FILE_KEY
    )


def _unknown_in_document(
    value: Any, schema: Any, path: KeyPath
) -> Iterable[tuple[KeyPath, Iterable[str]]]:
    if not isinstance(schema, Mapping) or any(word in schema for word in _COMBINATORS):
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            child, known = _child_schema(schema, key)
            if known is not None:
                yield (*path, key), known
            else:
                yield from _unknown_in_document(item, child, (*path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from _unknown_in_document(item, schema["items"], (*path, index))


def _child_schema(schema: Mapping[str, Any], key: Any) -> tuple[Any, Iterable[str] | None]:
    """The schema of ``schema``'s member ``key``; with the known keys instead when ``key``
    is an unknown one (``None`` otherwise)."""
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and key in properties:
        return properties[key], None
    for pattern, child in schema.get("patternProperties", {}).items():
        if isinstance(key, str) and re.search(pattern, key):
            return child, None
    additional = schema.get("additionalProperties")
    if additional is None and isinstance(properties, Mapping) and "patternProperties" not in schema:
        return None, properties
    return additional, None


def _unknown_in_variable(path: KeyPath, schema: Any) -> str | None:
    """Why a variable setting ``path`` addresses no key, or ``None`` when it does (or
    when validation will judge it: a strict section, a value that is no mapping)."""
    if "" in path:
        return "an empty key name between separators"
    for depth, key in enumerate(path):
        if not isinstance(schema, Mapping) or any(word in schema for word in _COMBINATORS):
            return None
        schema, known = _child_schema(schema, key)
        if known is not None:
            close = nearest(str(key), known)
            if close is None:
                return f"{key_path(path[: depth + 1])} is not a known key"
            return f"did you mean {_variable((*path[:depth], close))}?"
    return None


def _variable(path: KeyPath) -> str:
    return ENV_PREFIX + ENV_SEPARATOR.join(str(key).upper() for key in path)


def _hint(key: Any, known: Iterable[str]) -> str:
    close = nearest(str(key), known)
    if close is not None:
        return f"did you mean {close!r}?"
    # A key written a level too high (``prot:`` for ``application.port``).
    nested = _nested_keys(known)
    close = nearest(str(key), nested)
    if close is not None:
        return f"did you mean {nested[close]!r}?"
    return "known keys: " + ", ".join(sorted(known))


def _nested_keys(known: Iterable[str]) -> dict[str, str]:
    """The keys one level below ``known`` (a mapping of key -> schema) -> their key path
    (the first section's, where several have one)."""
    nested: dict[str, str] = {}
    if isinstance(known, Mapping):
        for section, child in known.items():
            properties = child.get("properties") if isinstance(child, Mapping) else None
            for name in properties if isinstance(properties, Mapping) else ():
                nested.setdefault(name, f"{section}.{name}")
    return nested


def nearest(key: str, known: Iterable[str]) -> str | None:
    """The one of ``known`` closest to ``key`` when close enough to be a misspelling of it."""
    matches = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
    return matches[0] if matches else None
