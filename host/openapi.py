"""The OpenAPI 3.1 description of the public API, as plain data built at startup.

The prose, status codes and error shapes are written here; what the code already knows is
taken from it: the request examples from the configured event types
(:mod:`aviso_host.openapi_examples`), the schema-route examples from the schemas' own
``describe()``, the validation codes and labels from :class:`aviso_host.errors.Endpoint`.
Keep the rest in step with the routes and docs/guarantees.md; the tests hold them
together: the document validates (openapi-spec-validator), every route of the app is
described (or listed in :data:`NOT_DESCRIBED_PATHS`), every error code the host raises is
listed, every example matches its schema, every request example is accepted by the server,
and schemathesis checks the server's answers against the document.

To describe a new route, add its path item to the ``paths`` of :func:`openapi_document` (a
function returning ``{path: {method: operation}}`` per group, like
:func:`_operational_operations`), with a response for every status it answers and examples
that match their schemas; a route that is not API (a page, a file) goes into
:data:`NOT_DESCRIBED_PATHS` instead.

Compatibility note: the bundled Swagger UI (4.x) only renders OpenAPI 3.0, so the document
stays within what 3.0 and 3.1 read alike, apart from nullable types written as type lists
(the Swagger UI page rewrites those before rendering, see ``aviso_host.routes.ops``) and the
event schemas of the streams (``const``, ``if``/``then``, ``contentSchema``), which Swagger UI
shows without checking.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from aviso_host.errors import UNKNOWN_EVENT_TYPE_CODE, Endpoint
from aviso_host.openapi_examples import RequestExamples, request_examples
from aviso_host.schemas import SchemaCatalog

JSON = "application/json"
Doc = dict[str, Any]

_UUID_PATTERN = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_SECOND_PATTERN = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"

# Invented request ids, reused so the examples of one exchange agree with each other.
_RID_NOTIFY = "2b8e4f4c-7a0d-4d7e-9a3b-5f1e0c6d9a12"
_RID_WATCH = "d41f0a9e-3c55-4b8e-8f0e-6a2b7c9d1e30"
_RID_REPLAY = "7c2d9b10-5e4f-4a6b-b1c8-0f9e8d7c6b5a"
_RID_ADMIN = "6f1c2e8a-0b7d-4a55-9e39-2d0c8f3b6a41"
_RID_SCHEMA = "0a7b3c4d-1e2f-4a5b-8c9d-0e1f2a3b4c5d"
_RID_AGGREGATE = "5e0c7a2b-9d14-4f6e-a8b3-1c2d3e4f5a6b"

_STREAM_CREDENTIALS: list[Doc] = [{}, {"bearer_jwt": []}, {"basic": []}]
"""Anonymous callers reach public streams; a supplied credential is always verified."""
_ADMIN_CREDENTIALS: list[Doc] = [{"bearer_jwt": []}, {"basic": []}]


NOT_DESCRIBED_PATHS = frozenset(
    {
        "/static/{path:path}",
        "/api-docs/openapi.json",
        "/swagger-ui/",
        "/swagger-ui/{file}",
        "/console/{file}",
        "/favicon.ico",
    }
)
"""Routes the server has but the document leaves out: files, and the documentation itself.
Every other route must have its path and methods in the document (a test compares them)."""


def _ref(section: str, name: str) -> Doc:
    return {"$ref": f"#/components/{section}/{name}"}


def _schema(name: str) -> Doc:
    return _ref("schemas", name)


def _examples(**examples: Any) -> Doc:
    return {name: {"value": value} for name, value in examples.items()}


def _response(
    description: str,
    media_type: str | None = None,
    schema: Doc | None = None,
    examples: Doc | None = None,
    headers: Doc | None = None,
) -> Doc:
    """A response object; every aviso response carries ``X-Request-ID``."""
    response: Doc = {
        "description": description,
        "headers": {"X-Request-ID": _ref("headers", "X-Request-ID"), **(headers or {})},
    }
    if media_type is not None:
        content: Doc = {"schema": schema or {}}
        if examples:
            content["examples"] = examples
        response["content"] = {media_type: content}
    return response


def _json_response(description: str, schema: Doc, **examples: Any) -> Doc:
    return _response(description, JSON, schema, _examples(**examples))


def _request_error(code: str, label: str, message: str, request_id: str) -> Doc:
    return {
        "code": code,
        "details": message,
        "error": label,
        "message": message,
        "request_id": request_id,
    }


def _unknown_event_type(request_id: str, configured: list[str]) -> Doc:
    return {
        "code": UNKNOWN_EVENT_TYPE_CODE,
        "configured_event_types": configured,
        "error": "unknown_event_type",
        "message": "unknown event type 'tide_gauge'",
        "request_id": request_id,
    }


def _bad_request(**examples: Any) -> Doc:
    return _json_response(
        "The body could not be parsed, names an unknown event type (strict mode), or failed "
        "validation: an identifier key the schema does not declare, a schema-less event type "
        "that is not a topic base, an identifier value or constraint operand over "
        "`limits.max_identifier_value_bytes` (1024) or holding a vertical tab, form feed or "
        "DEL, a topic over 3072 bytes, a payload over `limits.max_payload_bytes` (262144). "
        "Parse failures carry the endpoint's own `error` label.",
        {"oneOf": [_schema("RequestError"), _schema("UnknownEventTypeError")]},
        **examples,
    )


def _server_error(description: str, **examples: Any) -> Doc:
    return _json_response(
        description, {"oneOf": [_schema("RequestError"), _schema("AuthError")]}, **examples
    )


def _admin_result(description: str, **examples: Any) -> Doc:
    return _json_response(description, _schema("AdminResult"), **examples)


def _auth_responses() -> Doc:
    return {
        "401": _ref("responses", "Unauthorized"),
        "403": _ref("responses", "Forbidden"),
        "503": _ref("responses", "ServiceUnavailable"),
    }


# --------------------------------------------------------------------------- request bodies

_STREAM_REQUEST_DESCRIPTION = """\
The one body model shared by notify, watch and replay. `Content-Type` is not checked: the
raw body is always parsed as JSON. Bodies over `limits.max_body_bytes` (256 KiB) are refused
with 413 `PAYLOAD_TOO_LARGE`, arrays/objects nested deeper than `limits.max_json_depth` (64)
with 400 `INVALID_JSON`.

* `event_type` (required): the stream.
* `identifier` (required): on notify, the values to validate and store; on watch and
  replay, the filter: scalars, constraint objects (`{"gte": 4}`) on Int/Float/Enum fields,
  and a `point` or `polygon` spatial filter. Spatial values are coordinate arrays, latitude
  first: a polygon `[[lat, lon], ...]` (at least 4 pairs, first = last, at most
  `limits.max_polygon_vertices`), a point `[lat, lon]`; the legacy text `"lat,lon,..."` and a
  string holding the JSON array are accepted too. A `point_cloud` field (notify only) is a
  non-empty array of pairs; watch/replay select point clouds with a `polygon`.
* `from_id`: watch/replay start cursor, a sequence number as a string (inclusive).
* `from_date`: watch/replay start cursor, an RFC 3339 or space-separated datetime, or Unix
  seconds / milliseconds (inclusive).
* `to_id` / `to_date`: replay only (at most one; refused with the endpoint's validation
  error on watch, notify and aggregate): the end point, inclusive, in the same forms as
  `from_id` / `from_date`. It is resolved once, when the replay starts, to a sequence no
  later than the last one stored then; `to_date` compares storage times. An end of the same
  kind before the start is refused; `from_id` equal to `to_id` replays one notification.
* `payload`: notify only, any JSON, stored and delivered verbatim.

Any other top-level key is refused (`UNKNOWN_FIELD`). `null` is the same as an absent
optional key.
"""


_AGGREGATE_REQUEST_DESCRIPTION = """\
The watch body plus `group_by` (required: identifier fields of the event type, each at most
once; schema-less event types in permissive mode may name keys of their own identifier)
and `debounce_ms` (optional, `limits.min_aggregate_debounce_ms` (default 100) to 60000,
default 1000). Without `from_id` or `from_date` the counts cover all retained history.
`group_by` and `debounce_ms` of the wrong JSON type are `INVALID_REQUEST_SHAPE`; unknown,
repeated or no fields and an out-of-range `debounce_ms` are `INVALID_AGGREGATE_REQUEST`.
"""


def _request_body(schema: str, examples: Mapping[str, Any]) -> Doc:
    return {
        "required": True,
        "content": {JSON: {"schema": _schema(schema), "examples": _examples(**examples)}},
    }


# ------------------------------------------------------------------------------ SSE streams

_SSE_DESCRIPTION = """\
A Server-Sent Events stream (`text/event-stream`, no charset). Every event is exactly
`event: <name>`, `data: <compact JSON object>` and a blank line; there are no `id:`,
`retry:` or comment lines, and `Last-Event-ID` is ignored. All validation happens before
the 200 is sent, so failures arrive as ordinary JSON responses.

* `live-notification`: a live CloudEvent, or the `connection_established` control object
  (first event of a live-only watch).
* `replay`: a historical CloudEvent.
* `replay-control`: `replay_started` (first event of every cursor stream, sent at once even
  when the replay is empty or fails; `end_sequence` is the resolved `to_id` / `to_date`
  as a sequence, `null` without an end point), `replay_completed`,
  `notification_replay_limit_reached` (`max_allowed`, `message`, `timestamp`, `topic`):
  `max_historical_notifications` matches were delivered and at least one more exists; the
  stream then closes with `end_of_stream`, without `replay_completed` and without going
  live. Resume with `from_id` after the last sequence received.
* `heartbeat`: `{"timestamp", "topic"}`, on watch streams only.
* `error`: `stream_processing_failed` (a history batch failed: the stream closes with
  `end_of_stream`, without `replay_completed` and without going live) or `CloudEvent
  creation failed` (one notification could not be rendered; the stream goes on).
* `connection-closing`: the last event of a stream the server ends; `reason` is
  `end_of_stream`, `max_duration_reached` or `server_shutdown`. When the server ends a
  stream for a reason of its own, `reason` is `end_of_stream` (clients reconnect from their
  cursor) and `cause` says why: `slow_consumer` (with `resume_from_sequence`),
  `auth_expired` (the caller's token reached its expiry) or `access_revoked` (a periodic
  ECPDS recheck denied the destination).
* `notifications-skipped`: `{"type":"notifications_skipped", "topic", "skipped",
  "first_skipped_sequence", "last_skipped_sequence", "timestamp"}` (`on_backpressure: drop`).

CloudEvents (specversion 1.0) have the keys `data` (`identifier`: canonical strings, except
spatial values (`polygon`, `point_cloud`), which are arrays of `[lat, lon]` numbers; `payload`),
`datacontenttype`, `dataschema`, `id` (`<event_type>@<sequence>`), `sequence`, `source`,
`specversion`, `time` and `type` (`int.ecmwf.aviso.<event_type>`), plus the extension
`publisher` (the username of an authenticated publisher; absent for anonymous publishes).

To resume, send the same request again with `"from_id": "<last sequence + 1>"`.
"""

_LIVE_WATCH_TRANSCRIPT = (
    "event: live-notification\n"
    'data: {"connection_will_close_in_seconds":900,"request_id":"' + _RID_WATCH + '",'
    '"timestamp":"2026-04-02T08:00:00Z","topic":"gauge.rhine.*.*",'
    '"type":"connection_established"}\n\n'
    "event: heartbeat\n"
    'data: {"timestamp":"2026-04-02T08:00:00Z","topic":"gauge.rhine.*.*"}\n\n'
    "event: live-notification\n"
    'data: {"data":{"identifier":{"basin":"rhine","date":"20260402","level":"6"},'
    '"payload":{"reading_cm":655}},"datacontenttype":"application/json",'
    '"dataschema":"https://aviso.example.org/schema/river_gauge","id":"river_gauge@62",'
    '"sequence":62,"source":"https://aviso.example.org","specversion":"1.0",'
    '"time":"2026-04-02T08:00:17.204Z","type":"int.ecmwf.aviso.river_gauge"}\n\n'
    "event: connection-closing\n"
    'data: {"message":"Connection reached maximum duration","reason":"max_duration_reached",'
    '"request_id":"' + _RID_WATCH + '","timestamp":"2026-04-02T08:15:00Z",'
    '"topic":"gauge.rhine.*.*"}\n\n'
)

_REPLAY_TRANSCRIPT = (
    "event: replay-control\n"
    'data: {"batch_size":100,"end_sequence":null,"from_date":null,"from_sequence":57,'
    '"request_id":"' + _RID_REPLAY + '","timestamp":"2026-04-02T08:05:12Z",'
    '"topic":"gauge.rhine.*.*","type":"replay_started"}\n\n'
    "event: replay\n"
    'data: {"data":{"identifier":{"basin":"rhine","date":"20260402","level":"3"},'
    '"payload":{"reading_cm":412,"station":"Kaub"}},"datacontenttype":"application/json",'
    '"dataschema":"https://aviso.example.org/schema/river_gauge","id":"river_gauge@57",'
    '"sequence":57,"source":"https://aviso.example.org","specversion":"1.0",'
    '"time":"2026-04-02T07:31:09.482913Z","type":"int.ecmwf.aviso.river_gauge"}\n\n'
    "event: replay-control\n"
    'data: {"timestamp":"2026-04-02T08:05:12Z","topic":"gauge.rhine.*.*",'
    '"type":"replay_completed"}\n\n'
    "event: connection-closing\n"
    'data: {"message":"Stream completed","reason":"end_of_stream",'
    '"request_id":"' + _RID_REPLAY + '","timestamp":"2026-04-02T08:05:13Z",'
    '"topic":"gauge.rhine.*.*"}\n\n'
)


_FOLLOW_IN_CONSOLE = (
    '\n\n**Swagger UI cannot follow a stream**: its "Try it out" waits for the response '
    "to end, which a live stream never does, and shows nothing meanwhile. Follow watches "
    "and replays in the [console](../console) (the page `/console` of this server), or with "
    "`curl -N`."
)


def _sse_response(description: str, event_schema: str, **transcripts: str) -> Doc:
    def fixed(value: str) -> Doc:
        return {"schema": {"type": "string", "enum": [value]}}

    return _response(
        description,
        "text/event-stream",
        _schema(event_schema),
        _examples(**transcripts),
        headers={
            "Cache-Control": fixed("no-cache"),
            "X-Accel-Buffering": fixed("no"),
            "Access-Control-Allow-Origin": fixed("*"),
        },
    )


def _stream_operation(
    endpoint: Endpoint,
    summary: str,
    description: str,
    request_id: str,
    request_examples: Mapping[str, Any],
    configured_event_types: list[str],
    invalid_message: str,
    transcript: Doc,
    *,
    request_schema: str = "StreamRequest",
    sse_description: str = _SSE_DESCRIPTION,
    event_schema: str = "StreamEvent",
) -> Doc:
    return {
        "tags": ["streaming"],
        "operationId": endpoint.operation,
        "summary": summary,
        "description": description,
        "security": _STREAM_CREDENTIALS,
        "requestBody": _request_body(request_schema, request_examples),
        "responses": {
            "200": _sse_response(sse_description, event_schema, **transcript),
            "400": _bad_request(
                validation=_request_error(
                    endpoint.validation_code, endpoint.label, invalid_message, request_id
                ),
                unknown_event_type=_unknown_event_type(request_id, configured_event_types),
            ),
            **_auth_responses(),
            "413": _ref("responses", "PayloadTooLarge"),
            "500": _server_error(
                "The stream could not be set up, or a server-side misconfiguration.",
                stream_setup_failed={
                    "code": "SSE_STREAM_INITIALIZATION_FAILED",
                    "details": "connection refused",
                    "error": "SSE stream creation failed",
                    "message": "Failed to create stream consumer",
                    "request_id": request_id,
                    "topic": "gauge.rhine.*.*",
                },
            ),
        },
    }


# ---------------------------------------------------------------------------------- paths


def _notify_operation(examples: RequestExamples) -> Doc:
    label = Endpoint.NOTIFY.label
    return {
        "tags": ["notification"],
        "operationId": "notify",
        "summary": "Publish a notification",
        "description": (
            "Validates the identifier against the event type's schema (every declared field "
            "must be present), stores the notification and fans it out to matching watches. "
            "The success body does not reveal the assigned sequence."
        ),
        "security": _STREAM_CREDENTIALS,
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": (
                    "A producer's id for this notification (1 to 128 printable ASCII "
                    "characters). Inside the stream's duplicate window (JetStream: the "
                    "stream's, in-memory: notification_backend.in_memory.duplicate_window; 2 "
                    "minutes by default) a key stores one notification: a re-send of the same "
                    "notification is answered 200 with `Idempotent-Replayed: true` and not "
                    "stored again, so retries cannot duplicate a notification. A key re-used "
                    "for a different notification is refused with 422 "
                    "IDEMPOTENCY_KEY_REUSED, and a re-send whose notification is no longer "
                    "stored (replaced by a newer one on its topic, deleted, purged) with 422 "
                    "IDEMPOTENCY_KEY_NOT_RETAINED; nothing is stored either way, whichever "
                    "instance or worker answers. Keys are scoped per event type and writer: "
                    "an authenticated user's keys are its own, anonymous writers share one "
                    "scope."
                ),
                "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,128}$"},
            }
        ],
        "requestBody": _request_body("StreamRequest", examples.notify),
        "responses": {
            "200": _response(
                "Stored: this notification is the one stored (under its Idempotency-Key, "
                "if it has one).",
                JSON,
                _schema("NotificationAccepted"),
                _examples(
                    accepted={
                        "status": "success",
                        "request_id": _RID_NOTIFY,
                        "processed_at": "2026-04-02T07:31:09Z",
                    }
                ),
                headers={
                    "Idempotent-Replayed": {
                        "description": (
                            "`true` when nothing new was stored because this same "
                            "notification already is, under its Idempotency-Key (a re-send); "
                            "absent otherwise."
                        ),
                        "required": False,
                        "schema": {"type": "string", "enum": ["true"]},
                    }
                },
            ),
            "400": _bad_request(
                missing_field=_request_error(
                    Endpoint.NOTIFY.validation_code,
                    label,
                    "Required field 'level' missing for notify operation",
                    _RID_NOTIFY,
                ),
                invalid_json=_request_error(
                    "INVALID_JSON",
                    label,
                    "JSON parsing failed: expected value at line 1 column 1",
                    _RID_NOTIFY,
                ),
                unknown_event_type=_unknown_event_type(_RID_NOTIFY, examples.event_types),
            ),
            **_auth_responses(),
            "413": _ref("responses", "PayloadTooLarge"),
            "422": _json_response(
                "The Idempotency-Key was used inside the duplicate window for a different "
                "notification (another topic, payload or identifier), or the notification "
                "stored under it is no longer retained, so this one cannot be confirmed as "
                "its re-send; nothing was stored.",
                _schema("RequestError"),
                key_reused=_request_error(
                    "IDEMPOTENCY_KEY_REUSED",
                    "Idempotency Key Reused",
                    "Idempotency-Key 'order-42' was already used for a different notification",
                    _RID_NOTIFY,
                ),
                key_not_retained=_request_error(
                    "IDEMPOTENCY_KEY_NOT_RETAINED",
                    "Idempotency Key Not Retained",
                    "The notification stored under Idempotency-Key 'order-42' is no longer "
                    "retained; nothing was stored (send a new notification with a new key)",
                    _RID_NOTIFY,
                ),
            ),
            "500": _server_error(
                "Server-side processing or storage failed.",
                storage_failed={
                    "code": "NOTIFICATION_STORAGE_FAILED",
                    "details": "backend unavailable",
                    "error": "Notification Storage Failed",
                    "message": "Failed to store notification",
                    "request_id": _RID_NOTIFY,
                },
            ),
        },
    }


def _watch_operation(examples: RequestExamples) -> Doc:
    return _stream_operation(
        Endpoint.WATCH,
        "Watch live notifications (optionally catching up first)",
        "Without a cursor: a live-only stream opening with `connection_established`. With "
        "`from_id` or `from_date`: history from the cursor, then live, without gaps or "
        "duplicates. Heartbeats every `sse_heartbeat_interval_sec`; the stream closes after "
        "`connection_max_duration_sec`." + _FOLLOW_IN_CONSOLE,
        _RID_WATCH,
        examples.watch,
        examples.event_types,
        "Cannot specify both identifier.polygon and identifier.point. "
        "Provide only one spatial filter.",
        {"live_only": _LIVE_WATCH_TRANSCRIPT},
    )


def _replay_operation(examples: RequestExamples) -> Doc:
    return _stream_operation(
        Endpoint.REPLAY,
        "Replay stored notifications",
        "Streams matching history from `from_id` or `from_date` (one is required) up to "
        "`to_id` / `to_date` (optional; otherwise the last notification stored when the "
        "replay starts) in ascending sequence order, then closes with `end_of_stream`. No "
        "heartbeats, no duration limit." + _FOLLOW_IN_CONSOLE,
        _RID_REPLAY,
        examples.replay,
        examples.event_types,
        "Replay endpoint requires either from_id or from_date parameter. Use from_id for "
        "sequence-based replay or from_date for time-based replay.",
        {"two_notifications": _REPLAY_TRANSCRIPT},
    )


_AGGREGATE_SSE_DESCRIPTION = """\
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

_AGGREGATE_TRANSCRIPT = (
    "event: aggregate\n"
    'data: {"group_by":["level"],"groups":[{"count":2,"values":{"level":"3"}},'
    '{"count":1,"values":{"level":"5"}}],"last_sequence":61,'
    '"request_id":"' + _RID_AGGREGATE + '","timestamp":"2026-04-02T08:00:00Z",'
    '"topic":"gauge.rhine.*.*","total":3,"type":"snapshot"}\n\n'
    "event: heartbeat\n"
    'data: {"timestamp":"2026-04-02T08:00:00Z","topic":"gauge.rhine.*.*"}\n\n'
    "event: aggregate\n"
    'data: {"group_by":["level"],"groups":[{"count":2,"values":{"level":"3"}},'
    '{"count":2,"values":{"level":"5"}}],"last_sequence":64,'
    '"request_id":"' + _RID_AGGREGATE + '","timestamp":"2026-04-02T08:00:21Z",'
    '"topic":"gauge.rhine.*.*","total":4,"type":"update"}\n\n'
)


def _aggregate_operation(examples: RequestExamples) -> Doc:
    return _stream_operation(
        Endpoint.AGGREGATE,
        "Watch counts of notifications grouped by identifier fields",
        "The same filters, cursor, auth, heartbeats and maximum duration as a watch, but the "
        "stream carries counts of the matching notifications grouped by the `group_by` "
        "fields instead of the notifications: a snapshot first, then debounced updates."
        + _FOLLOW_IN_CONSOLE,
        _RID_AGGREGATE,
        examples.aggregate,
        examples.event_types,
        "group_by field 'colour' is not an identifier field of event type 'river_gauge'. "
        "Allowed fields: basin, date, level",
        {"snapshot_then_update": _AGGREGATE_TRANSCRIPT},
        request_schema="AggregateRequest",
        sse_description=_AGGREGATE_SSE_DESCRIPTION,
        event_schema="AggregateStreamEvent",
    )


def _schema_operations(catalog: SchemaCatalog | None, first: str) -> Doc:
    # The examples are this server's own answers.
    event_types = catalog.event_types if catalog is not None else []
    entries = {name: catalog.schemas[name].describe() for name in event_types} if catalog else {}
    return {
        "/api/v1/schema": {
            "get": {
                "tags": ["schema"],
                "operationId": "listSchemas",
                "summary": "List the configured event types and their identifier rules",
                "description": "Public even when auth is enabled; `Authorization` is ignored.",
                "responses": {
                    "200": _json_response(
                        "The public part of every schema entry (`identifier`, `payload`).",
                        _schema("SchemaCatalogue"),
                        configured={
                            "event_types": event_types,
                            "schema": entries,
                            "status": "success",
                            "total_schemas": len(entries),
                        },
                        not_configured={
                            "event_types": [],
                            "message": "No notification schema configured",
                            "schema": {},
                            "status": "success",
                            "total_schemas": 0,
                        },
                    ),
                },
            },
        },
        "/api/v1/schema/{event_type}": {
            "get": {
                "tags": ["schema"],
                "operationId": "getSchema",
                "summary": "Show one event type's identifier rules",
                "description": "Public even when auth is enabled; `Authorization` is ignored.",
                "parameters": [
                    {
                        "name": "event_type",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                        # Without schemas every event type is 404: no example to try.
                        **({"example": first} if entries else {}),
                    }
                ],
                "responses": {
                    "200": _json_response(
                        "The schema entry.",
                        _schema("SchemaDetail"),
                        **(
                            {
                                "configured": {
                                    "event_type": first,
                                    "schema": entries[first],
                                    "status": "success",
                                }
                            }
                            if entries
                            else {}
                        ),
                    ),
                    "404": _json_response(
                        "Unknown event type, or no schema configured at all.",
                        _schema("SchemaNotFound"),
                        unknown={
                            "available_types": event_types,
                            "message": "Event type 'tide_gauge' not found",
                            "request_id": _RID_SCHEMA,
                            "status": "error",
                        },
                        not_configured={
                            "message": "No notification schema configured",
                            "request_id": _RID_SCHEMA,
                            "status": "error",
                        },
                    ),
                },
            },
        },
    }


_ADMIN_DESCRIPTION = (
    " Requires an administrator's credentials when auth is enabled; open to anyone when it "
    "is disabled."
)


def _admin_operations(event_type: str) -> Doc:
    notification_id = f"{event_type}@1"

    def deleted(success: bool, message: str, notification_id: str = notification_id) -> Doc:
        return {
            "success": success,
            "message": message,
            "notification_id": notification_id,
            "request_id": _RID_ADMIN,
        }

    def wiped(success: bool, message: str) -> Doc:
        return {"success": success, "message": message, "request_id": _RID_ADMIN}

    return {
        "/api/v1/admin/notification/{notification_id}": {
            "delete": {
                "tags": ["admin"],
                "operationId": "deleteNotification",
                "summary": "Delete one stored notification",
                "description": (
                    "`notification_id` is a CloudEvent `id` (`river_gauge@57`) or "
                    "`<stream>@<sequence>` (`gauge@57`)." + _ADMIN_DESCRIPTION
                ),
                "security": _ADMIN_CREDENTIALS,
                "parameters": [
                    {
                        "name": "notification_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                        "example": notification_id,
                    }
                ],
                "responses": {
                    "200": _json_response(
                        "Deleted.",
                        _schema("AdminNotificationResult"),
                        deleted=deleted(True, "Notification deleted"),
                    ),
                    "400": _json_response(
                        "`notification_id` is not `<stream>@<sequence>` with a topic base or "
                        "event type and a sequence in 1..2^64-1.",
                        _schema("AdminNotificationResult"),
                        bad_format=deleted(
                            False,
                            "notification_id must be in '<stream>@<sequence>' format",
                            "not-an-id",
                        ),
                        zero=deleted(
                            False,
                            "notification_id sequence must be greater than zero",
                            "gauge@0",
                        ),
                        bad_stream=deleted(
                            False,
                            "notification_id stream must be a topic base "
                            "([A-Za-z0-9][A-Za-z0-9_-]*, at most 255 characters) or a "
                            "configured event type",
                            "gauge.x@1",
                        ),
                    ),
                    **_auth_responses(),
                    "404": _json_response(
                        "No such notification (or stream).",
                        _schema("AdminNotificationResult"),
                        not_found=deleted(False, "Notification not found", "river_gauge@999999999"),
                    ),
                    "500": _json_response(
                        "The backend failed.",
                        _schema("AdminNotificationResult"),
                        backend_failure=deleted(
                            False, "Failed to delete notification: backend unavailable"
                        ),
                    ),
                },
            },
        },
        "/api/v1/admin/wipe/stream": {
            "delete": {
                "tags": ["admin"],
                "operationId": "wipeStream",
                "summary": "Remove a stream's stored history",
                "description": (
                    "`stream_name` is a topic base in any case (`GAUGE`, `gauge`) or a "
                    "configured event type (`river_gauge`). Schemas stay and open streams are "
                    "not closed." + _ADMIN_DESCRIPTION
                ),
                "security": _ADMIN_CREDENTIALS,
                "requestBody": {
                    "required": True,
                    "content": {
                        JSON: {
                            "schema": _schema("WipeStreamRequest"),
                            "examples": _examples(**{event_type: {"stream_name": event_type}}),
                        }
                    },
                },
                "responses": {
                    "200": _admin_result(
                        "Wiped.", wiped=wiped(True, "Successfully wiped stream: GAUGE")
                    ),
                    "400": _admin_result(
                        "Unusable body (not JSON, nested deeper than `limits.max_json_depth`, "
                        "no string `stream_name`, or a `Content-Type` other than "
                        "`application/json`), or a `stream_name` that is neither a topic base "
                        "nor a configured event type.",
                        bad_name=wiped(
                            False,
                            "stream_name must be a topic base ([A-Za-z0-9][A-Za-z0-9_-]*, at "
                            "most 255 characters) or a configured event type",
                        ),
                    ),
                    **_auth_responses(),
                    "404": _admin_result(
                        "No such stream (a configured one never written to wipes as a no-op).",
                        not_found=wiped(False, "Stream not found"),
                    ),
                    "500": _admin_result(
                        "The backend failed.",
                        backend_failure=wiped(False, "Failed to wipe stream: timed out"),
                    ),
                },
            },
        },
        "/api/v1/admin/wipe/all": {
            "delete": {
                "tags": ["admin"],
                "operationId": "wipeAll",
                "summary": "Remove all stored history",
                "description": (
                    "Schemas stay; new notifications are accepted immediately." + _ADMIN_DESCRIPTION
                ),
                "security": _ADMIN_CREDENTIALS,
                "responses": {
                    "200": _admin_result(
                        "Wiped.", wiped=wiped(True, "Successfully wiped all data")
                    ),
                    **_auth_responses(),
                    "500": _admin_result(
                        "The backend failed.",
                        backend_failure=wiped(False, "Failed to wipe all data: timed out"),
                    ),
                },
            },
        },
    }


def _operational_operations() -> Doc:
    return {
        "/health": {
            "get": {
                "tags": ["health"],
                "operationId": "health",
                "summary": "Liveness probe",
                "responses": {
                    "200": _json_response("Alive.", _schema("Health"), ok={"status": "ok"}),
                },
            },
        },
        "/ready": {
            "get": {
                "tags": ["health"],
                "operationId": "ready",
                "summary": "Readiness probe",
                "description": (
                    "Whether the notification backend is connected and usable (JetStream: "
                    "NATS connected and JetStream answering; in-memory: always). Reads no "
                    "notification. `/health` stays 200 during a backend outage."
                ),
                "responses": {
                    "200": _json_response(
                        "Ready.",
                        _schema("Readiness"),
                        ready={"status": "ready", "backend_connected": True},
                    ),
                    "503": _json_response(
                        "The backend is not connected.",
                        _schema("Readiness"),
                        not_ready={"status": "not_ready", "backend_connected": False},
                    ),
                },
            },
        },
        "/status": {
            "get": {
                "tags": ["health"],
                "operationId": "status",
                "summary": "Public status: version, backend readiness, notification rate",
                "description": (
                    "What the home page and `/console` show. Never authenticated; built at "
                    "most once per second and shared, so polling it costs the backend nothing "
                    "more. Always 200: readiness is in the body (`/ready` is the probe)."
                ),
                "responses": {
                    "200": _json_response(
                        "The status.",
                        _schema("Status"),
                        status={
                            "backend": {"kind": "in_memory", "ready": True},
                            "notifications": {"last_minute": 90, "per_second": 1.5, "total": 1234},
                            "status": "ok",
                            "version": "0.1.0",
                        },
                    ),
                },
            },
        },
        "/": {
            "get": {
                "tags": ["general"],
                "operationId": "home",
                "summary": "Landing page",
                "description": (
                    "`index.html` from `application.static_files_path` with "
                    "`{{SERVER_VERSION}}` replaced, or a built-in page when it is missing."
                ),
                "responses": {
                    "200": _response("HTML page.", "text/html", {"type": "string"}),
                },
            },
        },
        "/console": {
            "get": {
                "tags": ["general"],
                "operationId": "console",
                "summary": "Browser console",
                "description": (
                    "Watch, replay and publish in the browser, with a form built from the "
                    "schemas. Its state is the query string, e.g. "
                    "`?event_type=mars&class=od&step=gte:6&watch=1` (a field is "
                    "`value` or `operator:value`; `from_id`, `from_date`, `to_id`, `to_date`; "
                    "`watch=1` or `replay=1` starts the stream)."
                ),
                "responses": {
                    "200": _response("HTML page.", "text/html", {"type": "string"}),
                },
            },
        },
    }


# ----------------------------------------------------------------------------- components


def _error_schemas() -> Doc:
    def text(description: str) -> Doc:
        return {"type": "string", "description": description}

    return {
        "RequestError": {
            "type": "object",
            "description": (
                "The aviso error object for parse, validation, processing and stream-setup "
                "failures of notify, watch, replay and aggregate, and for the refusals at the "
                "HTTP edge."
            ),
            "required": ["code", "details", "error", "message", "request_id"],
            "additionalProperties": False,
            "properties": {
                "code": {
                    "type": "string",
                    "enum": [
                        "INVALID_JSON",
                        "UNKNOWN_FIELD",
                        "INVALID_REQUEST_SHAPE",
                        *(endpoint.validation_code for endpoint in Endpoint),
                        "NOTIFICATION_PROCESSING_FAILED",
                        "NOTIFICATION_STORAGE_FAILED",
                        "IDEMPOTENCY_KEY_REUSED",
                        "IDEMPOTENCY_KEY_NOT_RETAINED",
                        "SSE_STREAM_INITIALIZATION_FAILED",
                        *SUBSCRIPTION_ERROR_CODES,
                        "PAYLOAD_TOO_LARGE",
                        "HEADER_FIELDS_TOO_LARGE",
                        "REQUEST_TIMEOUT",
                        "TOO_MANY_REQUESTS",
                        "BAD_REQUEST",
                        "HTTP_VERSION_NOT_SUPPORTED",
                    ],
                },
                "error": text("Category label, e.g. `Invalid Watch Request`."),
                "message": text("Top-level failure text."),
                "details": text("Deepest cause; equal to `message` when there is one cause."),
                "request_id": _schema("RequestId"),
                "topic": text("Display topic pattern; only on SSE_STREAM_INITIALIZATION_FAILED."),
            },
        },
        "UnknownEventTypeError": {
            "type": "object",
            "description": "Strict mode: the event type is not configured.",
            "required": ["code", "configured_event_types", "error", "message", "request_id"],
            "additionalProperties": False,
            "properties": {
                "code": {"type": "string", "enum": [UNKNOWN_EVENT_TYPE_CODE]},
                "configured_event_types": {"type": "array", "items": {"type": "string"}},
                "error": {"type": "string", "enum": ["unknown_event_type"]},
                "message": {"type": "string"},
                "request_id": _schema("RequestId"),
            },
        },
        "AuthError": {
            "type": "object",
            "description": (
                "Authentication, authorization, auth-service and destination-plugin failures; "
                "also `INTERNAL_ERROR` for any unexpected server failure and "
                "`SERVICE_UNAVAILABLE` beyond `limits.max_connections`; no `details`."
            ),
            "required": ["code", "error", "message", "request_id"],
            "additionalProperties": False,
            "properties": {
                "code": {
                    "type": "string",
                    "enum": [
                        "UNAUTHORIZED",
                        "FORBIDDEN",
                        "SERVICE_UNAVAILABLE",
                        "INTERNAL_ERROR",
                    ],
                },
                "error": {
                    "type": "string",
                    "enum": [
                        "unauthorized",
                        "forbidden",
                        "service_unavailable",
                        "internal_error",
                    ],
                },
                "message": {"type": "string"},
                "request_id": _schema("RequestId"),
            },
        },
    }


def _event_type_schema(catalog: SchemaCatalog | None) -> Doc:
    if catalog is not None and catalog.strict and catalog.schemas:
        return {
            "type": "string",
            "enum": catalog.event_types,
            "description": "A configured event type (any other is refused: `UNKNOWN_EVENT_TYPE`).",
        }
    return {
        "type": "string",
        "description": "A configured event type or, when no schema is configured (or "
        "`notification_schema_strict` is false), a topic base of your own.",
    }


def _body_schemas(catalog: SchemaCatalog | None) -> Doc:
    nullable_text: Doc = {"type": ["string", "null"]}
    stream_request: Doc = {
        "type": "object",
        "description": _STREAM_REQUEST_DESCRIPTION,
        "required": ["event_type", "identifier"],
        "additionalProperties": False,
        "properties": {
            "event_type": _event_type_schema(catalog),
            "identifier": {
                "type": "object",
                "description": "Field name to value (or, on watch/replay, constraint); "
                "spatial values are `[lat, lon]` arrays or text, see above.",
                "additionalProperties": True,
            },
            "from_id": {
                **nullable_text,
                "description": 'Start sequence (inclusive), e.g. `"57"`.',
            },
            "from_date": {
                **nullable_text,
                "description": "Start time (inclusive), e.g. "
                '`"2026-04-01T00:00:00Z"` or `"1740509903"`.',
            },
            "to_id": {
                **nullable_text,
                "description": 'Replay only: end sequence (inclusive), e.g. `"62"`.',
            },
            "to_date": {
                **nullable_text,
                "description": "Replay only: end time (inclusive, storage time), same forms "
                "as `from_date`.",
            },
            "payload": {"description": "Any JSON value; stored and delivered verbatim."},
        },
    }
    return {
        "RequestId": {
            "type": "string",
            "description": "Equals the `X-Request-ID` response header.",
            "pattern": _UUID_PATTERN,
        },
        "StreamRequest": stream_request,
        "AggregateRequest": {
            **stream_request,
            "description": _AGGREGATE_REQUEST_DESCRIPTION,
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
                    # limits.min_aggregate_debounce_ms, by default.
                    "minimum": 100,
                    "maximum": 60000,
                    "default": 1000,
                    "description": "The window that coalesces changes into one update.",
                },
            },
        },
        "NotificationAccepted": {
            "type": "object",
            "required": ["status", "request_id", "processed_at"],
            "additionalProperties": False,
            "properties": {
                "status": {"type": "string", "enum": ["success"]},
                "request_id": _schema("RequestId"),
                "processed_at": {
                    "type": "string",
                    "pattern": _SECOND_PATTERN,
                    "description": "UTC, whole seconds.",
                },
            },
        },
        "Health": {
            "type": "object",
            "required": ["status"],
            "additionalProperties": False,
            "properties": {"status": {"type": "string", "enum": ["ok"]}},
        },
        "Readiness": {
            "type": "object",
            "required": ["status", "backend_connected"],
            "additionalProperties": False,
            "properties": {
                "status": {"type": "string", "enum": ["ready", "not_ready"]},
                "backend_connected": {"type": "boolean"},
            },
        },
        "Status": {
            "type": "object",
            "required": ["backend", "notifications", "status", "version"],
            "additionalProperties": False,
            "properties": {
                "backend": {
                    "type": "object",
                    "required": ["kind", "ready"],
                    "additionalProperties": False,
                    "properties": {
                        "kind": {"type": "string", "description": "`notification_backend.kind`."},
                        "ready": {"type": "boolean", "description": "As `GET /ready` says."},
                    },
                },
                "notifications": {
                    "type": "object",
                    "required": ["last_minute", "per_second", "total"],
                    "additionalProperties": False,
                    "description": "Notifications stored through this server process.",
                    "properties": {
                        "last_minute": {"type": "integer", "minimum": 0},
                        "per_second": {
                            "type": "number",
                            "minimum": 0,
                            "description": "Average over the last minute.",
                        },
                        "total": {"type": "integer", "minimum": 0, "description": "Since start."},
                    },
                },
                "status": {"type": "string", "enum": ["ok"]},
                "version": {"type": "string"},
            },
        },
        "WipeStreamRequest": {
            "type": "object",
            "required": ["stream_name"],
            "properties": {"stream_name": {"type": "string", "description": "Topic base."}},
        },
        "AdminResult": {
            "type": "object",
            "required": ["success", "message", "request_id"],
            "additionalProperties": False,
            "properties": {
                "success": {"type": "boolean"},
                "message": {"type": "string"},
                "request_id": _schema("RequestId"),
            },
        },
        "AdminNotificationResult": {
            "type": "object",
            "required": ["success", "message", "notification_id", "request_id"],
            "additionalProperties": False,
            "properties": {
                "success": {"type": "boolean"},
                "message": {"type": "string"},
                "notification_id": {"type": "string", "description": "The raw path value."},
                "request_id": _schema("RequestId"),
            },
        },
    }


def _object(required: Doc, optional: Doc | None = None, *, open_: bool = False) -> Doc:
    """An object with ``required`` and ``optional`` properties; no others unless ``open_``."""
    schema: Doc = {
        "type": "object",
        "required": sorted(required),
        "properties": {**required, **(optional or {})},
    }
    if not open_:
        schema["additionalProperties"] = False
    return schema


def _one_of(*names: str) -> Doc:
    return {"oneOf": [_schema(name) for name in names]}


_STREAM_EVENT_DATA: dict[str, Doc] = {
    "live-notification": _one_of("CloudEvent", "ConnectionEstablished"),
    "replay": _schema("CloudEvent"),
    "replay-control": _one_of(
        "ReplayStarted", "ReplayCompleted", "ReplayLimitReached", "HistoryGap"
    ),
    "heartbeat": _schema("Heartbeat"),
    "error": _schema("StreamError"),
    "connection-closing": _schema("ConnectionClosing"),
    "notifications-skipped": _schema("NotificationsSkipped"),
}
_AGGREGATE_EVENT_DATA: dict[str, Doc] = {
    "aggregate": _schema("AggregateCounts"),
    **{
        name: data
        for name, data in _STREAM_EVENT_DATA.items()
        if name in ("replay-control", "heartbeat", "error", "connection-closing")
    },
}


def _sse_event(description: str, data_by_event: dict[str, Doc]) -> Doc:
    """One Server-Sent Event as a JSON Schema 2020-12 reading of ``text/event-stream`` (as
    tools that validate streams read it): its name and its data line, which holds JSON."""
    return {
        **_object(
            {
                "event": {"type": "string", "enum": list(data_by_event)},
                "data": {"type": "string", "contentMediaType": JSON},
            }
        ),
        "description": description,
        "allOf": [
            {
                "if": {"properties": {"event": {"const": name}}},
                "then": {"properties": {"data": {"contentMediaType": JSON, "contentSchema": data}}},
            }
            for name, data in data_by_event.items()
        ],
    }


def _stream_event_schemas() -> Doc:
    text: Doc = {"type": "string"}
    count: Doc = {"type": "integer", "minimum": 0}
    sequence: Doc = {"type": "integer", "minimum": 1}
    second: Doc = {"type": "string", "pattern": _SECOND_PATTERN}
    request_id = _schema("RequestId")
    where = {"timestamp": second, "topic": text}
    nullable_sequence: Doc = {"type": ["integer", "null"], "minimum": 0}
    return {
        "StreamEvent": _sse_event("One event of a watch or replay stream.", _STREAM_EVENT_DATA),
        "AggregateStreamEvent": _sse_event(
            "One event of an aggregate stream.", _AGGREGATE_EVENT_DATA
        ),
        "CloudEvent": _object(
            {
                "data": _object({"identifier": {"type": "object"}}, {"payload": {}}),
                "datacontenttype": {"type": "string", "enum": [JSON]},
                "dataschema": text,
                "id": {**text, "description": "`<event_type>@<sequence>`."},
                "sequence": sequence,
                "source": text,
                "specversion": {"type": "string", "enum": ["1.0"]},
                "time": {**text, "description": "Storage time, RFC 3339 UTC."},
                "type": {"type": "string", "pattern": "^int\\.ecmwf\\.aviso\\."},
            },
            {"publisher": {**text, "description": "The authenticated publisher's username."}},
        ),
        "ConnectionEstablished": _object(
            {
                "type": {"type": "string", "enum": ["connection_established"]},
                "connection_will_close_in_seconds": count,
                "request_id": request_id,
                **where,
            }
        ),
        "ReplayStarted": _object(
            {
                "type": {"type": "string", "enum": ["replay_started"]},
                "from_sequence": nullable_sequence,
                "from_date": {"type": ["string", "null"]},
                "batch_size": count,
                "end_sequence": nullable_sequence,
                "request_id": request_id,
                **where,
            }
        ),
        "ReplayCompleted": _object(
            {"type": {"type": "string", "enum": ["replay_completed"]}, **where}
        ),
        "ReplayLimitReached": _object(
            {
                "type": {"type": "string", "enum": ["notification_replay_limit_reached"]},
                "max_allowed": count,
                "message": text,
                **where,
            }
        ),
        "HistoryGap": _object(
            {
                "type": {"type": "string", "enum": ["history_gap"]},
                "requested_from_sequence": count,
                "first_available_sequence": count,
                **where,
            }
        ),
        "Heartbeat": _object(where),
        "StreamError": _object(
            {"error": text, "message": text, "topic": text, "request_id": request_id},
            {"sequence": sequence, "max_groups": count},
        ),
        "ConnectionClosing": _object(
            {
                "reason": {
                    "type": "string",
                    "enum": [
                        "end_of_stream",
                        "max_duration_reached",
                        "server_shutdown",
                        "aggregate_group_limit_reached",
                    ],
                },
                "message": text,
                "request_id": request_id,
                **where,
            },
            {
                "cause": {
                    "type": "string",
                    "enum": ["slow_consumer", "auth_expired", "access_revoked"],
                },
                "resume_from_sequence": count,
            },
        ),
        "NotificationsSkipped": _object(
            {
                "type": {"type": "string", "enum": ["notifications_skipped"]},
                "skipped": count,
                "first_skipped_sequence": count,
                "last_skipped_sequence": count,
                **where,
            }
        ),
        "AggregateCounts": _object(
            {
                "type": {"type": "string", "enum": ["snapshot", "update"]},
                "group_by": {"type": "array", "items": text},
                "groups": {
                    "type": "array",
                    "items": _object(
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
                "last_sequence": nullable_sequence,
                "request_id": request_id,
                **where,
            }
        ),
    }


def _discovery_schemas() -> Doc:
    return {
        "IdentifierRule": {
            "type": "object",
            "description": (
                "One identifier field: its handler `type`, `required`, the handler's "
                "parameters (unset ones as `null`), an optional `description`, its "
                "`value_kind` and the constraint `operators` it accepts."
            ),
            "required": ["type", "required", "value_kind", "operators"],
            "properties": {
                "type": {
                    "type": "string",
                    "enum": [
                        "StringHandler",
                        "DateHandler",
                        "TimeHandler",
                        "EnumHandler",
                        "IntHandler",
                        "FloatHandler",
                        "ExpverHandler",
                        "PolygonHandler",
                        "PointCloudHandler",
                    ],
                },
                "required": {"type": "boolean"},
                "description": {"type": "string"},
                "max_length": {"type": ["integer", "null"], "description": "StringHandler."},
                "canonical_format": {"type": ["string", "null"], "description": "DateHandler."},
                "values": {
                    "type": ["array", "null"],
                    "items": {"type": "string"},
                    "description": "EnumHandler.",
                },
                "range": {
                    "type": ["array", "null"],
                    "items": {"type": "number"},
                    "minItems": 2,
                    "maxItems": 2,
                    "description": "IntHandler / FloatHandler: `[min, max]`.",
                },
                "default": {"type": ["string", "null"], "description": "ExpverHandler."},
                "max_points": {
                    "type": ["integer", "null"],
                    "description": "PointCloudHandler: points per notification (at most 10000).",
                },
                "value_kind": {
                    "type": "string",
                    "description": (
                        "How to ask for a value: `text`, `integer`, `float`, `date`, `time`, "
                        "`enum`, `polygon` or `point` (a list of `[lat, lon]` points); a "
                        "third-party handler may name another kind, to be read as text."
                    ),
                },
                "operators": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": (
                        'Constraint operators accepted on watch/replay (`{"gte": 6}`), '
                        "sorted; empty: scalar values only."
                    ),
                },
            },
        },
        "SchemaEntry": {
            "type": "object",
            "required": ["identifier", "payload"],
            "additionalProperties": False,
            "properties": {
                "identifier": {"type": "object", "additionalProperties": _schema("IdentifierRule")},
                "payload": {
                    "type": ["object", "null"],
                    "description": "`null` when the schema has no payload block.",
                    "required": ["required"],
                    "properties": {"required": {"type": "boolean"}},
                },
            },
        },
        "SchemaCatalogue": {
            "type": "object",
            "required": ["event_types", "schema", "status", "total_schemas"],
            "additionalProperties": False,
            "properties": {
                "event_types": {"type": "array", "items": {"type": "string"}},
                "schema": {"type": "object", "additionalProperties": _schema("SchemaEntry")},
                "status": {"type": "string", "enum": ["success"]},
                "total_schemas": {"type": "integer", "minimum": 0},
                "message": {
                    "type": "string",
                    "description": "Only when no schema is configured at all.",
                },
            },
        },
        "SchemaDetail": {
            "type": "object",
            "required": ["event_type", "schema", "status"],
            "additionalProperties": False,
            "properties": {
                "event_type": {"type": "string"},
                "schema": _schema("SchemaEntry"),
                "status": {"type": "string", "enum": ["success"]},
            },
        },
        "SchemaNotFound": {
            "type": "object",
            "required": ["message", "request_id", "status"],
            "additionalProperties": False,
            "properties": {
                "available_types": {"type": "array", "items": {"type": "string"}},
                "message": {"type": "string"},
                "request_id": _schema("RequestId"),
                "status": {"type": "string", "enum": ["error"]},
            },
        },
    }


def _shared_responses() -> Doc:
    def auth_error(code: str, label: str, message: str) -> Doc:
        return {"code": code, "error": label, "message": message, "request_id": _RID_ADMIN}

    return {
        "Unauthorized": _response(
            "Missing, malformed, invalid or expired credentials where they are required "
            "(admin paths, protected streams). Only when auth is enabled.",
            JSON,
            _schema("AuthError"),
            _examples(
                missing_header=auth_error(
                    "UNAUTHORIZED", "unauthorized", "Authorization header is required"
                ),
                protected_stream=auth_error(
                    "UNAUTHORIZED", "unauthorized", "Authentication is required for this stream"
                ),
                invalid_token=auth_error(
                    "UNAUTHORIZED", "unauthorized", "Invalid or expired token"
                ),
            ),
            headers={"WWW-Authenticate": _ref("headers", "WWW-Authenticate")},
        ),
        "Forbidden": _response(
            "Authenticated but not allowed (roles, admin, destination plugin).",
            JSON,
            _schema("AuthError"),
            _examples(
                not_admin=auth_error(
                    "FORBIDDEN", "forbidden", "User does not have required administrative role"
                ),
                read_denied=auth_error(
                    "FORBIDDEN",
                    "forbidden",
                    "User does not have required read role for this stream",
                ),
            ),
        ),
        "ServiceUnavailable": _response(
            "The authentication service or the destination service could not reach a verdict, "
            "or the server holds more than `limits.max_connections` connections (then with "
            "`Retry-After`).",
            JSON,
            _schema("AuthError"),
            _examples(
                auth_service=auth_error(
                    "SERVICE_UNAVAILABLE",
                    "service_unavailable",
                    "Authentication service temporarily unavailable",
                )
            ),
        ),
        "PayloadTooLarge": _response(
            "Body larger than `limits.max_body_bytes` (default 256 KiB), declared or streamed "
            "(chunked); answered with `Connection: close`, the rest of the body unread.",
            JSON,
            _schema("RequestError"),
            _examples(
                too_large=_request_error(
                    "PAYLOAD_TOO_LARGE",
                    "Payload Too Large",
                    "Request body exceeds the limit of 262144 bytes",
                    _RID_NOTIFY,
                )
            ),
        ),
    }


def _headers() -> Doc:
    return {
        "X-Request-ID": {
            "description": "A fresh server-generated UUID; a client-supplied value is ignored.",
            "required": True,
            "schema": {"type": "string", "pattern": _UUID_PATTERN},
        },
        "WWW-Authenticate": {
            "description": "`Bearer`, plus a second `Basic` field in direct mode.",
            "required": True,
            "schema": {"type": "string"},
        },
    }


_API_DESCRIPTION = """\
Notifications for data-driven workflows: producers **notify**, consumers **watch** live
streams or **replay** history over Server-Sent Events.

* Every response carries `X-Request-ID`; JSON bodies that have a `request_id` repeat it.
* Paths are exact: no trailing-slash redirects.
* Authentication, when enabled, applies to `/api/v1` except the schema routes.
* Limits at the HTTP edge, on every route (each answer the aviso error object, then the
  connection is closed): a body over `limits.max_body_bytes` gets 413 `PAYLOAD_TOO_LARGE`; a
  request head over `limits.max_header_bytes` gets 431 `HEADER_FIELDS_TOO_LARGE`; a head not
  completed within `limits.header_timeout_seconds`, or a body not completed within
  `limits.body_timeout_seconds` of its head, gets 408 `REQUEST_TIMEOUT`; on a connection
  accepted beyond `limits.max_connections` open connections, 503 `SERVICE_UNAVAILABLE` with
  `Retry-After`; beyond `limits.max_connections_per_client` (off by default) from one client
  address, 429 `TOO_MANY_REQUESTS` with `Retry-After` (`GET /health` and `/ready` are
  answered over both caps; such a connection must send its head within 2 s, and one past a
  small reserve is reset). A request the HTTP parser cannot read gets 400 `BAD_REQUEST`, a
  request line of an HTTP version other than 1.0 or 1.1 505 `HTTP_VERSION_NOT_SUPPORTED`.
  A connection that sends nothing for `limits.idle_timeout_seconds` is closed. Any
  unexpected failure is 500 `INTERNAL_ERROR`.
"""


_RID_SUBSCRIPTION = "3d9f1b2e-8c47-4f0a-9d6e-2b1c0a9f8e7d"

SUBSCRIPTION_ERROR_CODES = (
    "INVALID_SUBSCRIPTION_NAME",
    "SUBSCRIPTION_NOT_FOUND",
    "SUBSCRIPTION_CONFLICT",
    "TOO_MANY_SUBSCRIPTIONS",
    "UNSUPPORTED_DELIVERY",
    "INVALID_ACKNOWLEDGEMENT",
)

_SUBSCRIPTION_DESCRIPTION = (
    " With auth enabled a subscription belongs to the user who created it (anonymous callers "
    "get 401, other users 404); with auth disabled all callers share one namespace. Kept by "
    "this server process (the in-memory backend's lifetime)."
)


def _subscription_error(status_description: str, code: str, label: str, message: str) -> Doc:
    return _json_response(
        status_description,
        _schema("RequestError"),
        **{code.lower(): _request_error(code, label, message, _RID_SUBSCRIPTION)},
    )


def _name_parameter() -> Doc:
    return {
        "name": "name",
        "in": "path",
        "required": True,
        "description": "Letters, digits, `-`, `_` and `.`, at most 64 (not `.` or `..`).",
        "schema": {"type": "string"},
        "example": "rhine-gauges",
    }


def _subscription_example(event_type: str, identifier: Mapping[str, Any], pending: bool) -> Doc:
    view: Doc = {
        "name": "rhine-gauges",
        "event_type": event_type,
        "identifier": dict(identifier),
        "from_id": None,
        "from_date": None,
        "delivery": None,
        "deliveries": None,
        "created_at": "2026-04-01T06:00:00Z",
        "start_sequence": 58,
        "acknowledged_sequence": 61,
    }
    if pending:
        view |= {"pending": 3, "lag_seconds": 12.5}
    return view


def _subscription_operations(examples: RequestExamples) -> Doc:
    first = next(iter(examples.watch.values()), {"event_type": examples.event_type})
    event_type = first.get("event_type", examples.event_type)
    identifier = first.get("identifier", {})
    state = _subscription_example(event_type, identifier, pending=True)
    invalid_name = _subscription_error(
        "The name breaks the naming rule.",
        "INVALID_SUBSCRIPTION_NAME",
        "Invalid Subscription Name",
        "subscription name 'a/b' must be 1 to 64 letters, digits, '-', '_' or '.' "
        "(not '.' or '..')",
    )
    not_found = _subscription_error(
        "No subscription of that name belongs to the caller.",
        "SUBSCRIPTION_NOT_FOUND",
        "Subscription Not Found",
        "no subscription named 'rhine-gauges'",
    )
    name = [_name_parameter()]
    label = Endpoint.SUBSCRIPTION.label
    return {
        "/api/v1/subscriptions": {
            "get": {
                "tags": ["subscriptions"],
                "operationId": "listSubscriptions",
                "summary": "List the caller's subscriptions",
                "description": "Definitions and cursors, by name; `pending` and "
                "`lag_seconds` are given by `GET /api/v1/subscriptions/{name}`."
                + _SUBSCRIPTION_DESCRIPTION,
                "security": _STREAM_CREDENTIALS,
                "responses": {
                    "200": _json_response(
                        "The caller's subscriptions.",
                        _schema("SubscriptionList"),
                        one={
                            "subscriptions": [_subscription_example(event_type, identifier, False)],
                            "request_id": _RID_SUBSCRIPTION,
                        },
                    ),
                    **_auth_responses(),
                },
            }
        },
        "/api/v1/subscriptions/{name}": {
            "put": {
                "tags": ["subscriptions"],
                "operationId": "putSubscription",
                "summary": "Create a subscription (or confirm an identical one)",
                "description": "The body is a watch's: `event_type`, `identifier` (values, "
                "wildcards, constraints, `polygon` or `point`, validated exactly as a watch "
                "validates them) and optionally `from_id` or `from_date` (default: from the "
                "next notification stored). The stream's read roles and authorisers are "
                "checked now and whenever its events are read. With a `delivery` (say "
                '`{"kind": "webhook", "url": "https://..."}`) the server pushes each matching '
                "notification itself, in sequence order, with retries and dead letters; the "
                "answer that creates it is the only one to show a generated secret."
                + _SUBSCRIPTION_DESCRIPTION,
                "security": _STREAM_CREDENTIALS,
                "parameters": name,
                "requestBody": _request_body("SubscriptionRequest", {"watch": first}),
                "responses": {
                    "200": _json_response(
                        "The same definition was put again: nothing changed.",
                        _schema("Subscription"),
                        existing=state,
                    ),
                    "201": _json_response(
                        "Created.",
                        _schema("Subscription"),
                        created=_subscription_example(event_type, identifier, True)
                        | {"acknowledged_sequence": None, "pending": 0, "lag_seconds": None},
                    ),
                    "400": _json_response(
                        "The name breaks the naming rule, the body could not be parsed or "
                        "failed a watch's validation, names a `payload`, a `delivery` of no "
                        "delivery kind this server has (`UNSUPPORTED_DELIVERY`) or one its kind "
                        "refuses (a URL it may not reach), or its definition is over "
                        "`subscriptions.max_definition_bytes` (16384).",
                        {"oneOf": [_schema("RequestError"), _schema("UnknownEventTypeError")]},
                        validation=_request_error(
                            Endpoint.SUBSCRIPTION.validation_code,
                            label,
                            "Required field 'station' missing for watch operation",
                            _RID_SUBSCRIPTION,
                        ),
                        unsupported_delivery=_request_error(
                            "UNSUPPORTED_DELIVERY",
                            "Unsupported Delivery",
                            "'delivery' must be an object naming a delivery kind: its 'kind' "
                            "must be one of 'webhook'",
                            _RID_SUBSCRIPTION,
                        ),
                    ),
                    **_auth_responses(),
                    "409": _subscription_error(
                        "The name holds a different definition: delete it first.",
                        "SUBSCRIPTION_CONFLICT",
                        "Subscription Conflict",
                        "subscription 'rhine-gauges' exists with a different definition: "
                        "delete it first",
                    ),
                    "413": _ref("responses", "PayloadTooLarge"),
                    "429": _subscription_error(
                        "The caller holds `subscriptions.max_per_user` subscriptions (100), or "
                        "the server `subscriptions.max_total` (10000).",
                        "TOO_MANY_SUBSCRIPTIONS",
                        "Too Many Subscriptions",
                        "at most 100 subscriptions per user (subscriptions.max_per_user): "
                        "delete one first",
                    ),
                },
            },
            "get": {
                "tags": ["subscriptions"],
                "operationId": "getSubscription",
                "summary": "A subscription's definition and state",
                "description": "`pending` counts the matching notifications after the "
                "cursor (exactly); `lag_seconds` is the age of the oldest of them."
                + _SUBSCRIPTION_DESCRIPTION,
                "security": _STREAM_CREDENTIALS,
                "parameters": name,
                "responses": {
                    "200": _json_response("The subscription.", _schema("Subscription"), one=state),
                    "400": invalid_name,
                    **_auth_responses(),
                    "404": not_found,
                },
            },
            "delete": {
                "tags": ["subscriptions"],
                "operationId": "deleteSubscription",
                "summary": "Delete a subscription",
                "description": "Its open event streams end with `end_of_stream`."
                + _SUBSCRIPTION_DESCRIPTION,
                "security": _STREAM_CREDENTIALS,
                "parameters": name,
                "responses": {
                    "204": _response("Deleted."),
                    "400": invalid_name,
                    **_auth_responses(),
                    "404": not_found,
                },
            },
        },
        "/api/v1/subscriptions/{name}/events": {
            "get": {
                "tags": ["subscriptions"],
                "operationId": "subscriptionEvents",
                "summary": "Follow a subscription over Server-Sent Events",
                "description": "A watch from the subscription's cursor: its notifications "
                "after the last acknowledged one (history first, then live) in the frames a "
                "watch sends, each notification event with `id: <sequence>`. A request "
                "carrying `Last-Event-ID: N` (as a reconnecting `EventSource` does) first "
                "acknowledges up to N, as `POST .../ack` would. Several streams of one "
                "subscription may be open at once; each reads from the cursor."
                + _SUBSCRIPTION_DESCRIPTION,
                "security": _STREAM_CREDENTIALS,
                "parameters": [
                    *name,
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "description": "Acknowledge up to this sequence first.",
                        "schema": {"type": "string", "pattern": "^[0-9]{1,20}$"},
                    },
                ],
                "responses": {
                    "200": _sse_response(
                        _SSE_DESCRIPTION, "SubscriptionStreamEvent", **_SUBSCRIPTION_TRANSCRIPT
                    ),
                    "400": _json_response(
                        "The name breaks the naming rule, or `Last-Event-ID` is not a "
                        "sequence this subscription delivered.",
                        _schema("RequestError"),
                        beyond=_request_error(
                            "INVALID_ACKNOWLEDGEMENT",
                            "Invalid Acknowledgement",
                            "cannot acknowledge sequence 70: this subscription delivered up to 64",
                            _RID_SUBSCRIPTION,
                        ),
                    ),
                    **_auth_responses(),
                    "404": not_found,
                    "500": _server_error(
                        "The stream could not be set up.",
                        stream_setup_failed={
                            "code": "SSE_STREAM_INITIALIZATION_FAILED",
                            "details": "connection refused",
                            "error": "SSE stream creation failed",
                            "message": "Failed to create stream consumer",
                            "request_id": _RID_SUBSCRIPTION,
                            "topic": "gauge.rhine.*.*",
                        },
                    ),
                },
            }
        },
        "/api/v1/subscriptions/{name}/dead-letters": {
            "get": {
                "tags": ["subscriptions"],
                "operationId": "subscriptionDeadLetters",
                "summary": "The notifications a push subscription gave up on",
                "description": "Oldest first, at most 1000 per subscription (`dropped` counts "
                "those forgotten beyond it); always empty for a subscription pulled over "
                "Server-Sent Events." + _SUBSCRIPTION_DESCRIPTION,
                "security": _STREAM_CREDENTIALS,
                "parameters": name,
                "responses": {
                    "200": _json_response(
                        "Its dead letters.",
                        _schema("DeadLetters"),
                        one={
                            "dead_letters": [
                                {
                                    "sequence": 63,
                                    "attempts": 7,
                                    "error": "the receiver answered 503",
                                    "dead_lettered_at": "2026-04-02T23:10:02Z",
                                }
                            ],
                            "dropped": 0,
                            "request_id": _RID_SUBSCRIPTION,
                        },
                    ),
                    "400": invalid_name,
                    **_auth_responses(),
                    "404": not_found,
                },
            }
        },
        "/api/v1/subscriptions/{name}/dead-letters/redrive": {
            "post": {
                "tags": ["subscriptions"],
                "operationId": "redriveSubscriptionDeadLetters",
                "summary": "Deliver a push subscription's dead letters again",
                "description": "Each dead letter still stored is delivered again (with a fresh "
                "retry schedule), in sequence order, before the subscription's next "
                "notifications; the list is emptied. A disabled subscription (its receiver "
                "answered gone) keeps them and answers 0." + _SUBSCRIPTION_DESCRIPTION,
                "security": _STREAM_CREDENTIALS,
                "parameters": name,
                "responses": {
                    "200": _json_response(
                        "How many were queued.",
                        _schema("Redrive"),
                        one={"redriven": 1, "request_id": _RID_SUBSCRIPTION},
                    ),
                    "400": invalid_name,
                    **_auth_responses(),
                    "404": not_found,
                },
            }
        },
        "/api/v1/subscriptions/{name}/ack": {
            "post": {
                "tags": ["subscriptions"],
                "operationId": "acknowledgeSubscription",
                "summary": "Move a subscription's cursor",
                "description": "The cursor moves to `sequence`, never backwards (a lower "
                "one changes nothing); a sequence this subscription has not delivered yet is "
                "refused." + _SUBSCRIPTION_DESCRIPTION,
                "security": _STREAM_CREDENTIALS,
                "parameters": name,
                "requestBody": _request_body(
                    "AcknowledgeRequest",
                    # 0 acknowledges nothing: valid before anything was delivered.
                    {"nothing_yet": {"sequence": 0}},
                ),
                "responses": {
                    "200": _json_response("The new state.", _schema("Subscription"), one=state),
                    "400": _json_response(
                        "The name breaks the naming rule, the body is not JSON or not "
                        '`{"sequence": N}`, or N was not delivered yet.',
                        _schema("RequestError"),
                        beyond=_request_error(
                            "INVALID_ACKNOWLEDGEMENT",
                            "Invalid Acknowledgement",
                            "cannot acknowledge sequence 70: this subscription delivered up to 64",
                            _RID_SUBSCRIPTION,
                        ),
                    ),
                    **_auth_responses(),
                    "404": not_found,
                    "413": _ref("responses", "PayloadTooLarge"),
                },
            }
        },
    }


_SUBSCRIPTION_TRANSCRIPT = {
    "catching_up": (
        "event: replay-control\n"
        'data: {"batch_size":100,"end_sequence":null,"from_date":null,"from_sequence":62,'
        '"request_id":"' + _RID_SUBSCRIPTION + '","timestamp":"2026-04-02T08:05:12Z",'
        '"topic":"gauge.rhine.*.*","type":"replay_started"}\n\n'
        "event: replay\n"
        "id: 62\n"
        'data: {"data":{"identifier":{"basin":"rhine","date":"20260402","level":"6"},'
        '"payload":{"reading_cm":655}},"datacontenttype":"application/json",'
        '"dataschema":"https://aviso.example.org/schema/river_gauge","id":"river_gauge@62",'
        '"sequence":62,"source":"https://aviso.example.org","specversion":"1.0",'
        '"time":"2026-04-02T08:00:17.204Z","type":"int.ecmwf.aviso.river_gauge"}\n\n'
        "event: replay-control\n"
        'data: {"timestamp":"2026-04-02T08:05:12Z","topic":"gauge.rhine.*.*",'
        '"type":"replay_completed"}\n\n'
        "event: heartbeat\n"
        'data: {"timestamp":"2026-04-02T08:05:12Z","topic":"gauge.rhine.*.*"}\n\n'
    )
}


def _subscription_schemas(catalog: SchemaCatalog | None) -> Doc:
    sequence: Doc = {"type": "integer", "minimum": 1}
    nullable_text: Doc = {"type": ["string", "null"]}
    definition: Doc = {
        "name": {"type": "string"},
        "event_type": {"type": "string"},
        "identifier": {"type": "object", "additionalProperties": True},
        "from_id": nullable_text,
        "from_date": nullable_text,
        "delivery": {
            "type": ["object", "null"],
            "required": ["kind"],
            "properties": {"kind": {"type": "string"}},
            "description": "null: pulled over Server-Sent Events; else the delivery as its kind "
            "shows it (secrets only in the answer that created it).",
        },
        "deliveries": {
            "oneOf": [
                {"type": "null"},
                _object(
                    {
                        "status": {"enum": ["active", "disabled", "forbidden"]},
                        "delivered": {"type": "integer", "minimum": 0},
                        "retrying": {"type": "integer", "minimum": 0},
                        "dead_lettered": {"type": "integer", "minimum": 0},
                        "last_error": {
                            "oneOf": [
                                {"type": "null"},
                                _object(
                                    {
                                        "sequence": sequence,
                                        "attempt": {"type": "integer", "minimum": 1},
                                        "error": nullable_text,
                                        "at": {"type": "string", "pattern": _SECOND_PATTERN},
                                    }
                                ),
                            ]
                        },
                    }
                ),
            ],
            "description": "A push subscription's delivery counts (`disabled`: its receiver "
            "answered gone); null for a pulled one.",
        },
        "created_at": {"type": "string", "pattern": _SECOND_PATTERN},
        "start_sequence": {
            **sequence,
            "description": "The first sequence it delivers (`from_id`, the first stored at "
            "or after `from_date`, or the first stored after its creation).",
        },
        "acknowledged_sequence": {
            "type": ["integer", "null"],
            "minimum": 0,
            "description": "The cursor; null before the first acknowledgement.",
        },
    }
    stream_request = _body_schemas(catalog)["StreamRequest"]
    stream_event = _sse_event(
        "One event of a subscription's stream: a watch's events; notification events carry "
        "`id` (the sequence).",
        _STREAM_EVENT_DATA,
    )
    stream_event["properties"]["id"] = {"type": "string", "pattern": "^[0-9]+$"}
    return {
        "SubscriptionRequest": {
            "type": "object",
            "description": "A watch's body (`to_id`, `to_date` and `payload` are refused), "
            "plus an optional `delivery`: an object whose `kind` names a delivery kind "
            "(`webhook`: `url` and optionally `secret`).",
            "required": ["event_type", "identifier"],
            "additionalProperties": False,
            "properties": {
                **{
                    key: value
                    for key, value in stream_request["properties"].items()
                    if key in ("event_type", "identifier", "from_id", "from_date")
                },
                "delivery": {
                    "type": ["object", "null"],
                    "required": ["kind"],
                    "properties": {"kind": {"type": "string"}},
                },
            },
        },
        "AcknowledgeRequest": _object({"sequence": {"type": "integer", "minimum": 0}}),
        "SubscriptionDefinition": _object(definition),
        "Subscription": _object(
            {
                **definition,
                "pending": {"type": "integer", "minimum": 0},
                "lag_seconds": {"type": ["number", "null"], "minimum": 0},
            }
        ),
        "SubscriptionList": _object(
            {
                "subscriptions": {"type": "array", "items": _schema("SubscriptionDefinition")},
                "request_id": _schema("RequestId"),
            }
        ),
        "SubscriptionStreamEvent": stream_event,
        "DeadLetters": _object(
            {
                "dead_letters": {
                    "type": "array",
                    "items": _object(
                        {
                            "sequence": sequence,
                            "attempts": {"type": "integer", "minimum": 1},
                            "error": nullable_text,
                            "dead_lettered_at": {"type": "string", "pattern": _SECOND_PATTERN},
                        }
                    ),
                },
                "dropped": {"type": "integer", "minimum": 0},
                "request_id": _schema("RequestId"),
            }
        ),
        "Redrive": _object(
            {"redriven": {"type": "integer", "minimum": 0}, "request_id": _schema("RequestId")}
        ),
    }


def openapi_document(
    version: str, catalog: SchemaCatalog | None = None, subscriptions: bool = True
) -> dict[str, Any]:
    """The OpenAPI 3.1 document for server ``version`` serving ``catalog``'s event types
    (none: no schema configured), as JSON-serialisable data; ``subscriptions``: whether the
    subscription routes are served."""
    examples = request_examples(catalog)
    # Deep-copied so that a caller editing the result cannot alter the module's constants.
    return copy.deepcopy(
        {
            "openapi": "3.1.0",
            "info": {
                "title": "Aviso Notification Service API",
                "version": version,
                "description": _API_DESCRIPTION,
                "license": {
                    "name": "Apache-2.0",
                    "url": "https://www.apache.org/licenses/LICENSE-2.0",
                },
            },
            "tags": [
                {"name": "health", "description": "Liveness and readiness."},
                {"name": "general", "description": "Landing page."},
                {"name": "schema", "description": "Schema discovery."},
                {"name": "notification", "description": "Publishing notifications."},
                {
                    "name": "streaming",
                    "description": "Watch, replay and aggregate over Server-Sent Events.",
                },
                {"name": "admin", "description": "Deleting stored notifications."},
                {
                    "name": "subscriptions",
                    "description": "Named subscriptions whose cursor the server keeps.",
                },
            ],
            "paths": {
                "/api/v1/notification": {"post": _notify_operation(examples)},
                "/api/v1/watch": {"post": _watch_operation(examples)},
                "/api/v1/replay": {"post": _replay_operation(examples)},
                "/api/v1/aggregate": {"post": _aggregate_operation(examples)},
                **_schema_operations(catalog, examples.event_type),
                **_admin_operations(examples.event_type),
                **(_subscription_operations(examples) if subscriptions else {}),
                **_operational_operations(),
            },
            "components": {
                "schemas": {
                    **_body_schemas(catalog),
                    **_error_schemas(),
                    **_discovery_schemas(),
                    **_stream_event_schemas(),
                    **_subscription_schemas(catalog),
                },
                "responses": _shared_responses(),
                "headers": _headers(),
                "securitySchemes": {
                    "bearer_jwt": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                    "basic": {"type": "http", "scheme": "basic"},
                },
            },
        }
    )
