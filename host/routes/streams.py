"""POST /api/v1/watch and POST /api/v1/replay: validate, plan, then hand over to the stream."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from aviso_host.auth.policy import check_stream_policy, run_authorisers
from aviso_host.auth.reauthorise import reauthorisation
from aviso_host.cursors import (
    CursorError,
    parse_from_date,
    parse_from_id,
    parse_to_date,
    parse_to_id,
    rfc3339,
    to_ns,
)
from aviso_host.errors import Endpoint, internal_failure, stream_setup_error, validation_error
from aviso_host.filtering import StreamFilter
from aviso_host.identifiers import check_identifier_values, check_topic_size, plan_stream_filter
from aviso_host.logs import log_event
from aviso_host.metrics import REPLAY_ROUTE, WATCH_ROUTE
from aviso_host.requests import RequestBody
from aviso_host.routes.common import (
    Handler,
    api_endpoint,
    caller_of,
    error_response,
    read_request,
    request_id_of,
    schema_for,
    service_of,
)
from aviso_host.schemas import POINT, POLYGON, EventSchema
from aviso_host.service import Service
from aviso_host.streaming.control import LiveQueue, StreamControl
from aviso_host.streaming.stream import EventStream, ReplayStart
from aviso_host.streaming.summary import SummaryStream
from aviso_plugins._shared.geometry import parse_point_value
from aviso_plugins._shared.numbers import json_scalar_text
from aviso_plugins.service import Summary
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import Caller, InvalidValue, StartCursor, Subscription

_MISSING_CURSOR = (
    "Replay endpoint requires either from_id or from_date parameter. "
    "Use from_id for sequence-based replay or from_date for time-based replay."
)
_BOTH_CURSORS = (
    "Cannot specify both from_id and from_date. Please provide only one replay parameter. "
    "Use from_id for sequence-based replay or from_date for time-based replay."
)

_Cursor = TypeVar("_Cursor", int, datetime)

_BOTH_ENDS = (
    "Cannot specify both to_id and to_date. Please provide only one replay end parameter. "
    "Use to_id for a sequence-based end or to_date for a time-based end."
)

_PATHS = {
    Endpoint.NOTIFY: "notification",
    Endpoint.WATCH: "watch",
    Endpoint.AGGREGATE: "aggregate",
    Endpoint.SUBSCRIPTION: "subscriptions",
}


def end_point_refused(body: RequestBody, endpoint: Endpoint) -> str | None:
    """The message refusing ``to_id`` / ``to_date`` outside the replay endpoint."""
    if endpoint is Endpoint.REPLAY or (body.to_id is None and body.to_date is None):
        return None
    return f"to_id and to_date are only supported for the replay endpoint, not /{_PATHS[endpoint]}"


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
    refused = end_point_refused(body, endpoint)
    if refused is not None:
        raise InvalidValue(refused)
    from_id = _parsed(parse_from_id, body.from_id)
    from_date = _parsed(parse_from_date, body.from_date)
    if from_id is not None and from_date is not None:
        raise InvalidValue(_BOTH_CURSORS)
    if from_id is None and from_date is None:
        if endpoint is Endpoint.REPLAY:
            raise InvalidValue(_MISSING_CURSOR)
        return None
    cursor = (
        StartCursor(from_sequence=from_id)
        if from_date is None
        else StartCursor(from_time_ns=to_ns(from_date))
    )
    to_id, to_date = _replay_end(body, from_id, from_date)
    return ReplayStart(
        cursor,
        from_id,
        from_date,
        to_sequence=to_id,
        to_time_ns=to_ns(to_date) if to_date is not None else None,
    )


def _parsed(parse: Callable[[str], _Cursor], raw: str | None) -> _Cursor | None:
    if raw is None:
        return None
    try:
        return parse(raw)
    except CursorError as exc:
        raise InvalidValue(str(exc)) from exc


def _replay_end(
    body: RequestBody, from_id: int | None, from_date: datetime | None
) -> tuple[int | None, datetime | None]:
    """``to_id`` / ``to_date``, checked only once the start is valid. An end of the other
    kind than the start is never compared with it (the replay may then be empty)."""
    if body.to_id is not None and body.to_date is not None:
        raise InvalidValue(_BOTH_ENDS)
    to_id = _parsed(parse_to_id, body.to_id)
    to_date = _parsed(parse_to_date, body.to_date)
    if to_id is not None and from_id is not None and to_id < from_id:
        raise InvalidValue(f"to_id ({to_id}) must not be lower than from_id ({from_id})")
    if to_date is not None and from_date is not None and to_date < from_date:
        raise InvalidValue(
            f"to_date ({rfc3339(to_date)}) must not be earlier than "
            f"from_date ({rfc3339(from_date)})"
        )
    return to_id, to_date


async def open_live(
    service: Service, control: StreamControl, pattern: TopicPattern
) -> tuple[LiveQueue, Subscription]:
    """A live queue subscribed to ``pattern``; raises whatever the backend raises."""
    watch = service.settings.watch
    live = LiveQueue(
        control, service.backend.live_buffer_size, watch.max_queue_bytes, watch.on_backpressure
    )
    return live, await service.backend.subscribe(pattern, live)


async def admitted_stream(
    service: Service,
    caller: Caller | None,
    body: RequestBody,
    endpoint: Endpoint,
    check: Callable[[EventSchema | None], None] | None = None,
) -> tuple[EventSchema | None, StreamFilter, ReplayStart | None]:
    """A stream request's checks, in order: event type, stream roles, identifier, cursor,
    topic size, the endpoint's own ``check`` (raising :class:`InvalidValue`), then the
    stream's authorisers; the schema, filter and start they give."""
    schema = schema_for(service, body)
    check_stream_policy(service.auth, schema, caller, write=False)
    try:
        check_identifier_values(
            schema, body.identifier, service.settings.limits.max_identifier_value_bytes
        )
        point = spatial_point(body.identifier)
        replay = replay_start(body, endpoint)
        stream_filter = plan_stream_filter(
            schema, body.event_type, body.identifier, endpoint.operation, point
        )
        check_topic_size(stream_filter.pattern.encoded, service.settings.limits.max_topic_bytes)
        if check is not None:
            check(schema)
    except InvalidValue as exc:
        raise validation_error(endpoint, exc.message, exc.details) from exc
    await run_authorisers(service.auth, schema, caller, stream_filter.requested)
    return schema, stream_filter, replay


ALL_HISTORY = ReplayStart(StartCursor(from_sequence=0), 0, None)
"""From the oldest notification retained."""


@dataclass(frozen=True, slots=True)
class Opening:
    """How a stream goes on from its admitted request (:func:`open_stream`)."""

    route: str
    """What its metrics are labelled with."""
    watch: bool = True
    """Live after the history; a replay ends with it."""
    needs_live: bool = False
    """A live subscription that fails refuses the request (otherwise the history is still
    sent, then ``end_of_stream`` so that the client reconnects)."""
    event_ids: bool = False
    """Notification frames carry ``id: <sequence>``."""
    on_delivered: Callable[[StreamControl], Callable[[int], Awaitable[None]]] | None = None
    """Given the stream's control, what is awaited with the highest sequence of each write."""
    summary: Summary | None = None
    """Written in place of the notifications (a summary stream), once per ``debounce_ms``."""
    debounce_ms: int = 0


async def open_stream(
    service: Service,
    request: Request,
    caller: Caller | None,
    event_type: str,
    admitted: tuple[EventSchema | None, StreamFilter, ReplayStart | None],
    opening: Opening,
) -> tuple[ASGIApp, StreamControl | None]:
    """The stream answering an admitted request (:func:`admitted_stream`), sized by the
    caller's watch settings, with its control; an error answer and ``None`` when it cannot
    be opened."""
    schema, stream_filter, replay = admitted
    control = StreamControl(request_id_of(request))
    access = reauthorisation(service.auth, schema, caller, stream_filter.requested, control)
    live: LiveQueue | None = None
    subscription = None
    if opening.watch:
        try:
            live, subscription = await open_live(service, control, stream_filter.pattern)
        except Exception as exc:
            display = stream_filter.pattern.display
            if opening.needs_live or replay is None:
                error = stream_setup_error("Failed to create stream consumer", display)
                internal_failure(error, exc, event_type=event_type, topic=display)
                return error_response(request, error), None
            log_event("stream.subscribe.failed", str(exc), logging.WARNING, topic=display)
    username = caller.username if caller is not None else None
    stream: dict[str, Any] = dict(
        backend=service.backend,
        renderer=service.renderer,
        settings=service.settings.watch_for(event_type, username),
        streams=service.streams,
        control=control,
        stream_filter=stream_filter,
        live=live,
        subscription=subscription,
        metrics=service.metrics.sse_connection(opening.route, event_type, username),
        reauthorisation=access,
    )
    if opening.summary is not None:
        assert replay is not None  # a summary always takes history in first
        debounce_ms = opening.debounce_ms
        return SummaryStream(
            summary=opening.summary, debounce_ms=debounce_ms, replay=replay, **stream
        ), control
    return EventStream(
        replay=replay,
        is_watch=opening.watch,
        event_ids=opening.event_ids,
        on_delivered=None if opening.on_delivered is None else opening.on_delivered(control),
        **stream,
    ), control


async def _open_stream(request: Request, endpoint: Endpoint) -> ASGIApp:
    service = service_of(request)
    body = await read_request(request, endpoint)
    caller = caller_of(request)
    admitted = await admitted_stream(service, caller, body, endpoint)
    watch = endpoint is Endpoint.WATCH
    opening = Opening(WATCH_ROUTE if watch else REPLAY_ROUTE, watch=watch)
    app, _ = await open_stream(service, request, caller, body.event_type, admitted, opening)
    return app


@api_endpoint
async def watch(request: Request) -> ASGIApp:
    return await _open_stream(request, Endpoint.WATCH)


@api_endpoint
async def replay(request: Request) -> ASGIApp:
    return await _open_stream(request, Endpoint.REPLAY)


class StreamRoute:
    """A stream endpoint as a plain ASGI app (a class, so Starlette's ``Route`` does not wrap
    it in ``request_response``): the request stays suspended for as long as its stream lives,
    and each wrapping layer would be frames and closures held by every open watch."""

    __slots__ = ("_handler",)

    def __init__(self, handler: Handler) -> None:
        self._handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._handler(Request(scope, receive))
        await response(scope, receive, send)
