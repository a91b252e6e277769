"""The shared components: request and response bodies, error objects, responses, headers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from aviso_builtins.openapi.common import (
    RID_ADMIN,
    RID_NOTIFY,
    UUID_PATTERN,
)
from aviso_builtins.openapi.streams import STREAM_REQUEST_DESCRIPTION
from aviso_plugins.api_shapes import (
    AdminNotificationResult,
    AdminResult,
    Health,
    Readiness,
    SchemaCatalogue,
    SchemaDetail,
    SchemaEntry,
    SchemaNotFound,
    Status,
)
from aviso_plugins.openapi import (
    JSON,
    SECOND_PATTERN,
    Doc,
    EndpointErrors,
    EventTypeSchema,
    OpenApiSources,
    examples_of,
    ref,
    request_error,
    response_object,
    schema_ref,
)
from aviso_plugins.shapes import shape_schema

# ----------------------------------------------------------------------------- components

_PARSE_ERROR_CODES = ("INVALID_JSON", "UNKNOWN_FIELD", "INVALID_REQUEST_SHAPE")
_SERVER_ERROR_CODES = (
    "NOTIFICATION_PROCESSING_FAILED",
    "NOTIFICATION_STORAGE_FAILED",
    "IDEMPOTENCY_KEY_REUSED",
    "IDEMPOTENCY_KEY_NOT_RETAINED",
    "SSE_STREAM_INITIALIZATION_FAILED",
)
UNKNOWN_EVENT_TYPE_CODE = "UNKNOWN_EVENT_TYPE"
_EDGE_ERROR_CODES = (
    "PAYLOAD_TOO_LARGE",
    "HEADER_FIELDS_TOO_LARGE",
    "REQUEST_TIMEOUT",
    "TOO_MANY_REQUESTS",
    "BAD_REQUEST",
    "HTTP_VERSION_NOT_SUPPORTED",
)


def error_schemas(endpoints: Sequence[EndpointErrors], plugin_codes: Iterable[str] = ()) -> Doc:
    """The error objects of the host's ``endpoints``; ``plugin_codes``: the codes the
    plugins' routes answer with too."""
    api_codes = (
        *_PARSE_ERROR_CODES,
        *(endpoint.validation_code for endpoint in endpoints),
        *_SERVER_ERROR_CODES,
    )

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
                    # The API's codes, then the plugins' routes', then the HTTP edge's.
                    "enum": list(dict.fromkeys([*api_codes, *plugin_codes, *_EDGE_ERROR_CODES])),
                },
                "error": text("Category label, e.g. `Invalid Watch Request`."),
                "message": text("Top-level failure text."),
                "details": text("Deepest cause; equal to `message` when there is one cause."),
                "request_id": schema_ref("RequestId"),
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
                "request_id": schema_ref("RequestId"),
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
                "request_id": schema_ref("RequestId"),
            },
        },
    }


def _event_type_schema(sources: OpenApiSources) -> Doc:
    if sources.strict and sources.event_schemas:
        return {
            "type": "string",
            "enum": list(sources.event_schemas),
            "description": "A configured event type (any other is refused: `UNKNOWN_EVENT_TYPE`).",
        }
    return {
        "type": "string",
        "description": "A configured event type or, when no schema is configured (or "
        "`notification_schema_strict` is false), a topic base of your own.",
    }


def body_schemas(sources: OpenApiSources) -> Doc:
    nullable_text: Doc = {"type": ["string", "null"]}
    stream_request: Doc = {
        "type": "object",
        "description": STREAM_REQUEST_DESCRIPTION,
        "required": ["event_type", "identifier"],
        "additionalProperties": False,
        "properties": {
            "event_type": _event_type_schema(sources),
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
            "pattern": UUID_PATTERN,
        },
        "StreamRequest": stream_request,
        "NotificationAccepted": {
            "type": "object",
            "required": ["status", "request_id", "processed_at"],
            "additionalProperties": False,
            "properties": {
                "status": {"type": "string", "enum": ["success"]},
                "request_id": schema_ref("RequestId"),
                "processed_at": {
                    "type": "string",
                    "pattern": SECOND_PATTERN,
                    "description": "UTC, whole seconds.",
                },
            },
        },
        "Health": shape_schema(Health),
        "Readiness": shape_schema(Readiness),
        "Status": shape_schema(Status),
        "WipeStreamRequest": {
            "type": "object",
            "required": ["stream_name"],
            "properties": {"stream_name": {"type": "string", "description": "Topic base."}},
        },
        "AdminResult": shape_schema(AdminResult),
        "AdminNotificationResult": shape_schema(AdminNotificationResult),
    }


_BUILTIN_HANDLER_TYPES = (
    "StringHandler",
    "DateHandler",
    "TimeHandler",
    "EnumHandler",
    "IntHandler",
    "FloatHandler",
    "ExpverHandler",
    "PolygonHandler",
    "PointCloudHandler",
)


def discovery_schemas(event_schemas: Mapping[str, EventTypeSchema]) -> Doc:
    # A plugin's handler type a configured schema uses is one the schema routes answer with.
    used = [
        handler.type_name for schema in event_schemas.values() for handler in schema.fields.values()
    ]
    handler_types = list(dict.fromkeys([*_BUILTIN_HANDLER_TYPES, *used]))
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
                "type": {"type": "string", "enum": handler_types},
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
        **{
            shape.__name__: shape_schema(shape, null=True)
            for shape in (SchemaEntry, SchemaCatalogue, SchemaDetail, SchemaNotFound)
        },
    }


def shared_responses() -> Doc:
    def auth_error(code: str, label: str, message: str) -> Doc:
        return {"code": code, "error": label, "message": message, "request_id": RID_ADMIN}

    return {
        "Unauthorized": response_object(
            "Missing, malformed, invalid or expired credentials where they are required "
            "(admin paths, protected streams). Only when auth is enabled.",
            JSON,
            schema_ref("AuthError"),
            examples_of(
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
            headers={"WWW-Authenticate": ref("headers", "WWW-Authenticate")},
        ),
        "Forbidden": response_object(
            "Authenticated but not allowed (roles, admin, destination plugin).",
            JSON,
            schema_ref("AuthError"),
            examples_of(
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
        "ServiceUnavailable": response_object(
            "The authentication service or the destination service could not reach a verdict, "
            "or the server holds more than `limits.max_connections` connections (then with "
            "`Retry-After`).",
            JSON,
            schema_ref("AuthError"),
            examples_of(
                auth_service=auth_error(
                    "SERVICE_UNAVAILABLE",
                    "service_unavailable",
                    "Authentication service temporarily unavailable",
                )
            ),
        ),
        "PayloadTooLarge": response_object(
            "Body larger than `limits.max_body_bytes` (default 256 KiB), declared or streamed "
            "(chunked); answered with `Connection: close`, the rest of the body unread.",
            JSON,
            schema_ref("RequestError"),
            examples_of(
                too_large=request_error(
                    "PAYLOAD_TOO_LARGE",
                    "Payload Too Large",
                    "Request body exceeds the limit of 262144 bytes",
                    RID_NOTIFY,
                )
            ),
        ),
    }


def header_components() -> Doc:
    return {
        "X-Request-ID": {
            "description": "A fresh server-generated UUID; a client-supplied value is ignored.",
            "required": True,
            "schema": {"type": "string", "pattern": UUID_PATTERN},
        },
        "WWW-Authenticate": {
            "description": "`Bearer`, plus a second `Basic` field in direct mode.",
            "required": True,
            "schema": {"type": "string"},
        },
    }
