"""The aggregate route in the OpenAPI document (hook ``aviso_openapi``): its operation, its
request body and the events of its stream, each beside the watch's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aviso_builtins.aggregate.counts import DEFAULT_DEBOUNCE_MS, MAX_DEBOUNCE_MS
from aviso_builtins.aggregate.routes import ENDPOINT, ROUTE
from aviso_plugins.openapi import (
    FOLLOW_IN_CONSOLE,
    SECOND_PATTERN,
    Doc,
    OpenApiContext,
    OpenApiContribution,
    object_schema,
    request_error,
    schema_ref,
    sse_event,
    stream_operation,
)
from aviso_plugins.service import ServiceAccess

REQUEST_DESCRIPTION = """\
The watch body plus `group_by` (required: identifier fields of the event type, each at most
once; schema-less event types in permissive mode may name keys of their own identifier)
and `debounce_ms` (optional, `limits.min_aggregate_debounce_ms` (default 100) to 60000,
default 1000). Without `from_id` or `from_date` the counts cover all retained history.
`group_by` and `debounce_ms` of the wrong JSON type are `INVALID_REQUEST_SHAPE`; unknown,
repeated or no fields and an out-of-range `debounce_ms` are `INVALID_AGGREGATE_REQUEST`.
"""

_SSE_DESCRIPTION = """\
A Server-Sent Events stream framed exactly like a watch (see `POST /api/v1/watch`).

* `aggregate` with `type` `snapshot`: always the first event; the counts over the retained
  history from the cursor (all retained history when no cursor is given).
* `aggregate` with `type` `update`: the counts changed. The first change after an event
  opens a `debounce_ms` window and one update at its end carries everything counted in it;
  no update is sent when no count changed.
* Aggregate keys: `group_by`, `groups` (`[{"count", "values": {field: value or null}}]`,
  ordered by value: missing first, then whole numbers numerically, then text), `total`,
  `last_sequence` (the newest matching notification counted, `null` if none), `request_id`,
  `timestamp`, `topic`, `type`.
* Counts are of distinct notifications: a re-publish of an identifier already counted
  changes nothing.
* `replay-control` (`history_gap`, `notification_replay_limit_reached`) or `error`
  (`stream_processing_failed`) right after the snapshot say that its history was incomplete.
* `heartbeat` and `connection-closing` (`end_of_stream`, `max_duration_reached`,
  `server_shutdown`) as on a watch.
* A stream that would count more groups than `limits.max_aggregate_groups` (default 1000)
  ends with `error` (`aggregate_group_limit_reached`, with `max_groups`) and
  `connection-closing` of the same reason; no incomplete counts are sent.
"""

# An invented request id, the same in every example of the route.
_REQUEST_ID = "5e0c7a2b-9d14-4f6e-a8b3-1c2d3e4f5a6b"

_TRANSCRIPT = (
    "event: aggregate\n"
    'data: {"group_by":["level"],"groups":[{"count":2,"values":{"level":"3"}},'
    '{"count":1,"values":{"level":"5"}}],"last_sequence":61,'
    '"request_id":"' + _REQUEST_ID + '","timestamp":"2026-04-02T08:00:00Z",'
    '"topic":"gauge.rhine.*.*","total":3,"type":"snapshot"}\n\n'
    "event: heartbeat\n"
    'data: {"timestamp":"2026-04-02T08:00:00Z","topic":"gauge.rhine.*.*"}\n\n'
    "event: aggregate\n"
    'data: {"group_by":["level"],"groups":[{"count":2,"values":{"level":"3"}},'
    '{"count":2,"values":{"level":"5"}}],"last_sequence":64,'
    '"request_id":"' + _REQUEST_ID + '","timestamp":"2026-04-02T08:00:21Z",'
    '"topic":"gauge.rhine.*.*","total":4,"type":"update"}\n\n'
)

# The watch's stream events an aggregate stream sends too.
_WATCH_EVENTS = ("replay-control", "heartbeat", "error", "connection-closing")


def contribution(
    service: ServiceAccess, context: OpenApiContext, min_debounce_ms: int
) -> OpenApiContribution:
    """The aggregate's part of the document, with ``debounce_ms``'s configured minimum (the
    host states the ``limits`` its text names)."""
    invalid = service.validation_error(
        ENDPOINT,
        "group_by field 'colour' is not an identifier field of event type 'river_gauge'. "
        "Allowed fields: basin, date, level",
    )
    operation = stream_operation(
        ENDPOINT,
        "Watch counts of notifications grouped by identifier fields",
        "The same filters, cursor, auth, heartbeats and maximum duration as a watch, but the "
        "stream carries counts of the matching notifications grouped by the `group_by` "
        "fields instead of the notifications: a snapshot first, then debounced updates."
        + FOLLOW_IN_CONSOLE,
        _REQUEST_ID,
        context.examples.get(ENDPOINT, {}),
        context.event_types,
        request_error(invalid.code, invalid.error, invalid.message, _REQUEST_ID),
        {"snapshot_then_update": _TRANSCRIPT},
        sse_description=_SSE_DESCRIPTION,
        request_schema="AggregateRequest",
        event_schema="AggregateStreamEvent",
    )
    data = context.stream_event_data
    return OpenApiContribution(
        paths={ROUTE: {"post": operation}},
        schemas={
            "AggregateRequest": _request(context.schemas["StreamRequest"], min_debounce_ms),
            "AggregateStreamEvent": sse_event(
                "One event of an aggregate stream.",
                {
                    "aggregate": schema_ref("AggregateCounts"),
                    **{name: data[name] for name in data if name in _WATCH_EVENTS},
                },
            ),
            "AggregateCounts": _counts(),
        },
        after={
            ROUTE: "/api/v1/replay",
            "AggregateRequest": "StreamRequest",
            "AggregateStreamEvent": "StreamEvent",
            "AggregateCounts": "NotificationsSkipped",
        },
    )


def _request(stream_request: Mapping[str, Any], min_debounce_ms: int) -> Doc:
    return {
        **stream_request,
        "description": REQUEST_DESCRIPTION,
        "required": ["event_type", "identifier", "group_by"],
        "properties": {
            **stream_request["properties"],
            "group_by": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "uniqueItems": True,
                "description": "Identifier fields of the event type to group the counts by.",
            },
            "debounce_ms": {
                "type": ["integer", "null"],
                "minimum": min_debounce_ms,
                "maximum": MAX_DEBOUNCE_MS,
                "default": max(DEFAULT_DEBOUNCE_MS, min_debounce_ms),
                "description": "The window that coalesces changes into one update.",
            },
        },
    }


def _counts() -> Doc:
    text: Doc = {"type": "string"}
    count: Doc = {"type": "integer", "minimum": 0}
    return object_schema(
        {
            "type": {"type": "string", "enum": ["snapshot", "update"]},
            "group_by": {"type": "array", "items": text},
            "groups": {
                "type": "array",
                "items": object_schema(
                    {
                        "count": count,
                        "values": {
                            "type": "object",
                            "additionalProperties": {"type": ["string", "null"]},
                        },
                    }
                ),
            },
            "total": count,
            "last_sequence": {"type": ["integer", "null"], "minimum": 0},
            "request_id": schema_ref("RequestId"),
            "timestamp": {"type": "string", "pattern": SECOND_PATTERN},
            "topic": text,
        }
    )
