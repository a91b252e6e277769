"""From a request's ``identifier`` object to what the backend needs.

Notify: validate and canonicalise every value, build the topic and the stored metadata.
Watch/replay: build the topic pattern plus the in-process filters (scalars on fields
outside the topic, constraint objects, the spatial filter).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aviso_host.encoding import dumps
from aviso_host.filtering import FieldFilter, SpatialFilter, StreamFilter, stored_coordinates
from aviso_host.schemas import POINT, POINT_CLOUD, POLYGON, EventSchema, SchemaCatalog
from aviso_plugins.geometry import MAX_STORED_COORDINATES_BYTES, parse_polygon_value
from aviso_plugins.numbers import float_display, json_scalar_text
from aviso_plugins.topics import TopicPattern, build_topic
from aviso_plugins.types import (
    ConstraintPredicate,
    FieldHandler,
    InvalidValue,
    PlannedNotification,
    SinkRejected,
)

WILDCARD = "*"
NOTIFY_VALIDATION_CODE = "INVALID_NOTIFICATION_REQUEST"


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


# -- notify ------------------------------------------------------------------------------


def plan_notification(
    schema: EventSchema | None, event_type: str, identifier: Mapping[str, Any], payload: Any
) -> PlannedNotification:
    if schema is None:
        canonical = _generic_notify_values(identifier)
        tokens = [event_type, *(canonical[key] for key in sorted(canonical))]
        return PlannedNotification(build_topic(tokens), dumps(payload), _metadata(canonical))
    for key in identifier:
        if key not in schema.fields:
            raise InvalidValue(f"Unknown field '{key}' provided for notify operation")
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

    def __init__(self, catalog: SchemaCatalog) -> None:
        self.catalog = catalog

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
            return plan_notification(schema, event_type, identifier, payload)
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
    return {"identifier": dumps({key: value for key, value in canonical.items() if value})}


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
    requested: dict[str, str] = {}
    for key in sorted(identifier):
        value = identifier[key]
        if isinstance(value, dict):
            raise InvalidValue(f"Field '{key}' constraint object is not supported without schema")
        requested[key] = scalar_text(key, value, "watch")
    tokens = [event_type, *requested.values()]
    return StreamFilter(
        event_type, TopicPattern.from_tokens(tokens), (), _spatial(point, None), requested
    )


def _spatial(
    point: tuple[float, float] | None, polygon: list[tuple[float, float]] | None
) -> SpatialFilter | None:
    if point is not None:
        return SpatialFilter.for_point(point)
    if polygon is not None:
        return SpatialFilter.for_polygon(polygon)
    return None
