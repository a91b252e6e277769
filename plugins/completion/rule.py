"""The ``completion`` key of a ``notification_schema`` entry: what makes a group of
notifications complete, and the event type that says so."""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aviso_plugins.auth import ConfigurationProblem
from aviso_plugins.fields import InvalidValue
from aviso_plugins.schema_keys import SchemaKey

__all__ = ["DEFAULT_MAX_OPEN_GROUPS", "STATUSES", "CompletionKey", "CompletionRule", "rules_of"]

KEY = "completion"
STATUS_FIELD = "status"
STATUSES = ("complete", "incomplete")
DEFAULT_MAX_OPEN_GROUPS = 10_000
"""Open groups kept per rule; past it the oldest is closed as incomplete."""

_NAME = {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", "maxLength": 128}


@dataclass(frozen=True, slots=True)
class CompletionRule:
    source: str
    """The event type whose notifications are counted."""
    event_type: str
    """The event type the rule publishes."""
    group_by: tuple[str, ...]
    member: str
    expected_count: int
    expected_values: tuple[Any, ...] | None
    deadline_seconds: float
    max_open_groups: int
    expected_keys: frozenset[str] | None = None
    """:func:`member_key` of each of ``expected_values``."""

    @property
    def fields(self) -> tuple[str, ...]:
        """The identifier fields the rule reads: ``member``, then ``group_by``."""
        return (self.member, *self.group_by)

    @classmethod
    def from_value(cls, source: str, value: Mapping[str, Any]) -> CompletionRule:
        values = value.get("expected_values")
        expected = tuple(values) if values is not None else None
        return cls(
            source=source,
            event_type=value["event_type"],
            group_by=tuple(value["group_by"]),
            member=value["member"],
            expected_count=len(set(map(member_key, expected)))
            if expected
            else value["expected_count"],
            expected_values=expected,
            deadline_seconds=float(value["deadline_seconds"]),
            max_open_groups=int(value.get("max_open_groups", DEFAULT_MAX_OPEN_GROUPS)),
            expected_keys=frozenset(map(member_key, expected)) if expected else None,
        )

    def counts(self, member: str) -> bool:
        """Whether ``member`` (as :func:`member_key` gives it) is one the rule waits for:
        with ``expected_values``, others are not kept (a group would otherwise grow with
        every value a publisher makes up, and never complete once it outgrew the store)."""
        return self.expected_keys is None or member in self.expected_keys

    def missing(self, members: Collection[str]) -> list[Any] | None:
        """The expected values not among ``members`` (``None`` without ``expected_values``)."""
        if self.expected_values is None:
            return None
        seen = members if isinstance(members, (set, frozenset)) else set(members)
        return [value for value in self.expected_values if member_key(value) not in seen]

    def complete(self, members: Collection[str]) -> bool:
        # Distinct members, so fewer than expected cannot be complete: the common case is
        # answered without looking for the missing ones.
        if len(members) < self.expected_count or self.expected_values is None:
            return len(members) >= self.expected_count
        return not self.missing(members)


def member_key(value: Any) -> str:
    """How member values are compared: as text, so that ``7`` written in the configuration
    matches the ``7`` an integer field publishes."""
    return value if isinstance(value, str) else json.dumps(value)


def rules_of(schemas: Mapping[str, Mapping[str, Any]]) -> dict[str, CompletionRule]:
    """Source event type -> its rule, for every entry with a ``completion`` key."""
    return {
        source: CompletionRule.from_value(source, entry[KEY])
        for source, entry in schemas.items()
        if isinstance(entry, Mapping) and isinstance(entry.get(KEY), Mapping)
    }


class CompletionKey(SchemaKey):
    key = KEY
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["event_type", "group_by", "member", "deadline_seconds"],
        "properties": {
            "event_type": _NAME,
            "group_by": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "member": {"type": "string"},
            "expected_count": {"type": "integer", "minimum": 1},
            "expected_values": {
                "type": "array",
                "minItems": 1,
                "items": {"type": ["string", "integer", "number", "boolean"]},
            },
            "deadline_seconds": {"type": "number", "exclusiveMinimum": 0},
            "max_open_groups": {"type": "integer", "minimum": 1},
        },
    }

    def derived_schemas(
        self, event_type: str, schema: Mapping[str, Any], value: Any
    ) -> Mapping[str, Mapping[str, Any]]:
        identifier: Mapping[str, Any] = schema.get("identifier") or {}
        fields = ", ".join(identifier)
        for index, name in enumerate(value["group_by"]):
            if name not in identifier:
                raise ConfigurationProblem(
                    ("group_by", index), f"'{name}' is not a field of the identifier ({fields})"
                )
            if name == STATUS_FIELD:
                raise ConfigurationProblem(
                    ("group_by", index), f"'{STATUS_FIELD}' is the completion event's own field"
                )
        member = value["member"]
        if member not in identifier:
            raise ConfigurationProblem(
                ("member",), f"'{member}' is not a field of the identifier ({fields})"
            )
        if member in value["group_by"]:
            raise ConfigurationProblem(("member",), f"'{member}' is also in group_by")
        if ("expected_count" in value) == ("expected_values" in value):
            raise ConfigurationProblem((), "give exactly one of expected_count and expected_values")
        # YAML's .nan and .inf pass as numbers: a NaN deadline has always passed, and
        # neither has a JSON form for the events and the groups page.
        if not math.isfinite(value["deadline_seconds"]):
            raise ConfigurationProblem(("deadline_seconds",), "must be a finite number")
        for index, expected in enumerate(value.get("expected_values", ())):
            if isinstance(expected, float) and not math.isfinite(expected):
                raise ConfigurationProblem(("expected_values", index), "must be a finite number")
        self._check_expected_values(member, identifier[member], value.get("expected_values", ()))
        derived_identifier: dict[str, Any] = {
            name: {**identifier[name], "required": False} for name in value["group_by"]
        }
        derived_identifier[STATUS_FIELD] = {
            "type": "EnumHandler",
            "values": list(STATUSES),
            "required": False,
        }
        derived: dict[str, Any] = {
            "topic": {
                "base": value["event_type"],
                "key_order": [*value["group_by"], STATUS_FIELD],
            },
            "identifier": derived_identifier,
        }
        source_auth = schema.get("auth")
        if isinstance(source_auth, Mapping) and source_auth.get("required"):
            derived["auth"] = derived_auth(source_auth)
        return {value["event_type"]: derived}

    def _check_expected_values(
        self, member: str, definition: Mapping[str, Any], expected: Sequence[Any]
    ) -> None:
        """Each of ``expected`` must be a value the member field's handler accepts, written
        as the API shows it (members are compared as that text): otherwise the group could
        never complete."""
        handler_class = self.field_handlers.get(definition.get("type", ""))
        if handler_class is None or handler_class.spatial or not expected:
            return  # an unknown type is the host's error; coordinates are no members
        try:
            handler = handler_class(member, {"required": True, **definition})
        except (ValueError, KeyError, TypeError):
            return  # a broken field definition is reported by the host, naming the field
        for index, value in enumerate(expected):
            text = member_key(value)
            try:
                canonical = handler.canonicalise(text)
            except InvalidValue as exc:
                raise ConfigurationProblem(
                    ("expected_values", index),
                    f"{json.dumps(value)} is not a value of '{member}' "
                    f"({handler_class.type_name}): {exc.message}",
                ) from None
            if canonical != text:
                raise ConfigurationProblem(
                    ("expected_values", index),
                    f"'{member}' ({handler_class.type_name}) shows {json.dumps(value)} as "
                    f"{json.dumps(canonical)}: write it so",
                )


def derived_auth(source_auth: Mapping[str, Any]) -> dict[str, Any]:
    """The completion event type's ``auth`` block when its source requires auth: the events
    carry the source's group values, counts and missing members, so they are read by whom
    may read the source (its roles and authorisers, which fail closed on the fields the
    event lacks), and written only by the consumer and administrators (no ``write_roles``),
    so that nobody forges a ``complete`` the products downstream would act on."""
    return {"required": True} | {
        key: source_auth[key] for key in ("read_roles", "plugins") if key in source_auth
    }
