"""A shape declared once, as a typed class: a configuration section or a JSON body.

The host declares its own configuration sections this way and a plugin may declare the
section it owns (``notification_backend.<kind>``, ``auth.<mode>``, a stream authoriser's
top-level section...) the same way: field types, defaults, attribute docstrings and
``Annotated`` constraints (pydantic's ``Field(ge=1)``, ``Literal`` choices) say everything.
:func:`shape_schema` derives the JSON Schema (Draft 2020-12) the host validates the section
with, converts ``AVISOSERVER_*`` text by, fills defaults from and suggests the nearest key
from; :func:`read_shape` builds the typed value from the validated mapping::

    @shape(closed=True)
    @dataclass(frozen=True, slots=True)
    class MyOptions:
        url: str
        timeout_ms: Annotated[int, Field(ge=1)] = 5000
        \"\"\"How long to wait for the service.\"\"\"

    options_schema = shape_schema(MyOptions)

A ``TypedDict`` declares a JSON body the same way (the host's API responses: the route
builds it, type-checked, and the API description shows its derived schema).

pydantic does the derivation and the construction. The schema it writes is brought to the
plain form the host's walks read: its own references inlined (one written with
:func:`reference`, such as an OpenAPI component, is kept), titles dropped, a union of simple
types written as a list of types (for a configuration section ``null`` left out: an
explicit null there means "not set" and is dropped before validation).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError, WithJsonSchema, with_config

_T = TypeVar("_T")

_CLOSED = {"additionalProperties": False}
_OWN_REFERENCE = "#/$defs/"
# pydantic resolves every "$ref" it is given, so a foreign one travels under another key.
_REFERENCE = "x-aviso-reference"

__all__ = ["ShapeError", "read_shape", "reference", "shape", "shape_schema"]


def shape(*, closed: bool = False) -> Callable[[type[_T]], type[_T]]:
    """Class decorator of a declared shape: attribute docstrings become descriptions;
    ``closed``: keys it does not declare fail validation (otherwise a configuration section
    reports them as unknown and ignores them, as aviso-server does)."""
    config = ConfigDict(use_attribute_docstrings=True)
    if closed:
        config["json_schema_extra"] = dict(_CLOSED)
    return with_config(config)


def reference(target: str) -> WithJsonSchema:
    """``Annotated[str, reference("#/components/schemas/RequestId")]``: the value's schema is
    the one ``target`` names in the document the derived schema is placed in."""
    return WithJsonSchema({_REFERENCE: target})


def shape_schema(cls: type[Any], *, null: bool = False) -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of the shape ``cls`` declares (a new copy each
    time: the caller may extend it). ``null``: an optional value may be ``null`` (a JSON
    body's ``X | None``); by default it may only be left out (a configuration section)."""
    return copy.deepcopy(_schema(cls, null))


class ShapeError(ValueError):
    """A value :func:`read_shape` cannot type (one its JSON Schema admits, such as an integer
    too large for a float): ``path`` below the mapping read, and the ``reason``."""

    def __init__(self, path: tuple[str | int, ...], reason: str) -> None:
        where = ".".join(str(key) for key in path)
        super().__init__(f"{where}: {reason}" if where else reason)
        self.path = path
        self.reason = reason


def read_shape(cls: type[_T], values: Mapping[str, Any]) -> _T:
    """The typed ``cls`` built from a mapping that validated against its schema; keys it
    does not declare are ignored. Raises :class:`ShapeError` (a ``ValueError``, one line)
    for the first value it cannot type."""
    try:
        return _adapter(cls).validate_python(dict(values))
    except ValidationError as exc:
        first = exc.errors()[0]
        reason = str(first["msg"])
        raise ShapeError(tuple(first["loc"]), reason[:1].lower() + reason[1:]) from None


# Declarations are classes defined once, so caching by class never grows without bound.
_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}
_SCHEMAS: dict[tuple[type[Any], bool], dict[str, Any]] = {}


def _adapter(cls: type[_T]) -> TypeAdapter[_T]:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def _schema(cls: type[Any], null: bool) -> dict[str, Any]:
    schema = _SCHEMAS.get((cls, null))
    if schema is None:
        raw = _adapter(cls).json_schema()
        definitions = raw.pop("$defs", {})
        schema = _SCHEMAS[cls, null] = _plain(raw, definitions, null)
    return schema


def _plain(node: Any, definitions: Mapping[str, Any], null: bool) -> Any:
    if isinstance(node, list):
        return [_plain(item, definitions, null) for item in node]
    if not isinstance(node, Mapping):
        return node
    if _REFERENCE in node:
        return {"$ref": node[_REFERENCE]}
    own = node.get("$ref")
    if isinstance(own, str) and own.startswith(_OWN_REFERENCE):
        target = definitions[own[len(_OWN_REFERENCE) :]]
        node = {**target, **{key: value for key, value in node.items() if key != "$ref"}}
    plain = {
        key: value if key in ("default", "examples") else _plain(value, definitions, null)
        for key, value in node.items()
        # An absent optional value is not a default to fill in.
        if key != "title" and not (key == "default" and value is None)
    }
    if "const" in plain and "enum" not in plain:
        # The same constraint in the form OpenAPI 3.0 readers (Swagger UI) know too.
        plain["enum"] = [plain.pop("const")]
    if "anyOf" in plain:
        merged = _merged_branches(plain["anyOf"], null)
        if merged is not None:
            del plain["anyOf"]
            plain = {**merged, **plain}
    return plain


def _merged_branches(branches: list[Any], null: bool) -> dict[str, Any] | None:
    """``anyOf`` branches of distinct simple types as one schema with a list of types, when
    no keyword is shared between them (each keyword then applies to one type only, so the
    merged schema accepts exactly what the branches accept); ``None`` otherwise."""
    types: list[str] = []
    merged: dict[str, Any] = {}
    for branch in branches:
        kind = branch.get("type") if isinstance(branch, Mapping) else None
        if not isinstance(kind, str) or kind in types:
            return None
        if kind == "null" and not null:
            continue
        types.append(kind)
        keywords = {key: value for key, value in branch.items() if key != "type"}
        if keywords.keys() & merged.keys():
            return None
        merged.update(keywords)
    return {"type": types[0] if len(types) == 1 else types, **merged}
