"""Request examples of the API description, built at startup from the configured event types.

Each identifier value comes from its field handler (``FieldHandler.example_value``), checked
with the handler itself, so that every "Try it out" example of the served document is
accepted by the server serving it (``tests/plugins/openapi/test_examples.py`` posts each one).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aviso_plugins._shared.geometry import EXAMPLE_POINT, EXAMPLE_POLYGON
from aviso_plugins._shared.numbers import json_scalar_text
from aviso_plugins.openapi import EventTypeSchema
from aviso_plugins.service import log_event
from aviso_plugins.types import FieldHandler

__all__ = ["RequestExamples", "field_example", "request_examples"]

POINT = "point"
POLYGON = "polygon"
"""The identifier keys of a watch's spatial filters, and the field a polygon handler
serves."""

Body = dict[str, Any]

FALLBACK_VALUES: tuple[Any, ...] = ("example", "1", "2026-04-02", "12", 1, 1.5)
"""Tried in order on a handler that offers no example value of its own."""

EXAMPLE_PAYLOAD: Mapping[str, Any] = {"note": "sent from the API description"}
GENERIC_EVENT_TYPE = "example"
"""The event type of the examples when no schema is configured (any topic base is then
accepted)."""
FIRST_SEQUENCE = "1"
LAST_SEQUENCE = "20"


@dataclass(frozen=True)
class RequestExamples:
    """Named request bodies per operation, and path and body values for the other routes."""

    notify: dict[str, Body] = field(default_factory=dict)
    watch: dict[str, Body] = field(default_factory=dict)
    replay: dict[str, Body] = field(default_factory=dict)
    aggregate: dict[str, Body] = field(default_factory=dict)
    event_type: str = GENERIC_EVENT_TYPE
    """An event type for ``/api/v1/schema/{event_type}`` and the admin examples."""
    event_types: list[str] = field(default_factory=list)
    """The configured event types (none without schemas)."""


def field_example(handler: FieldHandler) -> Any | None:
    """A JSON value ``handler`` accepts, or ``None`` when neither its own example nor any of
    :data:`FALLBACK_VALUES` is accepted."""
    try:
        own = handler.example_value()
    except Exception as exc:  # a third-party handler's bug must not stop the server
        log_event(
            "openapi.example.failed",
            f"{handler.type_name}.example_value failed: {exc!r}",
            logging.WARNING,
            field=handler.field,
        )
        own = None
    candidates = [own] if own is not None else []
    if not handler.spatial:
        candidates += FALLBACK_VALUES
    return next((value for value in candidates if _accepted(handler, value)), None)


def _accepted(handler: FieldHandler, value: Any) -> bool:
    try:
        if handler.spatial:
            handler.canonicalise_value(value, None)
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            handler.canonicalise(json_scalar_text(value))
        else:
            return False
    except Exception:  # InvalidValue, or a handler that cannot take this kind of value
        return False
    return True


def _constraint(handler: FieldHandler, value: Any) -> Body | None:
    """A constraint object on ``handler``'s field that ``value`` satisfies."""
    if "gte" in handler.operators and isinstance(value, (int, float)):
        return {"gte": value}
    if "in" in handler.operators:
        return {"in": [value]}
    return None


def _filter(schema: EventTypeSchema, values: Mapping[str, Any]) -> Body | None:
    """A watch/replay identifier: every required field (a required polygon as a ``point``
    filter), plus a constraint on the first optional field that takes one."""
    identifier: Body = {}
    constrained = False
    polygon = schema.fields.get(POLYGON)
    spatial_field = polygon if polygon is not None and polygon.spatial else None
    for name, handler in schema.fields.items():
        if handler.point_cloud:
            identifier[POLYGON] = [list(point) for point in EXAMPLE_POLYGON]
            continue
        value = values.get(name)
        if handler.required:
            if handler is spatial_field:
                identifier[POINT] = list(EXAMPLE_POINT)
            elif value is None:
                return None
            else:
                identifier[name] = value
        elif not constrained and value is not None and not handler.spatial:
            constraint = _constraint(handler, value)
            if constraint is not None:
                identifier[name] = constraint
                constrained = True
    return identifier


def _group_field(schema: EventTypeSchema) -> str | None:
    return next((name for name, handler in schema.fields.items() if not handler.spatial), None)


def _add_event_type(examples: RequestExamples, schema: EventTypeSchema) -> None:
    name = schema.event_type
    values = {field: field_example(handler) for field, handler in schema.fields.items()}
    # A notify must give every declared field, optional ones included.
    if all(value is not None for value in values.values()):
        examples.notify[name] = {
            "event_type": name,
            "identifier": values,
            "payload": dict(EXAMPLE_PAYLOAD),
        }
    identifier = _filter(schema, values)
    if identifier is None:
        return
    stream = {"event_type": name, "identifier": identifier}
    examples.watch[name] = stream
    examples.replay[name] = {**stream, "from_id": FIRST_SEQUENCE}
    group = _group_field(schema)
    if group is not None:
        examples.aggregate[name] = {**stream, "group_by": [group]}


def request_examples(event_schemas: Mapping[str, EventTypeSchema]) -> RequestExamples:
    """The examples for the configured event types, in name order (none: no schema)."""
    if not event_schemas:
        return _generic_examples()
    names = sorted(event_schemas)
    examples = RequestExamples(event_type=names[0], event_types=names)
    for name in names:
        _add_event_type(examples, event_schemas[name])
    if examples.replay:
        first, body = next(iter(examples.replay.items()))
        examples.replay[f"{first}_window"] = {**body, "to_id": LAST_SEQUENCE}
    return examples


def _generic_examples() -> RequestExamples:
    """Without schemas, an event type is a topic base and its identifier is free-form."""
    stream = {"event_type": GENERIC_EVENT_TYPE, "identifier": {"region": "alps"}}
    return RequestExamples(
        notify={GENERIC_EVENT_TYPE: {**stream, "payload": dict(EXAMPLE_PAYLOAD)}},
        watch={GENERIC_EVENT_TYPE: stream},
        replay={GENERIC_EVENT_TYPE: {**stream, "from_id": FIRST_SEQUENCE}},
        aggregate={GENERIC_EVENT_TYPE: {**stream, "group_by": ["region"]}},
    )
