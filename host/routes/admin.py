"""DELETE /api/v1/admin/...: delete one notification, wipe one stream, wipe everything.

Bodies are typed (declared key order, not sorted), as the contract specifies.
"""

from __future__ import annotations

import logging
import re

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from aviso_host.encoding import loads
from aviso_host.errors import json_response
from aviso_host.logs import log_event
from aviso_host.routes.common import request_id_of, service_of

_SEQUENCE = re.compile(r"\+?[0-9]+", re.ASCII)
_U64_MAX = 2**64 - 1


def _admin_body(
    request: Request, success: bool, message: str, **extra: object
) -> dict[str, object]:
    return {"success": success, "message": message, **extra, "request_id": request_id_of(request)}


async def delete_notification(request: Request) -> Response:
    service = service_of(request)
    await service.ensure_started()
    raw = request.path_params["notification_id"]

    def answer(status: int, success: bool, message: str) -> Response:
        body = _admin_body(request, success, message, notification_id=raw)
        return json_response(body, status, sort_keys=False)

    name, separator, sequence_text = raw.strip().partition("@")
    if not separator or not name or not sequence_text:
        return answer(400, False, "notification_id must be in '<stream>@<sequence>' format")
    if not _SEQUENCE.fullmatch(sequence_text) or int(sequence_text) > _U64_MAX:
        return answer(400, False, "notification_id sequence must be a positive integer")
    sequence = int(sequence_text)
    if sequence == 0:
        return answer(400, False, "notification_id sequence must be greater than zero")
    try:
        deleted = await service.backend.delete_message(
            service.catalog.resolve_stream_key(name), sequence
        )
    except Exception as exc:
        log_event("admin.delete.failed", str(exc), logging.ERROR)
        return answer(500, False, f"Failed to delete notification: {exc}")
    if not deleted:
        return answer(404, False, "Notification not found")
    log_event("admin.notification.deleted", "notification deleted", notification_id=raw)
    return answer(200, True, "Notification deleted")


async def wipe_stream(request: Request) -> Response:
    service = service_of(request)
    await service.ensure_started()
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if content_type != "application/json":
            raise ValueError("Content-Type must be application/json")
        document = loads(await request.body())
        name = document["stream_name"]
        if not isinstance(name, str):
            raise ValueError("stream_name must be a string")
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        return PlainTextResponse(f"Json deserialize error: {exc}", status_code=400)
    try:
        await service.backend.wipe_stream(name)
    except Exception as exc:
        log_event("admin.wipe_stream.failed", str(exc), logging.ERROR, stream=name)
        body = _admin_body(request, False, f"Failed to wipe stream: {exc}")
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
        log_event("admin.wipe_all.failed", str(exc), logging.ERROR)
        body = _admin_body(request, False, f"Failed to wipe all data: {exc}")
        return json_response(body, 500, sort_keys=False)
    log_event("admin.all.wiped", "all data wiped", logging.WARNING)
    return json_response(_admin_body(request, True, "Successfully wiped all data"), sort_keys=False)
