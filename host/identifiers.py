"""From a request's ``identifier`` object to what the backend needs.

Notify: validate and canonicalise every value, build the topic and the stored metadata.
Watch/replay: build the topic pattern plus the in-process filters (scalars on fields
outside the topic, constraint objects, the spatial filter).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from aviso_host.config.settings import LimitSettings
from aviso_host.config.unknown_keys import nearest
from aviso_host.encoding import dumps, dumps_sorted_texts
from aviso_host.filtering import FieldFilter, SpatialFilter, StreamFilter, stored_coordinates
from aviso_host.schemas import (
    POINT,
    POINT_CLOUD,
    POLYGON,
    EventSchema,
    NotifyLayout,
    SchemaCatalog,
)
from aviso_plugins._shared.geometry import MAX_STORED_COORDINATES_BYTES, parse_polygon_value
from aviso_plugins._shared.numbers import float_display, json_scalar_text
from aviso_plugins.topics import TopicPattern, build_topic, encode_token
from aviso_plugins.types import (
    ConstraintPredicate,
    FieldHandler,
    InvalidValue,
    PlannedNotification,
    SinkRejected,
)

WILDCARD = "*"
NOTIFY_VALIDATION_CODE = "INVALID_NOTIFICATION_REQUEST"

_DEFAULTS = LimitSettings()
DEFAULT_MAX_VALUE_BYTES = _DEFAULTS.max_identifier_value_bytes
"""``limits.max_identifier_value_bytes`` when no settings are at hand (Spark's planner)."""
DEFAULT_MAX_PAYLOAD_BYTES = _DEFAULTS.max_payload_bytes
"""``limits.max_payload_bytes`` likewise."""
MAX_TOPIC_BYTES = _DEFAULTS.max_topic_bytes
"""``limits.max_topic_bytes`` likewise: an encoded topic (or watch pattern) longer than this
is refused on every backend, since NATS carries the subject in a protocol line of at most
4096 bytes (``max_control_line``), next to the JetStream API prefix, the consumer name and
the reply inbox."""
MAX_BASE_CHARS = 255
"""JetStream refuses longer stream names, and a schema-less event type is its own stream."""
TOPIC_BASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*", re.ASCII)
# NATS stores a subject holding these, but a consumer filter on it never matches (DEL) or
# breaks the connection (vertical tab, form feed). aviso-server could have stored them raw,
# so escaping them would change existing subjects: they are refused instead, on every
# backend alike. Unpaired surrogates have no UTF-8 form at all.
_UNCARRIABLE = re.compile("[\x0b\x0c\x7f\ud800-\udfff]")
_UNCARRIABLE_NAMES = {"\x0b": "a vertical tab", "\x0c": "a form feed", "\x7f": "DEL"}


def scalar_text(field: str, value: Any, operation: str) -> str:
    """The text a handler sees for one JSON value (objects are constraints, handled apart)."""
    if value is None:
        raise InvalidValue(f"Field '{field}' cannot be null")
    if isinstance(value, list):
        raise InvalidValue(
            f"Field '{field}' must be a scalar value or constraint object, got array"
        )
    if isinstance(value, dict):
        raise InvalidValue(
            f"Field '{field}' constraint object is not supported for {operation} operation"
        )
    return json_scalar_text(value)


# -- limits on values --------------------------------------------------------------------


def check_value_text(field: str, text: str, max_bytes: int) -> None:
    """One identifier value (or key, or constraint operand) as text: size and characters."""
    # Every character is at least one byte, so a long text is refused without encoding it.
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise InvalidValue(
            f"Field '{field}' value is longer than {max_bytes} bytes "
            "(limits.max_identifier_value_bytes)"
        )
    found = _UNCARRIABLE.search(text)
    if found is not None:
        char = found.group()
        name = _UNCARRIABLE_NAMES.get(char, f"an unpaired surrogate (U+{ord(char):04X})")
        raise InvalidValue(
            f"Field '{field}' value contains {name}; identifier values may not contain "
            "vertical tab, form feed, DEL or unpaired surrogates"
        )


def check_identifier_values(
    schema: EventSchema | None, identifier: Mapping[str, Any], max_bytes: int
) -> None:
    """Every key and every scalar inside every value, constraint operands included.

    Spatial values (a polygon or point cloud, and the polygon filter of a point-cloud
    schema) are left to the vertex/point limits and the stored-size cap: a polygon of a few
    dozen vertices already exceeds a value limit sized for names and dates.
    """
    spatial = _spatial_keys(schema) if schema is not None else frozenset()
    for key, value in identifier.items():
        if len(key.encode("utf-8", "surrogatepass")) > max_bytes:
            # Not echoed: the key is the oversized thing.
            raise InvalidValue(
                f"An identifier key is longer than {max_bytes} bytes "
                "(limits.max_identifier_value_bytes)"
            )
        check_value_text(key, key, max_bytes)
        if key in spatial:
            continue
        for text in _scalar_texts(value):
            check_value_text(key, text, max_bytes)


def _point_cloud_filter(schema: EventSchema, key: str) -> bool:
    """``polygon`` on a point-cloud schema is the filter standing for ``point_cloud``."""
    return key == POLYGON and schema.point_cloud_field is not None


def _spatial_keys(schema: EventSchema) -> frozenset[str]:
    keys = {key for key, handler in schema.fields.items() if handler.spatial or handler.point_cloud}
    if schema.point_cloud_field is not None:
        keys.add(POLYGON)
    return frozenset(keys)


def _scalar_texts(value: Any) -> Iterator[str]:
    # An explicit stack: the nesting of a constraint operand is the client's choice.
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif item is not None:
            yield json_scalar_text(item)


def _utf8_size(text: str) -> int:
    # isascii() is a flag lookup: most texts are counted without being encoded.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def check_topic_size(encoded: str, max_bytes: int) -> None:
    size = _utf8_size(encoded)
    if size > max_bytes:
        raise InvalidValue(
            f"The identifier makes a topic of {size} bytes once encoded; topics are limited "
            f"to {max_bytes} bytes (limits.max_topic_bytes)"
        )


def check_topic_base(event_type: str) -> None:
    """A schema-less event type is its own topic base and JetStream stream."""
    if len(event_type) > MAX_BASE_CHARS or not TOPIC_BASE.fullmatch(event_type):
        shown = event_type if len(event_type) <= 64 else event_type[:64] + "..."
        raise InvalidValue(
            f"event_type '{shown}' is not a valid topic base: it must match "
            f"[A-Za-z0-9][A-Za-z0-9_-]* and have at most {MAX_BASE_CHARS} characters"
        )


def check_payload_size(serialised: str, max_bytes: int) -> None:
    size = _utf8_size(serialised)
    if size > max_bytes:
        raise InvalidValue(
            f"Payload is {size} bytes serialised; payloads are limited to {max_bytes} bytes "
            "(limits.max_payload_bytes)"
        )


# -- notify ------------------------------------------------------------------------------


def plan_checked_notification(
    schema: EventSchema | None,
    event_type: str,
    identifier: Mapping[str, Any],
    payload: Any,
    max_value_bytes: int,
    max_topic_bytes: int,
    max_payload_bytes: int,
) -> PlannedNotification:
    """Every check of a notify after the body shape, and its plan: the value limits
    (:func:`check_identifier_values`), :func:`plan_notification`, then the topic and
    payload sizes. Raises what the first failing step raises."""
    planned = None
    if schema is not None and schema.notify_layout.scalar_only:
        planned = _quick_plan(schema.notify_layout, identifier, payload, max_value_bytes)
    if planned is None:
        check_identifier_values(schema, identifier, max_value_bytes)
        planned = plan_notification(schema, event_type, identifier, payload)
    # ASCII text within the limit in characters is within it in bytes: measured no further.
    topic, payload_text = planned.topic, planned.payload
    if len(topic) > max_topic_bytes or not topic.isascii():
        check_topic_size(topic, max_topic_bytes)
    if len(payload_text) > max_payload_bytes or not payload_text.isascii():
        check_payload_size(payload_text, max_payload_bytes)
    return planned


def _quick_plan(
    layout: NotifyLayout, identifier: Mapping[str, Any], payload: Any, max_bytes: int
) -> PlannedNotification | None:
    """The plan of a notification that passes every check, in one pass over its values;
    ``None`` for anything else, which the full checks then refuse in their own words (and
    order). Only for schemas whose values are all scalars (``layout.scalar_only``)."""
    fields = layout.fields
    if len(identifier) != len(fields) or layout.longest_name_bytes > max_bytes:
        return None
    if layout.payload_required and payload is None:
        return None
    texts: list[str] = []
    for key, _ in fields:
        value = identifier.get(key)
        if value is None or isinstance(value, (dict, list)):
            return None
        try:
            text = value if isinstance(value, str) else json_scalar_text(value)
        except (ValueError, TypeError, OverflowError):
            return None
        if (
            len(text) > max_bytes
            or (not text.isascii() and _utf8_size(text) > max_bytes)
            # Printable ASCII (most values) has no uncarriable character: checked in C, no regex.
            or (not (text.isascii() and text.isprintable()) and _UNCARRIABLE.search(text))
        ):
            return None
        texts.append(text)
    # Every value is within its limits and every field is there, so the full checks would
    # reach the handlers too, in this order: a handler's refusal is the first error, raised
    # from here (each handler sees each value once).
    # Loops rather than comprehensions: each comprehension is a function call of its own.
    canonical = {}
    for (key, handler), text in zip(fields, texts, strict=True):
        canonical[key] = handler.canonicalise(text)
    tokens = [layout.topic_prefix]
    for key in layout.topic_fields:
        tokens.append(encode_token(canonical[key]))
    return PlannedNotification(".".join(tokens), dumps(payload), _metadata(canonical))


def unknown_field(key: str, schema: EventSchema, operation: str) -> InvalidValue:
    """The upstream message, then the declared field the key is likely a misspelling of."""
    close = nearest(key, schema.fields)
    hint = f" (did you mean '{close}'?)" if close is not None else ""
    return InvalidValue(f"Unknown field '{key}' provided for {operation} operation{hint}")


def plan_notification(
    schema: EventSchema | None, event_type: str, identifier: Mapping[str, Any], payload: Any
) -> PlannedNotification:
    if schema is None:
        check_topic_base(event_type)
        canonical = _generic_notify_values(identifier)
        tokens = [event_type, *(canonical[key] for key in sorted(canonical))]
        return PlannedNotification(build_topic(tokens), dumps(payload), _metadata(canonical))
    for key in identifier:
        if key not in schema.fields:
            raise unknown_field(key, schema, "notify")
    for key in schema.fields:
        if key not in identifier:
            raise InvalidValue(f"Required field '{key}' missing for notify operation")
    canonical = {
        key: _canonical(schema, key, handler, identifier[key], "notify")
        for key, handler in schema.fields.items()
    }
    if schema.payload_required and payload is None:
        raise InvalidValue("Payload is required for notify operation based on schema configuration")
    tokens = [schema.base, *(canonical[key] for key in schema.topic_fields)]
    # Spatial values travel once, in their own metadata entries (the renderer puts them
    # back): JetStream headers hold 64 KiB in all.
    apart = {
        key: canonical[key]
        for key, handler in (
            (POLYGON, schema.spatial_field),
            (POINT_CLOUD, schema.point_cloud_field),
        )
        if handler is not None
    }
    metadata = _metadata({key: value for key, value in canonical.items() if key not in apart})
    for key, value in apart.items():
        metadata.update(spatial_metadata(key, value))
    return PlannedNotification(build_topic(tokens), dumps(payload), metadata)


def _canonical(
    schema: EventSchema, key: str, handler: FieldHandler, value: Any, operation: str
) -> str:
    """Spatial handlers take the raw JSON value (coordinate arrays); others scalar text."""
    if handler.spatial:
        if value is None:
            raise InvalidValue(f"Field '{key}' cannot be null")
        if isinstance(value, dict):
            if operation == "notify":
                scalar_text(key, value, operation)  # raises the notify wording
            raise InvalidValue(
                f"Field '{key}' does not support constraint filters; expected a "
                "[[lat, lon], ...] array or a string"
            )
        return handler.canonicalise_value(value, schema.max_polygon_vertices)
    return handler.canonicalise(scalar_text(key, value, operation))


class CatalogPlanner:
    """The notify route's checks after the body shape, as a sink's ``NotificationPlanner``.

    Codes and messages are the ones ``POST /api/v1/notification`` answers with, so a row
    rejected in Spark reads like the same notification refused by the server.
    """

    def __init__(
        self,
        catalog: SchemaCatalog,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_topic_bytes: int = MAX_TOPIC_BYTES,
    ) -> None:
        self.catalog = catalog
        self.max_value_bytes = max_value_bytes
        self.max_payload_bytes = max_payload_bytes
        self.max_topic_bytes = max_topic_bytes

    def plan(
        self, event_type: str, identifier: Mapping[str, Any], payload: Any
    ) -> PlannedNotification:
        schema = self.catalog.get(event_type)
        if schema is None and self.catalog.strict:
            raise SinkRejected("UNKNOWN_EVENT_TYPE", f"unknown event type '{event_type}'")
        if POINT in identifier:
            raise SinkRejected(
                NOTIFY_VALIDATION_CODE,
                "identifier.point is only supported for watch/replay endpoints, not /notification",
            )
        try:
            return plan_checked_notification(
                schema,
                event_type,
                identifier,
                payload,
                self.max_value_bytes,
                self.max_topic_bytes,
                self.max_payload_bytes,
            )
        except InvalidValue as exc:
            raise SinkRejected(NOTIFY_VALIDATION_CODE, exc.message) from exc


def _generic_notify_values(identifier: Mapping[str, Any]) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, value in identifier.items():
        text = scalar_text(key, value, "notify")
        if not text:
            raise InvalidValue(f"Field '{key}' cannot be empty")
        values[key] = text
    return values


def _metadata(canonical: Mapping[str, str]) -> dict[str, str]:
    # The full identifier travels with the message so that filters on fields outside the
    # topic work and delivery can show every field (empty values are left out).
    present = canonical if all(canonical.values()) else {k: v for k, v in canonical.items() if v}
    return {"identifier": dumps_sorted_texts(present)}


SPATIAL_METADATA = {POLYGON: "spatial_geometry", POINT_CLOUD: "spatial_point_cloud"}
"""The metadata entry holding each stored spatial value (aviso-server's header names)."""


def spatial_metadata(field: str, canonical: str) -> dict[str, str]:
    """The stored spatial value and its bounding box; ``canonical`` was validated."""
    size = len(canonical.encode())
    if size > MAX_STORED_COORDINATES_BYTES:
        raise InvalidValue(
            f"field '{field}' is {size} bytes, maximum is {MAX_STORED_COORDINATES_BYTES} bytes "
            "for a stored spatial value"
        )
    coordinates = stored_coordinates(canonical)
    if coordinates is None:  # a third-party handler's canonical form the store cannot read
        raise InvalidValue(f"field '{field}' is not a list of coordinates that can be stored")
    min_lon, min_lat = coordinates.min(axis=0)
    max_lon, max_lat = coordinates.max(axis=0)
    bbox = ",".join(float_display(float(value)) for value in (min_lat, min_lon, max_lat, max_lon))
    return {SPATIAL_METADATA[field]: canonical, "spatial_bbox": bbox}


# -- watch / replay ----------------------------------------------------------------------


def plan_stream_filter(
    schema: EventSchema | None,
    event_type: str,
    identifier: Mapping[str, Any],
    operation: str,
    point: tuple[float, float] | None,
) -> StreamFilter:
    """``point`` was already parsed by the spatial sanity step (it runs before cursors)."""
    if schema is None:
        return _generic_stream_filter(event_type, identifier, point)
    for key in identifier:
        # ``point`` is the reserved watch/replay-only spatial filter, checked before.
        if key not in schema.fields and key != POINT and not _point_cloud_filter(schema, key):
            raise unknown_field(key, schema, operation)
    values: dict[str, str] = {}
    requested: dict[str, str] = {}
    constraints: dict[str, ConstraintPredicate] = {}
    request_polygon = _point_cloud_polygon(schema, identifier, operation, point, requested)
    for key, handler in schema.fields.items():
        if handler.point_cloud:
            continue
        if key not in identifier:
            if handler.required and not (key == POLYGON and point is not None):
                raise InvalidValue(f"Required field '{key}' missing for {operation} operation")
            continue
        value = identifier[key]
        if isinstance(value, dict) and not handler.spatial:
            constraints[key] = _compile_constraint(handler, value)
            requested[key] = dumps(value)
            continue
        canonical = _canonical(schema, key, handler, value, operation)
        requested[key] = canonical
        if handler is schema.spatial_field:
            request_polygon = list(handler.polygon(canonical))
        elif canonical != WILDCARD:
            values[key] = canonical
    topic_fields = schema.topic_fields
    pattern = TopicPattern.from_tokens(
        [schema.base, *(values.get(key, WILDCARD) for key in topic_fields)]
    )
    positions = {key: index + 1 for index, key in enumerate(topic_fields)}
    filters = [
        FieldFilter(key, positions.get(key), predicate) for key, predicate in constraints.items()
    ]
    filters += [
        FieldFilter(key, None, value.__eq__)
        for key, value in values.items()
        if key not in positions
    ]
    return StreamFilter(
        event_type, pattern, tuple(filters), _spatial(point, request_polygon), requested
    )


def _point_cloud_polygon(
    schema: EventSchema,
    identifier: Mapping[str, Any],
    operation: str,
    point: tuple[float, float] | None,
    requested: dict[str, str],
) -> list[tuple[float, float]] | None:
    """On a point-cloud schema the subscriber's ``polygon`` stands for ``point_cloud``."""
    if schema.point_cloud_field is None:
        return None
    if POINT_CLOUD in identifier:
        raise InvalidValue("identifier.point_cloud is only supported for notify")
    if point is not None:
        raise InvalidValue("identifier.point is not supported for point-cloud schemas")
    value = identifier.get(POLYGON)
    if value is None:
        raise InvalidValue(
            f"Required field '{POINT_CLOUD}' missing for {operation} operation: "
            "send identifier.polygon to select notifications by their points"
        )
    try:
        polygon = parse_polygon_value(value, schema.max_polygon_vertices)
    except ValueError as exc:
        raise InvalidValue(f"field '{POLYGON}' must be a valid polygon: {exc}", str(exc)) from exc
    requested[POLYGON] = value if isinstance(value, str) else dumps(value)
    return polygon


def _compile_constraint(handler: FieldHandler, constraint: dict[str, Any]) -> ConstraintPredicate:
    field = handler.field
    if not handler.operators:
        raise InvalidValue(
            f"Field '{field}' does not support constraint filters; expected scalar value"
        )
    if len(constraint) != 1:
        raise InvalidValue(
            f"Field '{field}' constraint object must contain exactly one operator, "
            f"got {len(constraint)}"
        )
    operator, operand = next(iter(constraint.items()))
    if operator not in handler.operators:
        allowed = ", ".join(sorted(handler.operators))
        raise InvalidValue(
            f"Field '{field}' does not support operator '{operator}'; allowed operators: {allowed}"
        )
    return handler.compile_constraint(operator, operand)


def _generic_stream_filter(
    event_type: str, identifier: Mapping[str, Any], point: tuple[float, float] | None
) -> StreamFilter:
    check_topic_base(event_type)
    requested: dict[str, str] = {}
    for key in sorted(identifier):
        value = identifier[key]
        if isinstance(value, dict):
            raise InvalidValue(f"Field '{key}' constraint object is not supported without schema")
        requested[key] = scalar_text(key, value, "watch")
    pattern = TopicPattern.from_tokens([event_type, *requested.values()])
    return StreamFilter(event_type, pattern, (), _spatial(point, None), requested)


def _spatial(
    point: tuple[float, float] | None, polygon: list[tuple[float, float]] | None
) -> SpatialFilter | None:
    if point is not None:
        return SpatialFilter.for_point(point)
    if polygon is not None:
        return SpatialFilter.for_polygon(polygon)
    return None
