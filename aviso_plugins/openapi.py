"""What a plugin contributes to the OpenAPI document (hook ``aviso_openapi``), the building
blocks every part of the document is written with (references, responses, error examples,
object schemas and Server-Sent Events), and what the running service tells the plugin that
serves the document (:class:`OpenApiSources`).

The document is plain JSON-serialisable data (``Doc``). The built-in plugin ``openapi``
serves it (``/api-docs/openapi.json``) and describes the host's own routes; a plugin
describes the routes it serves (``aviso_api_routes``) in an :class:`OpenApiContribution`,
merged after the host's parts; a path, component schema or tag that is described already
is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aviso_plugins.fields import FieldHandler

__all__ = [
    "FOLLOW_IN_CONSOLE",
    "JSON",
    "SECOND_PATTERN",
    "STREAM_CREDENTIALS",
    "Contributions",
    "Doc",
    "EndpointErrors",
    "EventTypeSchema",
    "OpenApiContext",
    "OpenApiContribution",
    "OpenApiSources",
    "auth_responses",
    "bad_request",
    "examples_of",
    "json_response",
    "object_schema",
    "one_of",
    "ref",
    "request_body",
    "request_error",
    "response_object",
    "schema_ref",
    "server_error",
    "settings_stated",
    "sse_event",
    "sse_response",
    "stream_operation",
    "unknown_event_type",
]

JSON = "application/json"
Doc = dict[str, Any]
"""A piece of the document: a JSON object."""

SECOND_PATTERN = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"
"""A UTC timestamp to the second, as the API writes them (``2026-04-02T08:05:12Z``)."""

STREAM_CREDENTIALS: list[Doc] = [{}, {"bearer_jwt": []}, {"basic": []}]
"""The ``security`` of a route that anonymous callers reach on public streams; a supplied
credential is always verified."""


@dataclass(frozen=True, slots=True)
class OpenApiContext:
    """What ``aviso_openapi`` receives: the parts of the host's document a plugin's
    description reuses, built for the configured event types."""

    examples: Mapping[str, Mapping[str, Mapping[str, Any]]]
    """Named request bodies the server accepts, per operation (``"notify"``, ``"watch"``,
    ``"replay"``, ``"aggregate"``): ``examples["watch"]`` is ``{name: body}``, empty when the
    configuration gives no example for it."""
    event_type: str
    """An event type the examples may name (a configured one when schemas are configured)."""
    schemas: Mapping[str, Any]
    """The host's component schemas by name (a copy): reference them with
    :func:`schema_ref`, or reuse their parts (``schemas["StreamRequest"]["properties"]``)."""
    stream_description: str
    """The description of a watch's Server-Sent Events response (its event names, frames and
    how to resume), for a route whose stream sends a watch's events."""
    stream_event_data: Mapping[str, Any]
    """The schema of each ``data`` line a watch's stream sends, by event name: give it to
    :func:`sse_event` to describe a stream that sends a watch's events."""
    event_types: Sequence[str] = ()
    """The configured event types (what a refusal of an unknown one lists: see
    :func:`unknown_event_type`); empty without schemas."""


@dataclass(frozen=True, slots=True)
class OpenApiContribution:
    """A plugin's part of the OpenAPI document; each member is merged into the document's
    own, after the host's entries (in the plugins' registration order)."""

    paths: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Path items by path (``{"/api/v1/latest": {"get": operation}}``): a path the host or
    another plugin describes fails startup."""
    schemas: Mapping[str, Any] = field(default_factory=dict)
    """Component schemas by name, referenced as ``schema_ref(name)``."""
    tags: Sequence[Mapping[str, Any]] = ()
    """Tag objects (``{"name": ..., "description": ...}``) the operations name."""
    error_codes: Sequence[str] = ()
    """The ``code`` values of the aviso error objects the routes answer with
    (``ApiRefusal.code``): listed in the ``RequestError`` schema beside the host's."""
    after: Mapping[str, str] = field(default_factory=dict)
    """Where a path or component schema of the contribution goes, by name: right after the
    host's path or schema named by its value (``{"/api/v1/count": "/api/v1/replay"}``),
    to stand beside what it resembles; the others go after the host's own entries."""


Contributions = Callable[[OpenApiContext], Sequence[tuple[str, OpenApiContribution]]]
"""Every plugin's ``aviso_openapi`` answer for a context, each with its plugin's name, in
the plugins' registration order (a hook that raises or answers anything but a contribution
or ``None`` raises ``PluginError`` naming its plugin)."""


@dataclass(frozen=True, slots=True)
class EndpointErrors:
    """How the host refuses a request to one of its request endpoints (and to a plugin's
    that shares its words, ``ServiceAccess.validation_error``)."""

    name: str
    """The endpoint, as :meth:`~aviso_plugins.service.ServiceAccess.validation_error` takes
    it (``"watch"``)."""
    label: str
    """The ``error`` member of its refusals (``Invalid Watch Request``)."""
    validation_code: str
    """The ``code`` of its validation refusals (``INVALID_WATCH_REQUEST``)."""


@dataclass(frozen=True, slots=True)
class EventTypeSchema:
    """One configured event type, as its description shows it."""

    event_type: str
    fields: Mapping[str, FieldHandler]
    """Its identifier fields' handlers, in declaration order."""
    public: Mapping[str, Any]
    """What ``GET /api/v1/schema/{event_type}`` answers as its ``schema``: the identifier
    rules (secret options masked) and the payload rule."""


@dataclass(frozen=True, slots=True)
class OpenApiSources:
    """What the running service states in its API description
    (:meth:`~aviso_plugins.service.ServiceAccess.openapi_sources`)."""

    version: str
    """The server's version."""
    event_schemas: Mapping[str, EventTypeSchema]
    """The configured event types, by name, in name order (empty: no schema configured)."""
    strict: bool
    """Effective ``notification_schema_strict``: with schemas configured, an event type that
    is not one of them is refused (``UNKNOWN_EVENT_TYPE``)."""
    limits: Mapping[str, Any]
    """The ``limits`` section, every default filled in."""
    endpoints: Sequence[EndpointErrors]
    """Every request endpoint's refusal label and validation code."""
    contributions: Contributions
    """The plugins' parts of the document (hook ``aviso_openapi``)."""


def ref(section: str, name: str) -> Doc:
    """A reference to the component ``name`` of ``section`` (``"responses"``, ``"headers"``:
    the host's ``PayloadTooLarge``, ``Unauthorized``, ``X-Request-ID``...)."""
    return {"$ref": f"#/components/{section}/{name}"}


def schema_ref(name: str) -> Doc:
    """A reference to the component schema ``name`` (the host's ``RequestError``,
    ``RequestId``, ``CloudEvent``... or one of the contribution's own)."""
    return ref("schemas", name)


def examples_of(**examples: Any) -> Doc:
    """An ``examples`` member: each keyword's value as a named example."""
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
    """A JSON response of ``schema``, each keyword a named example of its body."""
    return response_object(description, JSON, schema, examples_of(**examples))


def request_error(code: str, label: str, message: str, request_id: str) -> Doc:
    """An example aviso error object (schema ``RequestError``): what an ``ApiRefusal`` of
    ``code``, ``label`` (its ``error``) and ``message`` answers."""
    return {
        "code": code,
        "details": message,
        "error": label,
        "message": message,
        "request_id": request_id,
    }


def server_error(description: str, **examples: Any) -> Doc:
    """A 500: the aviso error object of a failed request, or the generic internal error."""
    return json_response(
        description, {"oneOf": [schema_ref("RequestError"), schema_ref("AuthError")]}, **examples
    )


def auth_responses() -> Doc:
    """The 401, 403 and 503 every authenticated route may answer."""
    return {
        "401": ref("responses", "Unauthorized"),
        "403": ref("responses", "Forbidden"),
        "503": ref("responses", "ServiceUnavailable"),
    }


def unknown_event_type(request_id: str, configured: Sequence[str]) -> Doc:
    """An example refusal of an event type that is not configured (schema
    ``UnknownEventTypeError``), listing the ``configured`` ones."""
    return {
        "code": "UNKNOWN_EVENT_TYPE",
        "configured_event_types": list(configured),
        "error": "unknown_event_type",
        "message": "unknown event type 'tide_gauge'",
        "request_id": request_id,
    }


def bad_request(**examples: Any) -> Doc:
    """The 400 of a notify or stream request, each keyword a named example of its body."""
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


def request_body(schema: str, examples: Mapping[str, Any]) -> Doc:
    """A required JSON request body of the component schema ``schema``, with the named
    ``examples`` (``{name: body}``)."""
    return {
        "required": True,
        "content": {JSON: {"schema": schema_ref(schema), "examples": examples_of(**examples)}},
    }


def object_schema(required: Doc, optional: Doc | None = None, *, open_: bool = False) -> Doc:
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
    """One of the component schemas ``names``."""
    return {"oneOf": [schema_ref(name) for name in names]}


def sse_event(description: str, data_by_event: Mapping[str, Doc]) -> Doc:
    """One Server-Sent Event as a JSON Schema 2020-12 reading of ``text/event-stream`` (as
    tools that validate streams read it): its name and its data line, which holds JSON."""
    return {
        **object_schema(
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


def sse_response(description: str, event_schema: str, **transcripts: str) -> Doc:
    """The 200 of a route answering with Server-Sent Events, each of whose events the
    component schema ``event_schema`` describes (see :func:`sse_event`); each keyword is a
    named example transcript of the stream."""

    def fixed(value: str) -> Doc:
        return {"schema": {"type": "string", "enum": [value]}}

    return response_object(
        description,
        "text/event-stream",
        schema_ref(event_schema),
        examples_of(**transcripts),
        headers={
            "Cache-Control": fixed("no-cache"),
            "X-Accel-Buffering": fixed("no"),
            "Access-Control-Allow-Origin": fixed("*"),
        },
    )


FOLLOW_IN_CONSOLE = (
    '\n\n**Swagger UI cannot follow a stream**: its "Try it out" waits for the response '
    "to end, which a live stream never does, and shows nothing meanwhile. Follow watches "
    "and replays in the [console](../console) (the page `/console` of this server), or with "
    "`curl -N`."
)
"""The end of the description of an operation answering with a stream."""


def stream_operation(
    operation_id: str,
    summary: str,
    description: str,
    request_id: str,
    request_examples: Mapping[str, Any],
    event_types: Sequence[str],
    validation: Doc,
    transcripts: Mapping[str, str],
    *,
    sse_description: str,
    request_schema: str = "StreamRequest",
    event_schema: str = "StreamEvent",
) -> Doc:
    """The operation of a route that takes a watch's body (``request_schema``) and answers
    with Server-Sent Events (``sse_description``; each event described by ``event_schema``),
    refused as a watch is: ``validation`` is its validation refusal's example
    (:func:`request_error`), ``event_types`` the configured ones, ``transcripts`` name
    example streams, and ``request_id`` is the one every example of the operation shows."""
    return {
        "tags": ["streaming"],
        "operationId": operation_id,
        "summary": summary,
        "description": description,
        "security": STREAM_CREDENTIALS,
        "requestBody": request_body(request_schema, request_examples),
        "responses": {
            "200": sse_response(sse_description, event_schema, **transcripts),
            "400": bad_request(
                validation=validation,
                unknown_event_type=unknown_event_type(request_id, event_types),
            ),
            **auth_responses(),
            "413": ref("responses", "PayloadTooLarge"),
            "500": server_error(
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


_QUOTED = frozenset({"examples", "example"})


def settings_stated(node: Any, sections: Mapping[str, Mapping[str, Any]]) -> Any:
    """``node`` with each setting of ``sections`` its text names (`` `limits.max_body_bytes` ``)
    followed by the value the section holds (`` `limits.max_body_bytes` (262144)``),
    replacing any value written beside it. A name the section lacks raises ``KeyError``: the
    text can only name declared settings. Examples are left as they are: they quote the
    configuration (a field's ``description``), which may say anything."""
    if not sections:
        return node
    setting = re.compile(
        "`(" + "|".join(map(re.escape, sections)) + r")\.(\w+)`(?: \((?:default )?[0-9][^)]*\))?"
    )

    def stated(match: re.Match[str]) -> str:
        value = sections[match[1]][match[2]]
        shown = int(value) if isinstance(value, float) and value.is_integer() else value
        return f"`{match[1]}.{match[2]}` ({shown})"

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return setting.sub(stated, node)
        if isinstance(node, dict):
            return {key: value if key in _QUOTED else walk(value) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    return walk(node)
