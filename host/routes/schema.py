"""GET /api/v1/schema and /api/v1/schema/{event_type}: public, whatever auth says."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from aviso_host.errors import json_response
from aviso_host.routes.common import request_id_of, service_of
from aviso_plugins.api_shapes import SchemaCatalogue, SchemaDetail, SchemaNotFound

_NOT_CONFIGURED = "No notification schema configured"


async def list_schemas(request: Request) -> Response:
    catalog = service_of(request).catalog
    body: SchemaCatalogue = {
        "event_types": catalog.event_types,
        "schema": {name: catalog.schemas[name].describe() for name in catalog.event_types},
        "status": "success",
        "total_schemas": len(catalog.schemas),
    }
    if not catalog.configured:
        body["message"] = _NOT_CONFIGURED
    return json_response(body)


async def get_schema(request: Request) -> Response:
    catalog = service_of(request).catalog
    event_type = request.path_params["event_type"]
    schema = catalog.get(event_type)
    if schema is not None:
        found: SchemaDetail = {
            "event_type": event_type,
            "schema": schema.describe(),
            "status": "success",
        }
        return json_response(found)
    missing: SchemaNotFound = {
        "message": _NOT_CONFIGURED,
        "request_id": request_id_of(request),
        "status": "error",
    }
    if catalog.configured:
        missing["available_types"] = catalog.event_types
        missing["message"] = f"Event type '{event_type}' not found"
    return json_response(missing, 404)
