"""The subscription routes in the OpenAPI document (hook ``aviso_openapi``): operations,
schemas, the tag and the error codes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aviso_plugins.openapi import (
    SECOND_PATTERN,
    STREAM_CREDENTIALS,
    Doc,
    OpenApiContext,
    OpenApiContribution,
    auth_responses,
    json_response,
    object_schema,
    ref,
    request_body,
    request_error,
    response_object,
    schema_ref,
    server_error,
    settings_stated,
    sse_event,
    sse_response,
)
from aviso_plugins.service import ApiRefusal, ServiceAccess

ERROR_CODES = (
    "INVALID_SUBSCRIPTION_NAME",
    "SUBSCRIPTION_NOT_FOUND",
    "SUBSCRIPTION_CONFLICT",
    "TOO_MANY_SUBSCRIPTIONS",
    "UNSUPPORTED_DELIVERY",
    "INVALID_ACKNOWLEDGEMENT",
)
"""The codes of the refusals the routes raise beside a watch's."""


def contribution(
    service: ServiceAccess, context: OpenApiContext, endpoint: str, settings: Mapping[str, Any]
) -> OpenApiContribution:
    """The subscriptions' part of the document; ``endpoint`` names the validation errors of
    their bodies, and the text states the ``subscriptions`` section's ``settings``."""
    invalid = service.validation_error(
        endpoint, "Required field 'station' missing for watch operation"
    )
    sections = {"subscriptions": settings}
    return OpenApiContribution(
        paths=settings_stated(_operations(context, invalid), sections),
        schemas=settings_stated(_schemas(context), sections),
        tags=[
            {
                "name": "subscriptions",
                "description": "Named subscriptions whose cursor the server keeps.",
            }
        ],
        error_codes=ERROR_CODES,
    )


_RID_SUBSCRIPTION = "3d9f1b2e-8c47-4f0a-9d6e-2b1c0a9f8e7d"


_SUBSCRIPTION_DESCRIPTION = (
    " With auth enabled a subscription belongs to the user who created it (anonymous callers "
    "get 401, other users 404); with auth disabled all callers share one namespace. Kept by "
    "this server process (the in-memory backend's lifetime)."
)


def _subscription_error(status_description: str, code: str, label: str, message: str) -> Doc:
    return json_response(
        status_description,
        schema_ref("RequestError"),
        **{code.lower(): request_error(code, label, message, _RID_SUBSCRIPTION)},
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


def _operations(context: OpenApiContext, invalid: ApiRefusal) -> Doc:
    first: Mapping[str, Any] = next(iter(context.examples["watch"].values()), {})
    event_type: str = first.get("event_type", context.event_type)
    identifier: Mapping[str, Any] = first.get("identifier", {})
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
    beyond = request_error(
        "INVALID_ACKNOWLEDGEMENT",
        "Invalid Acknowledgement",
        "cannot acknowledge sequence 70: this subscription delivered up to 64",
        _RID_SUBSCRIPTION,
    )
    return {
        "/api/v1/subscriptions": {
            "get": {
                "tags": ["subscriptions"],
                "operationId": "listSubscriptions",
                "summary": "List the caller's subscriptions",
                "description": "Definitions and cursors, by name; `pending` and "
                "`lag_seconds` are given by `GET /api/v1/subscriptions/{name}`."
                + _SUBSCRIPTION_DESCRIPTION,
                "security": STREAM_CREDENTIALS,
                "responses": {
                    "200": json_response(
                        "The caller's subscriptions.",
                        schema_ref("SubscriptionList"),
                        one={
                            "subscriptions": [_subscription_example(event_type, identifier, False)],
                            "request_id": _RID_SUBSCRIPTION,
                        },
                    ),
                    **auth_responses(),
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
                "security": STREAM_CREDENTIALS,
                "parameters": name,
                "requestBody": request_body("SubscriptionRequest", {"watch": first}),
                "responses": {
                    "200": json_response(
                        "The same definition was put again: nothing changed.",
                        schema_ref("Subscription"),
                        existing=state,
                    ),
                    "201": json_response(
                        "Created.",
                        schema_ref("Subscription"),
                        created=_subscription_example(event_type, identifier, True)
                        | {"acknowledged_sequence": None, "pending": 0, "lag_seconds": None},
                    ),
                    "400": json_response(
                        "The name breaks the naming rule, the body could not be parsed or "
                        "failed a watch's validation, names a `payload`, a `delivery` of no "
                        "delivery kind this server has (`UNSUPPORTED_DELIVERY`) or one its kind "
                        "refuses (a URL it may not reach), or its definition is over "
                        "`subscriptions.max_definition_bytes` (16384).",
                        {
                            "oneOf": [
                                schema_ref("RequestError"),
                                schema_ref("UnknownEventTypeError"),
                            ]
                        },
                        validation=request_error(
                            invalid.code, invalid.error, invalid.message, _RID_SUBSCRIPTION
                        ),
                        unsupported_delivery=request_error(
                            "UNSUPPORTED_DELIVERY",
                            "Unsupported Delivery",
                            "'delivery' must be an object naming a delivery kind: its 'kind' "
                            "must be one of 'webhook'",
                            _RID_SUBSCRIPTION,
                        ),
                    ),
                    **auth_responses(),
                    "409": _subscription_error(
                        "The name holds a different definition: delete it first.",
                        "SUBSCRIPTION_CONFLICT",
                        "Subscription Conflict",
                        "subscription 'rhine-gauges' exists with a different definition: "
                        "delete it first",
                    ),
                    "413": ref("responses", "PayloadTooLarge"),
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
                "security": STREAM_CREDENTIALS,
                "parameters": name,
                "responses": {
                    "200": json_response(
                        "The subscription.", schema_ref("Subscription"), one=state
                    ),
                    "400": invalid_name,
                    **auth_responses(),
                    "404": not_found,
                },
            },
            "delete": {
                "tags": ["subscriptions"],
                "operationId": "deleteSubscription",
                "summary": "Delete a subscription",
                "description": "Its open event streams end with `end_of_stream`."
                + _SUBSCRIPTION_DESCRIPTION,
                "security": STREAM_CREDENTIALS,
                "parameters": name,
                "responses": {
                    "204": response_object("Deleted."),
                    "400": invalid_name,
                    **auth_responses(),
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
                "security": STREAM_CREDENTIALS,
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
                    "200": sse_response(
                        context.stream_description,
                        "SubscriptionStreamEvent",
                        **_SUBSCRIPTION_TRANSCRIPT,
                    ),
                    "400": json_response(
                        "The name breaks the naming rule, or `Last-Event-ID` is not a "
                        "sequence this subscription delivered.",
                        schema_ref("RequestError"),
                        beyond=beyond,
                    ),
                    **auth_responses(),
                    "404": not_found,
                    "500": server_error(
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
                "security": STREAM_CREDENTIALS,
                "parameters": name,
                "responses": {
                    "200": json_response(
                        "Its dead letters.",
                        schema_ref("DeadLetters"),
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
                    **auth_responses(),
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
                "security": STREAM_CREDENTIALS,
                "parameters": name,
                "responses": {
                    "200": json_response(
                        "How many were queued.",
                        schema_ref("Redrive"),
                        one={"redriven": 1, "request_id": _RID_SUBSCRIPTION},
                    ),
                    "400": invalid_name,
                    **auth_responses(),
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
                "security": STREAM_CREDENTIALS,
                "parameters": name,
                "requestBody": request_body(
                    "AcknowledgeRequest",
                    # 0 acknowledges nothing: valid before anything was delivered.
                    {"nothing_yet": {"sequence": 0}},
                ),
                "responses": {
                    "200": json_response("The new state.", schema_ref("Subscription"), one=state),
                    "400": json_response(
                        "The name breaks the naming rule, the body is not JSON or not "
                        '`{"sequence": N}`, or N was not delivered yet.',
                        schema_ref("RequestError"),
                        beyond=beyond,
                    ),
                    **auth_responses(),
                    "404": not_found,
                    "413": ref("responses", "PayloadTooLarge"),
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


def _schemas(context: OpenApiContext) -> Doc:
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
                object_schema(
                    {
                        "status": {"enum": ["active", "disabled", "forbidden"]},
                        "delivered": {"type": "integer", "minimum": 0},
                        "retrying": {"type": "integer", "minimum": 0},
                        "dead_lettered": {"type": "integer", "minimum": 0},
                        "last_error": {
                            "oneOf": [
                                {"type": "null"},
                                object_schema(
                                    {
                                        "sequence": sequence,
                                        "attempt": {"type": "integer", "minimum": 1},
                                        "error": nullable_text,
                                        "at": {"type": "string", "pattern": SECOND_PATTERN},
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
        "created_at": {"type": "string", "pattern": SECOND_PATTERN},
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
    stream_request = context.schemas["StreamRequest"]
    stream_event = sse_event(
        "One event of a subscription's stream: a watch's events; notification events carry "
        "`id` (the sequence).",
        context.stream_event_data,
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
        "AcknowledgeRequest": object_schema({"sequence": {"type": "integer", "minimum": 0}}),
        "SubscriptionDefinition": object_schema(definition),
        "Subscription": object_schema(
            {
                **definition,
                "pending": {"type": "integer", "minimum": 0},
                "lag_seconds": {"type": ["number", "null"], "minimum": 0},
            }
        ),
        "SubscriptionList": object_schema(
            {
                "subscriptions": {"type": "array", "items": schema_ref("SubscriptionDefinition")},
                "request_id": schema_ref("RequestId"),
            }
        ),
        "SubscriptionStreamEvent": stream_event,
        "DeadLetters": object_schema(
            {
                "dead_letters": {
                    "type": "array",
                    "items": object_schema(
                        {
                            "sequence": sequence,
                            "attempts": {"type": "integer", "minimum": 1},
                            "error": nullable_text,
                            "dead_lettered_at": {"type": "string", "pattern": SECOND_PATTERN},
                        }
                    ),
                },
                "dropped": {"type": "integer", "minimum": 0},
                "request_id": schema_ref("RequestId"),
            }
        ),
        "Redrive": object_schema(
            {"redriven": {"type": "integer", "minimum": 0}, "request_id": schema_ref("RequestId")}
        ),
    }
