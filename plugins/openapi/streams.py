"""Notify, watch and replay: their operations and the events their streams send."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aviso_builtins.openapi.common import RID_NOTIFY, RID_REPLAY, RID_WATCH
from aviso_builtins.openapi.examples import RequestExamples
from aviso_plugins.openapi import (
    FOLLOW_IN_CONSOLE,
    JSON,
    SECOND_PATTERN,
    STREAM_CREDENTIALS,
    Doc,
    EndpointErrors,
    auth_responses,
    bad_request,
    examples_of,
    json_response,
    object_schema,
    one_of,
    ref,
    request_body,
    request_error,
    response_object,
    schema_ref,
    server_error,
    sse_event,
    stream_operation,
    unknown_event_type,
)

# --------------------------------------------------------------------------- request bodies

STREAM_REQUEST_DESCRIPTION = """\
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


# ------------------------------------------------------------------------------ SSE streams

SSE_DESCRIPTION = """\
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
    'data: {"connection_will_close_in_seconds":900,"request_id":"' + RID_WATCH + '",'
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
    '"request_id":"' + RID_WATCH + '","timestamp":"2026-04-02T08:15:00Z",'
    '"topic":"gauge.rhine.*.*"}\n\n'
)

_REPLAY_TRANSCRIPT = (
    "event: replay-control\n"
    'data: {"batch_size":100,"end_sequence":null,"from_date":null,"from_sequence":57,'
    '"request_id":"' + RID_REPLAY + '","timestamp":"2026-04-02T08:05:12Z",'
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
    '"request_id":"' + RID_REPLAY + '","timestamp":"2026-04-02T08:05:13Z",'
    '"topic":"gauge.rhine.*.*"}\n\n'
)


# ---------------------------------------------------------------------------------- paths


def notify_operation(examples: RequestExamples, endpoint: EndpointErrors) -> Doc:
    label = endpoint.label
    return {
        "tags": ["notification"],
        "operationId": "notify",
        "summary": "Publish a notification",
        "description": (
            "Validates the identifier against the event type's schema (every declared field "
            "must be present), stores the notification and fans it out to matching watches. "
            "The success body does not reveal the assigned sequence."
        ),
        "security": STREAM_CREDENTIALS,
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
        "requestBody": request_body("StreamRequest", examples.notify),
        "responses": {
            "200": response_object(
                "Stored: this notification is the one stored (under its Idempotency-Key, "
                "if it has one).",
                JSON,
                schema_ref("NotificationAccepted"),
                examples_of(
                    accepted={
                        "status": "success",
                        "request_id": RID_NOTIFY,
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
            "400": bad_request(
                missing_field=request_error(
                    endpoint.validation_code,
                    label,
                    "Required field 'level' missing for notify operation",
                    RID_NOTIFY,
                ),
                invalid_json=request_error(
                    "INVALID_JSON",
                    label,
                    "JSON parsing failed: expected value at line 1 column 1",
                    RID_NOTIFY,
                ),
                unknown_event_type=unknown_event_type(RID_NOTIFY, examples.event_types),
            ),
            **auth_responses(),
            "413": ref("responses", "PayloadTooLarge"),
            "422": json_response(
                "The Idempotency-Key was used inside the duplicate window for a different "
                "notification (another topic, payload or identifier), or the notification "
                "stored under it is no longer retained, so this one cannot be confirmed as "
                "its re-send; nothing was stored.",
                schema_ref("RequestError"),
                key_reused=request_error(
                    "IDEMPOTENCY_KEY_REUSED",
                    "Idempotency Key Reused",
                    "Idempotency-Key 'order-42' was already used for a different notification",
                    RID_NOTIFY,
                ),
                key_not_retained=request_error(
                    "IDEMPOTENCY_KEY_NOT_RETAINED",
                    "Idempotency Key Not Retained",
                    "The notification stored under Idempotency-Key 'order-42' is no longer "
                    "retained; nothing was stored (send a new notification with a new key)",
                    RID_NOTIFY,
                ),
            ),
            "500": server_error(
                "Server-side processing or storage failed.",
                storage_failed={
                    "code": "NOTIFICATION_STORAGE_FAILED",
                    "details": "backend unavailable",
                    "error": "Notification Storage Failed",
                    "message": "Failed to store notification",
                    "request_id": RID_NOTIFY,
                },
            ),
        },
    }


def _stream_operation(
    endpoint: EndpointErrors,
    summary: str,
    description: str,
    request_id: str,
    request_examples: Mapping[str, Any],
    event_types: list[str],
    invalid_message: str,
    transcripts: dict[str, str],
) -> Doc:
    validation = request_error(
        endpoint.validation_code, endpoint.label, invalid_message, request_id
    )
    return stream_operation(
        endpoint.name,
        summary,
        description,
        request_id,
        request_examples,
        event_types,
        validation,
        transcripts,
        sse_description=SSE_DESCRIPTION,
    )


def watch_operation(examples: RequestExamples, endpoint: EndpointErrors) -> Doc:
    return _stream_operation(
        endpoint,
        "Watch live notifications (optionally catching up first)",
        "Without a cursor: a live-only stream opening with `connection_established`. With "
        "`from_id` or `from_date`: history from the cursor, then live, without gaps or "
        "duplicates. Heartbeats every `sse_heartbeat_interval_sec`; the stream closes after "
        "`connection_max_duration_sec`." + FOLLOW_IN_CONSOLE,
        RID_WATCH,
        examples.watch,
        examples.event_types,
        "Cannot specify both identifier.polygon and identifier.point. "
        "Provide only one spatial filter.",
        {"live_only": _LIVE_WATCH_TRANSCRIPT},
    )


def replay_operation(examples: RequestExamples, endpoint: EndpointErrors) -> Doc:
    return _stream_operation(
        endpoint,
        "Replay stored notifications",
        "Streams matching history from `from_id` or `from_date` (one is required) up to "
        "`to_id` / `to_date` (optional; otherwise the last notification stored when the "
        "replay starts) in ascending sequence order, then closes with `end_of_stream`. No "
        "heartbeats, no duration limit." + FOLLOW_IN_CONSOLE,
        RID_REPLAY,
        examples.replay,
        examples.event_types,
        "Replay endpoint requires either from_id or from_date parameter. Use from_id for "
        "sequence-based replay or from_date for time-based replay.",
        {"two_notifications": _REPLAY_TRANSCRIPT},
    )


STREAM_EVENT_DATA: dict[str, Doc] = {
    "live-notification": one_of("CloudEvent", "ConnectionEstablished"),
    "replay": schema_ref("CloudEvent"),
    "replay-control": one_of(
        "ReplayStarted", "ReplayCompleted", "ReplayLimitReached", "HistoryGap"
    ),
    "heartbeat": schema_ref("Heartbeat"),
    "error": schema_ref("StreamError"),
    "connection-closing": schema_ref("ConnectionClosing"),
    "notifications-skipped": schema_ref("NotificationsSkipped"),
}


def stream_event_schemas() -> Doc:
    text: Doc = {"type": "string"}
    count: Doc = {"type": "integer", "minimum": 0}
    sequence: Doc = {"type": "integer", "minimum": 1}
    second: Doc = {"type": "string", "pattern": SECOND_PATTERN}
    request_id = schema_ref("RequestId")
    where = {"timestamp": second, "topic": text}
    nullable_sequence: Doc = {"type": ["integer", "null"], "minimum": 0}
    return {
        "StreamEvent": sse_event("One event of a watch or replay stream.", STREAM_EVENT_DATA),
        "CloudEvent": object_schema(
            {
                "data": object_schema({"identifier": {"type": "object"}}, {"payload": {}}),
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
        "ConnectionEstablished": object_schema(
            {
                "type": {"type": "string", "enum": ["connection_established"]},
                "connection_will_close_in_seconds": count,
                "request_id": request_id,
                **where,
            }
        ),
        "ReplayStarted": object_schema(
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
        "ReplayCompleted": object_schema(
            {"type": {"type": "string", "enum": ["replay_completed"]}, **where}
        ),
        "ReplayLimitReached": object_schema(
            {
                "type": {"type": "string", "enum": ["notification_replay_limit_reached"]},
                "max_allowed": count,
                "message": text,
                **where,
            }
        ),
        "HistoryGap": object_schema(
            {
                "type": {"type": "string", "enum": ["history_gap"]},
                "requested_from_sequence": count,
                "first_available_sequence": count,
                **where,
            }
        ),
        "Heartbeat": object_schema(where),
        "StreamError": object_schema(
            {"error": text, "message": text, "topic": text, "request_id": request_id},
            {"sequence": sequence, "max_groups": count},
        ),
        "ConnectionClosing": object_schema(
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
        "NotificationsSkipped": object_schema(
            {
                "type": {"type": "string", "enum": ["notifications_skipped"]},
                "skipped": count,
                "first_skipped_sequence": count,
                "last_skipped_sequence": count,
                **where,
            }
        ),
    }
