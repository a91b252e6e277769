"""The building blocks of the API description: references, responses, example errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aviso_host.errors import UNKNOWN_EVENT_TYPE_CODE

JSON = "application/json"
Doc = dict[str, Any]

UUID_PATTERN = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
SECOND_PATTERN = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"

# Invented request ids, reused so the examples of one exchange agree with each other.
RID_NOTIFY = "2b8e4f4c-7a0d-4d7e-9a3b-5f1e0c6d9a12"
RID_WATCH = "d41f0a9e-3c55-4b8e-8f0e-6a2b7c9d1e30"
RID_REPLAY = "7c2d9b10-5e4f-4a6b-b1c8-0f9e8d7c6b5a"
RID_ADMIN = "6f1c2e8a-0b7d-4a55-9e39-2d0c8f3b6a41"
RID_SCHEMA = "0a7b3c4d-1e2f-4a5b-8c9d-0e1f2a3b4c5d"
RID_AGGREGATE = "5e0c7a2b-9d14-4f6e-a8b3-1c2d3e4f5a6b"

STREAM_CREDENTIALS: list[Doc] = [{}, {"bearer_jwt": []}, {"basic": []}]
"""Anonymous callers reach public streams; a supplied credential is always verified."""
ADMIN_CREDENTIALS: list[Doc] = [{"bearer_jwt": []}, {"basic": []}]


def ref(section: str, name: str) -> Doc:
    return {"$ref": f"#/components/{section}/{name}"}


def schema_ref(name: str) -> Doc:
    return ref("schemas", name)


def examples_of(**examples: Any) -> Doc:
    return {name: {"value": value} for name, value in examples.items()}


def response_object(
    description: str,
    media_type: str | None = None,
    schema: Doc | None = None,
    examples: Doc | None = None,
    headers: Doc | None = None,
) -> Doc:
    """A response object; every aviso response carries ``X-Request-ID``."""
    response: Doc = {
        "description": description,
        "headers": {"X-Request-ID": ref("headers", "X-Request-ID"), **(headers or {})},
    }
    if media_type is not None:
        content: Doc = {"schema": schema or {}}
        if examples:
            content["examples"] = examples
        response["content"] = {media_type: content}
    return response


def json_response(description: str, schema: Doc, **examples: Any) -> Doc:
    return response_object(description, JSON, schema, examples_of(**examples))


def request_error(code: str, label: str, message: str, request_id: str) -> Doc:
    return {
        "code": code,
        "details": message,
        "error": label,
        "message": message,
        "request_id": request_id,
    }


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


def server_error(description: str, **examples: Any) -> Doc:
    return json_response(
        description, {"oneOf": [schema_ref("RequestError"), schema_ref("AuthError")]}, **examples
    )


def admin_result(description: str, **examples: Any) -> Doc:
    return json_response(description, schema_ref("AdminResult"), **examples)


def auth_responses() -> Doc:
    return {
        "401": ref("responses", "Unauthorized"),
        "403": ref("responses", "Forbidden"),
        "503": ref("responses", "ServiceUnavailable"),
    }


def request_body(schema: str, examples: Mapping[str, Any]) -> Doc:
    return {
        "required": True,
        "content": {JSON: {"schema": schema_ref(schema), "examples": examples_of(**examples)}},
    }


def object(required: Doc, optional: Doc | None = None, *, open_: bool = False) -> Doc:
    """An object with ``required`` and ``optional`` properties; no others unless ``open_``."""
    schema: Doc = {
        "type": "object",
        "required": sorted(required),
        "properties": {**required, **(optional or {})},
    }
    if not open_:
        schema["additionalProperties"] = False
    return schema


def one_of(*names: str) -> Doc:
    return {"oneOf": [schema_ref(name) for name in names]}


def sse_event(description: str, data_by_event: dict[str, Doc]) -> Doc:
    """One Server-Sent Event as a JSON Schema 2020-12 reading of ``text/event-stream`` (as
    tools that validate streams read it): its name and its data line, which holds JSON."""
    return {
        **object(
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


SUBSCRIPTION_ERROR_CODES = (
    "INVALID_SUBSCRIPTION_NAME",
    "SUBSCRIPTION_NOT_FOUND",
    "SUBSCRIPTION_CONFLICT",
    "TOO_MANY_SUBSCRIPTIONS",
    "UNSUPPORTED_DELIVERY",
    "INVALID_ACKNOWLEDGEMENT",
)
