"""POST /api/v1/aggregate: a watch answered with counts grouped by identifier fields.

The request is a watch body plus ``group_by`` (required) and ``debounce_ms`` (optional) and
goes through the watch pipeline step for step; only the error label and code are its own
(``Invalid Aggregate Request`` / ``INVALID_AGGREGATE_REQUEST``).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp

from aviso_host.auth.policy import check_stream_policy, run_authorisers
from aviso_host.auth.reauthorise import reauthorisation
from aviso_host.errors import Endpoint, validation_error
from aviso_host.identifiers import check_identifier_values, check_topic_size, plan_stream_filter
from aviso_host.logs import log_event
from aviso_host.metrics import AGGREGATE_ROUTE
from aviso_host.requests import invalid_type, missing_field, parse_body, read_body
from aviso_host.routes.common import (
    api_endpoint,
    caller_of,
    request_id_of,
    schema_for,
    service_of,
)
from aviso_host.routes.streams import open_live, replay_start, spatial_point
from aviso_host.streaming.aggregate import (
    DEFAULT_DEBOUNCE_MS,
    AggregateStream,
    check_debounce,
    plan_group_counts,
)
from aviso_host.streaming.control import LiveQueue, StreamControl
from aviso_host.streaming.stream import ReplayStart
from aviso_plugins.types import InvalidValue, StartCursor, Subscription

ENDPOINT = Endpoint.AGGREGATE
AGGREGATE_FIELDS = ("group_by", "debounce_ms")
# Without a cursor the counts start from everything retained: a live-only count would
# begin at zero and say nothing about what has already arrived.
ALL_HISTORY = ReplayStart(StartCursor(from_sequence=0), 0, None)


def _group_by(extras: dict[str, Any]) -> list[str]:
    if "group_by" not in extras:
        raise missing_field(ENDPOINT, "group_by")
    value = extras["group_by"]
    if not isinstance(value, list):
        raise invalid_type(ENDPOINT, value, "a sequence")
    for item in value:
        if not isinstance(item, str):
            raise invalid_type(ENDPOINT, item, "a string")
    return value


def _debounce_ms(extras: dict[str, Any], minimum: int) -> int:
    # A configured minimum above the default raises the default with it: a request
    # without debounce_ms is never refused.
    value = extras.get("debounce_ms", max(DEFAULT_DEBOUNCE_MS, minimum))
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_type(ENDPOINT, value, "an integer")
    return value


@api_endpoint
async def aggregate(request: Request) -> ASGIApp:
    service = service_of(request)
    limits = service.settings.limits
    body = parse_body(await read_body(request), ENDPOINT, AGGREGATE_FIELDS, limits.max_json_depth)
    group_by = _group_by(dict(body.extras))
    debounce_ms = _debounce_ms(dict(body.extras), limits.min_aggregate_debounce_ms)
    schema = schema_for(service, body)
    caller = caller_of(request)
    check_stream_policy(service.auth, schema, caller, write=False)
    try:
        check_identifier_values(
            schema, body.identifier, service.settings.limits.max_identifier_value_bytes
        )
        point = spatial_point(body.identifier)
        replay = replay_start(body, ENDPOINT) or ALL_HISTORY
        check_debounce(debounce_ms, limits.min_aggregate_debounce_ms)
        stream_filter = plan_stream_filter(
            schema, body.event_type, body.identifier, ENDPOINT.operation, point
        )
        check_topic_size(stream_filter.pattern.encoded, limits.max_topic_bytes)
        counts = plan_group_counts(schema, body.identifier, group_by, limits.max_aggregate_groups)
    except InvalidValue as exc:
        raise validation_error(ENDPOINT, exc.message, exc.details) from exc
    await run_authorisers(service.auth, schema, caller, stream_filter.requested)

    control = StreamControl(request_id_of(request))
    access = reauthorisation(service.auth, schema, caller, stream_filter.requested, control)
    live: LiveQueue | None
    subscription: Subscription | None
    try:
        live, subscription = await open_live(service, control, stream_filter.pattern)
    except Exception as exc:
        # Like a cursor watch: the history is still counted, then the stream ends with
        # end_of_stream so that the client reconnects.
        log_event(
            "stream.subscribe.failed",
            str(exc),
            logging.WARNING,
            topic=stream_filter.pattern.display,
        )
        live, subscription = None, None
    return AggregateStream(
        counts=counts,
        debounce_ms=debounce_ms,
        backend=service.backend,
        renderer=service.renderer,
        settings=service.settings.watch_for(body.event_type),
        streams=service.streams,
        control=control,
        stream_filter=stream_filter,
        replay=replay,
        live=live,
        subscription=subscription,
        metrics=service.metrics.sse_connection(
            AGGREGATE_ROUTE, body.event_type, caller.username if caller is not None else None
        ),
        reauthorisation=access,
    )
