"""The host's own building blocks of the API description (the shared ones are public, in
:mod:`aviso_plugins.openapi`): request ids, credentials, example errors."""

from __future__ import annotations

from typing import Any

from aviso_host.errors import UNKNOWN_EVENT_TYPE_CODE
from aviso_plugins.openapi import Doc, json_response, schema_ref

UUID_PATTERN = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"

# Invented request ids, reused so the examples of one exchange agree with each other.
RID_NOTIFY = "2b8e4f4c-7a0d-4d7e-9a3b-5f1e0c6d9a12"
RID_WATCH = "d41f0a9e-3c55-4b8e-8f0e-6a2b7c9d1e30"
RID_REPLAY = "7c2d9b10-5e4f-4a6b-b1c8-0f9e8d7c6b5a"
RID_ADMIN = "6f1c2e8a-0b7d-4a55-9e39-2d0c8f3b6a41"
RID_SCHEMA = "0a7b3c4d-1e2f-4a5b-8c9d-0e1f2a3b4c5d"
RID_AGGREGATE = "5e0c7a2b-9d14-4f6e-a8b3-1c2d3e4f5a6b"

ADMIN_CREDENTIALS: list[Doc] = [{"bearer_jwt": []}, {"basic": []}]


def unknown_event_type(request_id: str, configured: list[str]) -> Doc:
    return {
        "code": UNKNOWN_EVENT_TYPE_CODE,
        "configured_event_types": configured,
        "error": "unknown_event_type",
        "message": "unknown event type 'tide_gauge'",
        "request_id": request_id,
    }


def bad_request(**examples: Any) -> Doc:
    return json_response(
        "The body could not be parsed, names an unknown event type (strict mode), or failed "
        "validation: an identifier key the schema does not declare, a schema-less event type "
        "that is not a topic base, an identifier value or constraint operand over "
        "`limits.max_identifier_value_bytes` (1024) or holding a vertical tab, form feed or "
        "DEL, a topic over `limits.max_topic_bytes` (3072), a payload over "
        "`limits.max_payload_bytes` (262144). "
        "Parse failures carry the endpoint's own `error` label.",
        {"oneOf": [schema_ref("RequestError"), schema_ref("UnknownEventTypeError")]},
        **examples,
    )


def admin_result(description: str, **examples: Any) -> Doc:
    return json_response(description, schema_ref("AdminResult"), **examples)
