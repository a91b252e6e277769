"""Event schemas at run time: each configured field bound to its handler plugin."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from aviso_host.config.redact import redact
from aviso_host.config.settings import SchemaSettings, Settings
from aviso_plugins.api_shapes import SchemaEntry
from aviso_plugins.topics import TopicDecodeError, decode_token, encode_token
from aviso_plugins.types import FieldHandler

POINT = "point"
POLYGON = "polygon"
POINT_CLOUD = "point_cloud"


@dataclass(frozen=True, slots=True)
class NotifyLayout:
    """What a notify needs of its schema, worked out once at startup rather than per
    request (``aviso_host.identifiers.plan_checked_notification``)."""

    fields: tuple[tuple[str, FieldHandler], ...]
    """Every field with its handler, in declaration order (the order errors are found in)."""
    topic_prefix: str
    """The encoded topic base."""
    topic_fields: tuple[str, ...]
    payload_required: bool
    longest_name_bytes: int
    """The longest field name in UTF-8 bytes (names are checked like values)."""
    scalar_only: bool
    """No spatial field, and no field name that holds a character a value may not hold:
    every value is scalar text, so the planner's quick path applies."""


@dataclass(frozen=True)
class EventSchema:
    event_type: str
    fields: Mapping[str, FieldHandler]
    settings: SchemaSettings
    max_polygon_vertices: int = 10_000
    """``limits.max_polygon_vertices``: checked on stored and filter polygons."""

    @property
    def base(self) -> str:
        return self.settings.topic.base if self.settings.topic else self.event_type

    @property
    def topic_fields(self) -> tuple[str, ...]:
        """Fields whose canonical values follow the base in the topic, in order.

        Without a ``topic`` block the topic is generic: every declared field by name
        (``point`` left out, since it can never be notified).
        """
        if self.settings.topic:
            return self.settings.topic.key_order
        return tuple(sorted(name for name in self.fields if name != POINT))

    @property
    def payload_required(self) -> bool:
        return bool(self.settings.payload_required)

    @property
    def spatial_field(self) -> FieldHandler | None:
        """The handler of the field named ``polygon`` when it is a spatial handler."""
        handler = self.fields.get(POLYGON)
        return handler if handler is not None and handler.spatial else None

    @property
    def point_cloud_field(self) -> FieldHandler | None:
        """The handler of the field named ``point_cloud`` when it is a point-cloud handler."""
        handler = self.fields.get(POINT_CLOUD)
        return handler if handler is not None and handler.point_cloud else None

    @property
    def spatial_keys(self) -> tuple[str, ...]:
        """Fields whose values are coordinates (delivered as JSON arrays)."""
        return tuple(name for name, handler in self.fields.items() if handler.spatial)

    @cached_property
    def notify_layout(self) -> NotifyLayout:
        names = tuple(self.fields)
        return NotifyLayout(
            fields=tuple(self.fields.items()),
            topic_prefix=encode_token(self.base),
            topic_fields=self.topic_fields,
            payload_required=self.payload_required,
            longest_name_bytes=max(
                (len(name.encode("utf-8", "surrogatepass")) for name in names), default=0
            ),
            scalar_only=not any(
                handler.spatial or handler.point_cloud for handler in self.fields.values()
            )
            and all(_plain_name(name) for name in names),
        )

    def describe(self) -> SchemaEntry:
        payload = self.settings.payload_required
        return {
            "identifier": {name: _public(handler) for name, handler in self.fields.items()},
            "payload": None if payload is None else {"required": payload},
        }


def _public(handler: FieldHandler) -> dict[str, Any]:
    """The handler's view with its secret options (``writeOnly`` or a secret key name, such
    as a lookup service's ``api_key``) masked: the schema API is public."""
    secret = {(name,) for name, option in handler.options.items() if option.get("writeOnly")}
    return redact(handler.describe(), secret)


def _plain_name(name: str) -> bool:
    """A name with none of the characters identifier values may not hold (vertical tab,
    form feed, DEL, unpaired surrogates)."""
    if any(char in name for char in "\x0b\x0c\x7f"):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class SchemaCatalog:
    """Every configured event type, plus the reverse lookup from a topic's first token."""

    def __init__(self, settings: Settings, handlers: Mapping[str, type[FieldHandler]]) -> None:
        self.strict = settings.strict
        self.configured = settings.schemas_configured
        self.schemas: dict[str, EventSchema] = {
            name: EventSchema(
                name,
                {
                    field: handlers[definition["type"]](field, definition)
                    for field, definition in schema.identifier.items()
                },
                schema,
                settings.limits.max_polygon_vertices,
            )
            for name, schema in settings.schemas.items()
        }
        self._by_base = {schema.base: schema.event_type for schema in self.schemas.values()}

    @property
    def event_types(self) -> list[str]:
        return sorted(self.schemas)

    def get(self, event_type: str) -> EventSchema | None:
        return self.schemas.get(event_type)

    def resolve_stream_key(self, name: str) -> str:
        """An admin ``<name>@<seq>``: a schema key (exact, then case-insensitive) means its base."""
        schema = self.schemas.get(name)
        if schema is None:
            lowered = name.lower()
            schema = next((s for key, s in self.schemas.items() if key.lower() == lowered), None)
        return schema.base if schema else name

    def event_type_of(self, topic: str) -> str | None:
        """The event type owning an encoded topic, or ``None`` when it cannot be told."""
        try:
            first = decode_token(topic.split(".", 1)[0])
        except TopicDecodeError:
            return None
        if first in self._by_base:
            return self._by_base[first]
        return None if self.strict else first
