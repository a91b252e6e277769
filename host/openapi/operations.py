"""The schema discovery, admin and operational routes' operations."""

from __future__ import annotations

from aviso_host.openapi.common import (
    ADMIN_CREDENTIALS,
    RID_ADMIN,
    RID_SCHEMA,
    admin_result,
)
from aviso_host.schemas import SchemaCatalog
from aviso_plugins.openapi import (
    Doc,
    auth_responses,
    json_response,
    request_body,
    response_object,
    schema_ref,
)


def schema_operations(catalog: SchemaCatalog | None, first: str) -> Doc:
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
                    "200": json_response(
                        "The public part of every schema entry (`identifier`, `payload`).",
                        schema_ref("SchemaCatalogue"),
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
                    "200": json_response(
                        "The schema entry.",
                        schema_ref("SchemaDetail"),
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
                    "404": json_response(
                        "Unknown event type, or no schema configured at all.",
                        schema_ref("SchemaNotFound"),
                        unknown={
                            "available_types": event_types,
                            "message": "Event type 'tide_gauge' not found",
                            "request_id": RID_SCHEMA,
                            "status": "error",
                        },
                        not_configured={
                            "message": "No notification schema configured",
                            "request_id": RID_SCHEMA,
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


def admin_operations(event_type: str) -> Doc:
    notification_id = f"{event_type}@1"

    def deleted(success: bool, message: str, notification_id: str = notification_id) -> Doc:
        return {
            "success": success,
            "message": message,
            "notification_id": notification_id,
            "request_id": RID_ADMIN,
        }

    def wiped(success: bool, message: str) -> Doc:
        return {"success": success, "message": message, "request_id": RID_ADMIN}

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
                "security": ADMIN_CREDENTIALS,
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
                    "200": json_response(
                        "Deleted.",
                        schema_ref("AdminNotificationResult"),
                        deleted=deleted(True, "Notification deleted"),
                    ),
                    "400": json_response(
                        "`notification_id` is not `<stream>@<sequence>` with a topic base or "
                        "event type and a sequence in 1..2^64-1.",
                        schema_ref("AdminNotificationResult"),
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
                    **auth_responses(),
                    "404": json_response(
                        "No such notification (or stream).",
                        schema_ref("AdminNotificationResult"),
                        not_found=deleted(False, "Notification not found", "river_gauge@999999999"),
                    ),
                    "500": json_response(
                        "The backend failed.",
                        schema_ref("AdminNotificationResult"),
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
                "security": ADMIN_CREDENTIALS,
                "requestBody": request_body(
                    "WipeStreamRequest", {event_type: {"stream_name": event_type}}
                ),
                "responses": {
                    "200": admin_result(
                        "Wiped.", wiped=wiped(True, "Successfully wiped stream: GAUGE")
                    ),
                    "400": admin_result(
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
                    **auth_responses(),
                    "404": admin_result(
                        "No such stream (a configured one never written to wipes as a no-op).",
                        not_found=wiped(False, "Stream not found"),
                    ),
                    "500": admin_result(
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
                "security": ADMIN_CREDENTIALS,
                "responses": {
                    "200": admin_result("Wiped.", wiped=wiped(True, "Successfully wiped all data")),
                    **auth_responses(),
                    "500": admin_result(
                        "The backend failed.",
                        backend_failure=wiped(False, "Failed to wipe all data: timed out"),
                    ),
                },
            },
        },
    }


def operational_operations() -> Doc:
    return {
        "/health": {
            "get": {
                "tags": ["health"],
                "operationId": "health",
                "summary": "Liveness probe",
                "responses": {
                    "200": json_response("Alive.", schema_ref("Health"), ok={"status": "ok"}),
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
                    "200": json_response(
                        "Ready.",
                        schema_ref("Readiness"),
                        ready={"status": "ready", "backend_connected": True},
                    ),
                    "503": json_response(
                        "The backend is not connected.",
                        schema_ref("Readiness"),
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
                    "200": json_response(
                        "The status.",
                        schema_ref("Status"),
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
                    "200": response_object("HTML page.", "text/html", {"type": "string"}),
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
                    "200": response_object("HTML page.", "text/html", {"type": "string"}),
                },
            },
        },
    }
