"""DELETE /api/v1/admin/...: delete one notification, wipe one stream, wipe everything.

Bodies are typed (declared key order, not sorted), as the contract specifies. A stream name
is checked before any backend sees it (a topic base or a configured event type): NATS reads
``*``, ``>``, dots and spaces in a stream name as syntax, not as a name.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from aviso_host.api_shapes import AdminNotificationResult, AdminResult
from aviso_host.cursors import parse_u64
from aviso_host.encoding import loads
from aviso_host.errors import json_response, log_failure
from aviso_host.identifiers import MAX_BASE_CHARS, TOPIC_BASE
from aviso_host.logs import log_event
from aviso_host.requests import read_body
from aviso_host.routes.common import request_id_of, service_of
from aviso_host.schemas import SchemaCatalog
from aviso_plugins._shared.json_depth import exceeds_json_depth
from aviso_plugins.types import UnknownStream

_INVALID_NAME = (
    "must be a topic base ([A-Za-z0-9][A-Za-z0-9_-]*, at most "
    f"{MAX_BASE_CHARS} characters) or a configured event type"
)


def _stream_key(catalog: SchemaCatalog, name: str) -> str | None:
    """The stream an admin name addresses, or ``None`` when it cannot name one."""
    key = catalog.resolve_stream_key(name)
    if key in {schema.base for schema in catalog.schemas.values()}:
        return key
    if len(key) <= MAX_BASE_CHARS and TOPIC_BASE.fullmatch(key):
        return key
    return None


def _is_configured(catalog: SchemaCatalog, key: str) -> bool:
    return key.lower() in {schema.base.lower() for schema in catalog.schemas.values()}


def _admin_body(request: Request, success: bool, message: str) -> AdminResult:
    return {"success": success, "message": message, "request_id": request_id_of(request)}


async def delete_notification(request: Request) -> Response:
    service = service_of(request)
    await service.ensure_started()
    raw = request.path_params["notification_id"]

    def answer(status: int, success: bool, message: str) -> Response:
        body: AdminNotificationResult = {
            "success": success,
            "message": message,
            "notification_id": raw,
            "request_id": request_id_of(request),
        }
        return json_response(body, status, sort_keys=False)

    name, separator, sequence_text = raw.strip().partition("@")
    if not separator or not name or not sequence_text:
        return answer(400, False, "notification_id must be in '<stream>@<sequence>' format")
    sequence = parse_u64(sequence_text)
    if sequence is None:
        return answer(400, False, "notification_id sequence must be a positive integer")
    if sequence == 0:
        return answer(400, False, "notification_id sequence must be greater than zero")
    key = _stream_key(service.catalog, name)
    if key is None:
        return answer(400, False, f"notification_id stream {_INVALID_NAME}")
    try:
        deleted = await service.backend.delete_message(key, sequence)
    except Exception as exc:
        log_failure("admin.delete.failed", "Failed to delete notification", exc)
        return answer(500, False, "Failed to delete notification")
    if not deleted:
        return answer(404, False, "Notification not found")
    log_event("admin.notification.deleted", "notification deleted", notification_id=raw)
    return answer(200, True, "Notification deleted")


async def _stream_name(request: Request) -> str:
    """``stream_name`` of a wipe body; ``ValueError`` says what is wrong with the body."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise ValueError("Content-Type must be application/json")
    try:
        text = (await read_body(request)).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("the body is not UTF-8") from exc
    limit = service_of(request).settings.limits.max_json_depth
    if exceeds_json_depth(text, limit):
        raise ValueError(f"the body nests deeper than {limit} levels (limits.max_json_depth)")
    try:
        document = loads(text)
    except ValueError:
        raise ValueError("the body is not valid JSON") from None
    if not isinstance(document, dict) or "stream_name" not in document:
        raise ValueError("the body must be an object with a stream_name member")
    name = document["stream_name"]
    if not isinstance(name, str):
        raise ValueError("stream_name must be a string")
    return name


async def wipe_stream(request: Request) -> Response:
    service = service_of(request)
    await service.ensure_started()

    def refused(status: int, message: str) -> Response:
        return json_response(_admin_body(request, False, message), status, sort_keys=False)

    try:
        name = await _stream_name(request)
    except ValueError as exc:
        return refused(400, f"Json deserialize error: {exc}")
    key = _stream_key(service.catalog, name)
    if key is None:
        return refused(400, f"stream_name {_INVALID_NAME}")
    try:
        await service.backend.wipe_stream(key)
    except UnknownStream:
        # A configured stream that was never written to does not exist yet: nothing to wipe.
        if not _is_configured(service.catalog, key):
            return refused(404, "Stream not found")
    except Exception as exc:
        log_failure("admin.wipe_stream.failed", "Failed to wipe stream", exc, stream=name)
        body = _admin_body(request, False, "Failed to wipe stream")
        return json_response(body, 500, sort_keys=False)
    log_event("admin.stream.wiped", "stream wiped", logging.WARNING, stream=name)
    body = _admin_body(request, True, f"Successfully wiped stream: {name}")
    return json_response(body, sort_keys=False)


async def wipe_all(request: Request) -> Response:
    service = service_of(request)
    await service.ensure_started()
    try:
        await service.backend.wipe_all()
    except Exception as exc:
        log_failure("admin.wipe_all.failed", "Failed to wipe all data", exc)
        body = _admin_body(request, False, "Failed to wipe all data")
        return json_response(body, 500, sort_keys=False)
    log_event("admin.all.wiped", "all data wiped", logging.WARNING)
    return json_response(_admin_body(request, True, "Successfully wiped all data"), sort_keys=False)
