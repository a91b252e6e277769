"""The OpenAPI 3.1 description of the public API, as plain data built at startup.

The prose, status codes and error shapes are written in this package, a module per group
of routes (:mod:`.streams`, :mod:`.operations`) plus the shared
:mod:`.components` and :mod:`.common` building blocks; what the service already knows is
taken from it (:class:`~aviso_plugins.openapi.OpenApiSources`): the settings the text names
are stated with their configured values, the request examples come from the configured
event types (:mod:`.examples`), the schema-route examples from the schemas' public view,
the validation codes and labels from the service's endpoints, the response bodies' schemas
from their declarations (:mod:`aviso_plugins.api_shapes`).
Keep the rest in step with the routes and docs/guarantees.md; the tests hold them
together: the document validates (openapi-spec-validator), every route of the app is
described (or listed in :data:`NOT_DESCRIBED_PATHS`), every error code the host raises is
listed, every example matches its schema, every request example is accepted by the server,
and schemathesis checks the server's answers against the document.

To describe a new host route, add its path item to the ``paths`` of :func:`openapi_document` (a
function of its group's module returning ``{path: {method: operation}}``, like
:func:`.operations.operational_operations`), with a response for every status it answers
and examples that match their schemas; a route that is not API (a page, a file) goes into
:data:`NOT_DESCRIBED_PATHS` instead. Plugins describe the routes they serve through the hook
``aviso_openapi`` (``OpenApiSources.contributions``), merged after the host's own parts.

Compatibility note: the bundled Swagger UI (4.x) only renders OpenAPI 3.0, so the document
stays within what 3.0 and 3.1 read alike, apart from nullable types written as type lists
(the Swagger UI page rewrites those before rendering, see the ``swagger_ui`` plugin) and the
event schemas of the streams (``const``, ``if``/``then``, ``contentSchema``), which Swagger UI
shows without checking.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from aviso_builtins.openapi.components import (
    body_schemas,
    discovery_schemas,
    error_schemas,
    header_components,
    shared_responses,
)
from aviso_builtins.openapi.examples import RequestExamples, request_examples
from aviso_builtins.openapi.operations import (
    admin_operations,
    operational_operations,
    schema_operations,
)
from aviso_builtins.openapi.streams import (
    SSE_DESCRIPTION,
    STREAM_EVENT_DATA,
    notify_operation,
    replay_operation,
    stream_event_schemas,
    watch_operation,
)
from aviso_plugins import PluginError
from aviso_plugins.openapi import (
    Doc,
    OpenApiContext,
    OpenApiContribution,
    OpenApiSources,
    settings_stated,
)
from aviso_plugins.service import ServiceAccess

__all__ = ["DOCUMENT_PATH", "NOT_DESCRIBED_PATHS", "openapi_document", "routes"]

DOCUMENT_PATH = "/api-docs/openapi.json"

NOT_DESCRIBED_PATHS = frozenset({"/static/{path:path}", "/console/{file}", "/favicon.ico"})
"""The host's routes the document leaves out: files. Every other route of the host and of
``aviso_api_routes`` must have its path and methods in the document (a test compares them);
the plugins' pages (``aviso_extra_routes``, this document's among them) are their own."""


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
  `Retry-After`; beyond `limits.max_connections_per_client` from one client address (0: no
  such cap, the default), 429 `TOO_MANY_REQUESTS` with `Retry-After` (`GET /health` and `/ready` are
  answered over both caps; such a connection must send its head within 2 s, and one past a
  small reserve is reset). A request the HTTP parser cannot read gets 400 `BAD_REQUEST`, a
  request line of an HTTP version other than 1.0 or 1.1 505 `HTTP_VERSION_NOT_SUPPORTED`.
  A connection that sends nothing for `limits.idle_timeout_seconds` is closed. Any
  unexpected failure is 500 `INTERNAL_ERROR`.
"""


def routes(service: ServiceAccess) -> list[BaseRoute]:
    """The document's route; the document is built here, once."""
    document = openapi_document(service.openapi_sources())
    body = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()

    async def openapi(request: Request) -> Response:
        return Response(body, media_type="application/json")

    return [Route(DOCUMENT_PATH, openapi, methods=["GET"])]


def openapi_document(sources: OpenApiSources) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service ``sources`` describes, as JSON-serialisable
    data: the host's routes, then the plugins' (``sources.contributions``). Every setting the
    text names (`` `limits.max_body_bytes` ``) is stated with its value in ``sources.limits``."""
    examples = request_examples(sources.event_schemas)
    endpoints = {endpoint.name: endpoint for endpoint in sources.endpoints}
    paths: Doc = {
        "/api/v1/notification": {"post": notify_operation(examples, endpoints["notify"])},
        "/api/v1/watch": {"post": watch_operation(examples, endpoints["watch"])},
        "/api/v1/replay": {"post": replay_operation(examples, endpoints["replay"])},
        **schema_operations(sources.event_schemas, examples.event_type),
        **admin_operations(examples.event_type),
    }
    schemas: Doc = {
        **body_schemas(sources),
        **error_schemas(sources.endpoints),
        **discovery_schemas(sources.event_schemas),
        **stream_event_schemas(),
    }
    tags: list[Doc] = list(_TAGS)
    contributed = sources.contributions(_context(examples, schemas))
    error_codes = _merge(contributed, paths, schemas, tags)
    schemas |= error_schemas(sources.endpoints, error_codes)
    paths |= _disjoint(operational_operations(), paths, "path")
    # Deep-copied so that a caller editing the result cannot alter the module's constants.
    document: Doc = copy.deepcopy(
        {
            "openapi": "3.1.0",
            "info": {
                "title": "Aviso Notification Service API",
                "version": sources.version,
                "description": _API_DESCRIPTION,
                "license": {
                    "name": "Apache-2.0",
                    "url": "https://www.apache.org/licenses/LICENSE-2.0",
                },
            },
            "tags": tags,
            "paths": paths,
            "components": {
                "schemas": schemas,
                "responses": shared_responses(),
                "headers": header_components(),
                "securitySchemes": {
                    "bearer_jwt": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                    "basic": {"type": "http", "scheme": "basic"},
                },
            },
        }
    )
    result: Doc = settings_stated(document, {"limits": sources.limits})
    return result


_TAGS: tuple[Doc, ...] = (
    {"name": "health", "description": "Liveness and readiness."},
    {"name": "general", "description": "Landing page."},
    {"name": "schema", "description": "Schema discovery."},
    {"name": "notification", "description": "Publishing notifications."},
    {"name": "streaming", "description": "Watch, replay and aggregate over Server-Sent Events."},
    {"name": "admin", "description": "Deleting stored notifications."},
)


def _context(examples: RequestExamples, schemas: Doc) -> OpenApiContext:
    return OpenApiContext(
        examples={
            "notify": examples.notify,
            "watch": examples.watch,
            "replay": examples.replay,
            "aggregate": examples.aggregate,
        },
        event_type=examples.event_type,
        schemas=copy.deepcopy(schemas),
        stream_description=SSE_DESCRIPTION,
        stream_event_data=copy.deepcopy(STREAM_EVENT_DATA),
        event_types=tuple(examples.event_types),
    )


def _merge(
    contributed: Sequence[tuple[str, OpenApiContribution]],
    paths: Doc,
    schemas: Doc,
    tags: list[Doc],
) -> list[str]:
    """Each plugin's part added after the host's (each path, schema and tag described once);
    the error codes the plugins' routes answer with, each once."""
    error_codes: dict[str, None] = {}
    for plugin, contribution in contributed:
        after = contribution.after
        _place(paths, _disjoint(contribution.paths, paths, "path", plugin), after)
        _place(schemas, _disjoint(contribution.schemas, schemas, "component schema", plugin), after)
        named = {tag["name"]: tag for tag in tags}
        new_tags = _disjoint({tag["name"]: tag for tag in contribution.tags}, named, "tag", plugin)
        tags.extend(new_tags.values())
        error_codes |= dict.fromkeys(contribution.error_codes)
    return list(error_codes)


def _place(present: Doc, added: Doc, after: Mapping[str, str]) -> None:
    """``added`` into ``present``: each entry right after the one ``after`` names for it
    (in their order), the others at the end."""
    following: dict[str, list[str]] = {}
    for name in added:
        anchor = after.get(name)
        if anchor is not None and anchor in present:
            following.setdefault(anchor, []).append(name)
    placed = {name for names in following.values() for name in names}
    entries = list(present.items())
    present.clear()
    for name, value in entries:
        present[name] = value
        present.update((added_name, added[added_name]) for added_name in following.get(name, ()))
    present.update((name, value) for name, value in added.items() if name not in placed)


def _disjoint(
    added: Mapping[str, Any], present: Mapping[str, Any], noun: str, plugin: str = ""
) -> Doc:
    """``added`` when none of its names is ``present``."""
    clash = next((name for name in added if name in present), None)
    if clash is not None:
        owner = f"plugin '{plugin}'" if plugin else "the host"
        raise PluginError(f"{owner} describes the {noun} '{clash}', which is described already")
    return dict(added)
