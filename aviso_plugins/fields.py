"""Field handlers: validate and canonicalise one identifier field of one event type."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

__all__ = [
    "VALUE_KINDS",
    "ConstraintPredicate",
    "FieldHandler",
    "InvalidValue",
]


class InvalidValue(ValueError):
    """A client-supplied value was rejected; ``message`` is safe to show to the client.

    ``details`` is the deepest cause (for example the number parser's reason); it defaults
    to ``message`` when there is only one cause.
    """

    def __init__(self, message: str, details: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details if details is not None else message


ConstraintPredicate = Callable[[str], bool]
"""Tests one stored canonical value (never empty, never ``*``) against a constraint."""

VALUE_KINDS = frozenset({"text", "integer", "float", "date", "time", "enum", "polygon", "point"})
"""The value kinds the schema API names (``FieldHandler.value_kind``): how a client such as
the browser console should ask for a value. A client treats a kind it does not know as text."""


class FieldHandler(ABC):
    """Validates and canonicalises one identifier field of one event type.

    A subclass is instantiated once per schema field at startup with the field's
    definition (the mapping under ``identifier.<field>`` in the configuration, explicit
    ``null`` values already removed). The host has already checked the definition against
    ``options`` (types, required keys, no unknown keys) before calling ``__init__``;
    ``__init__`` may raise ``ValueError`` for semantic problems (for example a range whose
    minimum exceeds its maximum), which fails startup naming the event type and field.
    """

    type_name: ClassVar[str]
    """The ``type:`` value that selects this handler, e.g. ``"IntHandler"``."""

    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    """Extra definition keys this type allows, each with the JSON Schema of its value."""

    required_options: ClassVar[frozenset[str]] = frozenset()
    """Extra definition keys that must be present."""

    operators: ClassVar[frozenset[str]] = frozenset()
    """Constraint operators accepted on watch/replay; empty means scalars only."""

    spatial: ClassVar[bool] = False
    """True when values are coordinates: the handler implements ``canonicalise_value`` and
    receives raw JSON values (arrays included) instead of scalar text."""

    point_cloud: ClassVar[bool] = False
    """True (with ``spatial``) when canonical values are point clouds, stored on notify and
    matched against a subscriber's ``polygon``; otherwise a spatial value is a polygon."""

    value_kind: ClassVar[str | None] = None
    """The kind of value, one of ``VALUE_KINDS``, published with ``operators`` by the schema
    API. ``None`` derives it: ``point`` (a list of ``[lat, lon]`` points) for a point-cloud
    handler, ``polygon`` for another spatial one, ``text`` otherwise."""

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        self.field = field
        self.definition = definition
        self.required: bool = definition["required"]

    @abstractmethod
    def canonicalise(self, text: str) -> str:
        """Return the canonical text of a client value or raise :class:`InvalidValue`."""

    def compile_constraint(self, operator: str, operand: Any) -> ConstraintPredicate:
        """Turn ``{operator: operand}`` into a predicate or raise :class:`InvalidValue`.

        Only called with an operator listed in ``operators``.
        """
        raise InvalidValue(
            f"Field '{self.field}' does not support constraint filters; expected scalar value"
        )

    def canonicalise_value(self, value: Any, max_vertices: int | None) -> str:
        """Spatial handlers only: the canonical text of a raw JSON value, or raise
        :class:`InvalidValue`. ``max_vertices`` is the service's polygon vertex limit."""
        raise NotImplementedError

    def polygon(self, canonical: str) -> Sequence[tuple[float, float]]:
        """Return the ``(lat, lon)`` vertices of a canonical value (spatial handlers only)."""
        raise NotImplementedError

    @classmethod
    def kind(cls) -> str:
        """``value_kind``, or the kind derived when the handler declares none."""
        if cls.value_kind is not None:
            return cls.value_kind
        if cls.point_cloud:
            return "point"
        return "polygon" if cls.spatial else "text"

    def describe(self) -> dict[str, Any]:
        """The public schema view of this field (``GET /api/v1/schema``).

        Every option is shown, unset ones as ``null``; ``description`` only when configured;
        then ``value_kind`` and the sorted constraint ``operators`` (reserved names: an
        option of either name is not shown).
        """
        view: dict[str, Any] = {"type": self.type_name, "required": self.required}
        for name in self.options:
            if name != "description":
                view[name] = self.definition.get(name)
        if "description" in self.definition:
            view["description"] = self.definition["description"]
        view["value_kind"] = self.kind()
        view["operators"] = sorted(self.operators)
        return view

    def example_value(self) -> Any:
        """A value of this field that ``canonicalise`` (or, for spatial handlers,
        ``canonicalise_value``) accepts, as a client would send it in JSON: the request
        examples of the API description (``/api-docs/openapi.json``) are built from it.

        ``None`` (the default) leaves the host to find one by trying a few common values.
        """
        return None
