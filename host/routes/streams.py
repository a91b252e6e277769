"""POST /api/v1/watch and POST /api/v1/replay: validate, plan, then hand over to the stream."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp

from aviso_host.auth.policy import check_stream_policy, run_authorisers
from aviso_host.auth.reauthorise import reauthorisation
from aviso_host.cursors import CursorError, parse_from_date, parse_from_id, to_ns
from aviso_host.errors import Endpoint, stream_setup_error, validation_error
from aviso_host.identifiers import plan_stream_filter
from aviso_host.metrics import REPLAY_ROUTE, WATCH_ROUTE
from aviso_host.requests import RequestBody
from aviso_host.routes.common import (
    api_endpoint,
    caller_of,
    error_response,
    read_request,
    request_id_of,
    schema_for,
    service_of,
)
from aviso_host.schemas import POINT, POLYGON
from aviso_host.service import Service
from aviso_host.streaming.control import LiveQueue, StreamControl
from aviso_host.streaming.stream import EventStream, ReplayStart
from aviso_plugins.geometry import parse_point_value
from aviso_plugins.numbers import json_scalar_text
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import InvalidValue, StartCursor, Subscription

_MISSING_CURSOR = (
    "Replay endpoint requires either from_id or from_date parameter. "
    "Use from_id for sequence-based replay or from_date for time-based replay."
)
_BOTH_CURSORS = (
    "Cannot specify both from_id and from_date. Please provide only one replay parameter. "
    "Use from_id for sequence-based replay or from_date for time-based replay."
)


def spatial_point(identifier: dict[str, Any]) -> tuple[float, float] | None:
    """Spatial sanity (runs before the cursor rules)."""
    if POLYGON in identifier and POINT in identifier:
        raise InvalidValue(
            "Cannot specify both identifier.polygon and identifier.point. "
            "Provide only one spatial filter."
        )
    if POINT not in identifier:
        return None
    value = identifier[POINT]
    if value is None or isinstance(value, dict):
        kind = "null" if value is None else "object"
        raise InvalidValue(f"identifier.point must be a [lat, lon] array or a string: got {kind}")
    try:
        return parse_point_value(value if isinstance(value, list) else json_scalar_text(value))
    except ValueError as exc:
        raise InvalidValue(
            f"identifier.point must be a valid 'lat,lon' coordinate pair: {exc}"
        ) from exc


def replay_start(body: RequestBody, endpoint: Endpoint) -> ReplayStart | None:
    try:
        from_id = parse_from_id(body.from_id) if body.from_id is not None else None
        from_date = parse_from_date(body.from_date) if body.from_date is not None else None
    except CursorError as exc:
        raise InvalidValue(str(exc)) from exc
    if from_id is not None and from_date is not None:
        raise InvalidValue(_BOTH_CURSORS)
    if from_id is not None:
        return ReplayStart(StartCursor(from_sequence=from_id), from_id, None)
    if from_date is not None:
        return ReplayStart(StartCursor(from_time_ns=to_ns(from_date)), None, from_date)
    if endpoint is Endpoint.REPLAY:
        raise InvalidValue(_MISSING_CURSOR)
    return None


async def open_live(
    service: Service, control: StreamControl, pattern: TopicPattern
) -> tuple[LiveQueue, Subscription]:
    """A live queue subscribed to ``pattern``; raises whatever the backend raises."""
    watch = service.settings.watch
    live = LiveQueue(
        control, service.backend.live_buffer_size, watch.max_queue_bytes, watch.on_backpressure
    )
    return live, await service.backend.subscribe(pattern, live)


async def _open_stream(request: Request, endpoint: Endpoint) -> ASGIApp:
    service = service_of(request)
    body = await read_request(request, endpoint)
    schema = schema_for(service, body)
    caller = caller_of(request)
    check_stream_policy(service.auth, schema, caller, write=False)
    try:
        point = spatial_point(body.identifier)
        replay = replay_start(body, endpoint)
        stream_filter = plan_stream_filter(
            schema, body.event_type, body.identifier, endpoint.operation, point
        )
    except InvalidValue as exc:
        raise validation_error(endpoint, exc.message, exc.details) from exc
    await run_authorisers(service.auth, schema, caller, stream_filter.requested)

    control = StreamControl(request_id_of(request))
    access = reauthorisation(service.auth, schema, caller, stream_filter.requested, control)
    live: LiveQueue | None = None
    subscription = None
    if endpoint is Endpoint.WATCH:
        try:
            live, subscription = await open_live(service, control, stream_filter.pattern)
        except Exception as exc:
            if replay is None:
                return error_response(
                    request,
                    stream_setup_error(str(exc), stream_filter.pattern.display),
                    event_type=body.event_type,
                    topic=stream_filter.pattern.display,
                )
            # A cursor watch still gets its replay, then ends with end_of_stream.
            live = None
    return EventStream(
        backend=service.backend,
        renderer=service.renderer,
        settings=service.settings.watch,
        streams=service.streams,
        control=control,
        stream_filter=stream_filter,
        replay=replay,
        live=live,
        subscription=subscription,
        is_watch=endpoint is Endpoint.WATCH,
        metrics=service.metrics.sse_connection(
            WATCH_ROUTE if endpoint is Endpoint.WATCH else REPLAY_ROUTE,
            body.event_type,
            caller.username if caller is not None else None,
        ),
        reauthorisation=access,
    )


@api_endpoint
async def watch(request: Request) -> ASGIApp:
    return await _open_stream(request, Endpoint.WATCH)


@api_endpoint
async def replay(request: Request) -> ASGIApp:
    return await _open_stream(request, Endpoint.REPLAY)
