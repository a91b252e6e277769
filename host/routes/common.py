"""Steps shared by notify, watch and replay: body, strict event-type gate, error answers."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp

from aviso_host.errors import (
    ApiError,
    Endpoint,
    internal_error,
    internal_failure,
    json_response,
    unknown_event_type,
)
from aviso_host.logs import echoed, log_event
from aviso_host.requests import BodyTooLarge, RequestBody, parse_body, read_body
from aviso_host.schemas import EventSchema
from aviso_host.service import Service
from aviso_plugins.types import Caller

Handler = Callable[[Request], Awaitable[ASGIApp]]


def service_of(request: Request) -> Service:
    service: Service = request.app.service
    return service


def request_id_of(request: Request) -> str:
    request_id: str = request.scope["state"]["request_id"]
    return request_id


def caller_of(request: Request) -> Caller | None:
    """The caller the auth middleware resolved; ``None`` when anonymous or auth is off."""
    caller: Caller | None = request.scope["state"].get("caller")
    return caller


async def read_request(request: Request, endpoint: Endpoint) -> RequestBody:
    """Steps 2-5: read, parse, whitelist keys, check the shape."""
    max_depth = service_of(request).settings.limits.max_json_depth
    return parse_body(await read_body(request), endpoint, max_depth=max_depth)


def schema_for(service: Service, body: RequestBody) -> EventSchema | None:
    """Step 6: in strict mode an unknown event type is refused before anything else."""
    schema = service.catalog.get(body.event_type)
    if schema is None and service.catalog.strict:
        raise unknown_event_type(body.event_type, service.catalog.event_types)
    return schema


def error_response(request: Request, error: ApiError, **log_fields: str) -> Response:
    if not error.logged:
        level = logging.ERROR if error.status >= 500 else logging.WARNING
        # Messages echo the rejected input: the line carries it once, and only its start.
        if error.details != error.message:
            log_fields = {"details": echoed(error.details), **log_fields}
        log_event(
            error.event_name, echoed(error.message), level, None, code=error.code, **log_fields
        )
    return json_response(error.body(request_id_of(request)), error.status, headers=error.headers)


def api_endpoint(handler: Handler) -> Handler:
    """Turn ApiError into the aviso error object (oversize bodies are answered by the
    body-limit middleware around the app), and any other failure (a plugin that crashed)
    into the generic 500, logged here while the request's caller is still known."""

    async def endpoint(request: Request) -> ASGIApp:
        service = service_of(request)
        if not service.started:  # the attribute, not a coroutine per request once started
            await service.ensure_started()
        try:
            return await handler(request)
        except ApiError as error:
            return error_response(request, error)
        except (BodyTooLarge, ClientDisconnect):
            raise  # the edge answers or logs these
        except Exception as exc:
            return error_response(request, internal_failure(internal_error(), exc))

    return endpoint
