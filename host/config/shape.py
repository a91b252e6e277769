"""Check a document against its JSON schema and word the first problem for an operator."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from aviso_host.config.errors import KeyPath, at
from aviso_host.config.unknown_keys import nearest

# JSON Schema counts 8000.0 as an integer; aviso-server's typed settings do not.
_TYPE_CHECKER = Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
)
_Validator = validators.extend(Draft202012Validator, type_checker=_TYPE_CHECKER)

_TYPE_NAMES = {
    "object": "a mapping",
    "array": "a list",
    "string": "text",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


def validate_shape(document: Any, schema: Mapping[str, Any], prefix: KeyPath = ()) -> None:
    """Raise :class:`ConfigError` naming the key of the first, shallowest violation
    (below ``prefix``, where ``document`` sits in a larger one).

    Shallow problems (a missing section) explain deeper ones, and taking the first of
    equally deep ones keeps the message stable: it follows the document's order.
    """
    errors = _Validator(schema).iter_errors(document)
    error = min(errors, key=lambda item: len(item.absolute_path), default=None)
    if error is not None:
        raise at((*prefix, *error.absolute_path), _describe(error)) from None


def _describe(error: ValidationError) -> str:
    instance = error.instance
    value = error.validator_value
    match error.validator:
        case "required":
            missing = [key for key in value if key not in instance]
            described = f"missing required key{_plural(missing)} {_listing(missing)}"
            return described + _misspellings(missing, instance, error.schema)
        case "additionalProperties":
            return _describe_unknown_keys(error)
        case "type":
            wanted = [value] if isinstance(value, str) else list(value)
            expected = " or ".join(_TYPE_NAMES.get(name, name) for name in wanted)
            return f"expected {expected}, got {_kind(instance)}"
        case "enum":
            allowed = _listing(value) or "none"
            if _is_field_definition(list(error.absolute_path)[:-1]):
                return f"unknown field handler type {instance!r} (registered: {allowed})"
            return f"{instance!r} is not one of {allowed}"
        case "const":
            return f"must be {value!r}"
        case "exclusiveMinimum":
            return f"must be greater than {value!r}"
        case "minimum":
            return f"{instance!r} is less than the minimum {value!r}"
        case "maximum":
            return f"{instance!r} is greater than the maximum {value!r}"
        case "minItems":
            return f"expected at least {_count(value, 'item')}"
        case "maxItems":
            return f"expected at most {_count(value, 'item')}"
        case _:
            return str(error.message)


def _describe_unknown_keys(error: ValidationError) -> str:
    known = error.schema.get("properties", {})
    patterns = error.schema.get("patternProperties", {})
    unknown = [
        key
        for key in error.instance
        if key not in known and not any(re.search(pattern, key) for pattern in patterns)
    ]
    if _is_field_definition(list(error.absolute_path)):
        handler = error.instance.get("type")
        verb = "is" if len(unknown) == 1 else "are"
        return f"{_listing(unknown)} {verb} not allowed for {handler}"
    return f"unknown key{_plural(unknown)} {_listing(unknown)}"


def _misspellings(
    missing: list[str], instance: Mapping[str, Any], schema: Mapping[str, Any]
) -> str:
    """`` (unknown key 'notificaton_backend' ...)``: the unknown keys of ``instance`` that
    look like a missing one, since a misspelling is the likely cause."""
    known = schema.get("properties", {})
    unknown = [key for key in instance if isinstance(key, str) and key not in known]
    found = [
        f"unknown key {match!r} looks like {key!r}"
        for key in missing
        if (match := nearest(key, unknown)) is not None
    ]
    return f" ({'; '.join(found)})" if found else ""


def _is_field_definition(path: list[Any]) -> bool:
    """Whether ``path`` is ``notification_schema.<event type>.identifier.<field>``."""
    return len(path) == 4 and path[0] == "notification_schema" and path[2] == "identifier"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return f"text {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _listing(values: Iterable[Any]) -> str:
    return ", ".join(repr(value) for value in values)


def _plural(items: list[Any]) -> str:
    return "" if len(items) == 1 else "s"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
