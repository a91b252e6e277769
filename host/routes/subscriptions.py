"""``/api/v1/subscriptions``: named subscriptions whose cursor the server keeps, pulled over
Server-Sent Events.

A subscription's filter is validated exactly as a watch's (same checks, same messages, its
own error label), and checked against the stream's roles and authorisers when it is created
and again whenever its events are read; an open events stream is re-authorised as a watch
is. The events stream is a cursor watch from the subscription's cursor, through the same
:class:`EventStream` (heartbeats, backpressure, maximum duration, shutdown), whose
notification frames also carry ``id: <sequence>``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from aviso_host.auth.reauthorise import reauthorisation
from aviso_host.cursors import now_whole_seconds, to_ns
from aviso_host.deliveries import DeliveryRunner, push_counts, push_document, take_dead_letters
from aviso_host.encoding import dumps, loads
from aviso_host.errors import (
    ApiError,
    Endpoint,
    internal_failure,
    json_response,
    parse_error,
    stream_setup_error,
    validation_error,
)
from aviso_host.filtering import StreamFilter
from aviso_host.logs import echoed, log_event
from aviso_host.metrics import SUBSCRIPTION_EVENTS_ROUTE
from aviso_host.requests import RequestBody, parse_body, read_body
from aviso_host.routes.common import (
    api_endpoint,
    caller_of,
    error_response,
    request_id_of,
    service_of,
)
from aviso_host.routes.streams import StreamRoute, admitted_stream, open_live
from aviso_host.service import Service
from aviso_host.streaming.control import StreamControl
from aviso_host.streaming.stream import EventStream, ReplayStart
from aviso_host.subscriptions import (
    ACTIVE,
    FORBIDDEN,
    SubscriptionEntry,
    SubscriptionStore,
    caller_document,
    caller_from,
    end_when_deleted,
    valid_name,
)
from aviso_plugins._shared.json_depth import exceeds_json_depth
from aviso_plugins.types import DeliveryKind, InvalidValue, PreparedDelivery, StartCursor

ENDPOINT = Endpoint.SUBSCRIPTION
ACK_LABEL = "Invalid Acknowledgement"
LAST_EVENT_ID = "last-event-id"
_MAX_SEQUENCE = 2**64 - 1
_AUTHENTICATION_REQUIRED = "Authentication is required for subscriptions"


# -- errors ----------------------------------------------------------------------------------


def _invalid_name(name: str) -> ApiError:
    return ApiError(
        400,
        "INVALID_SUBSCRIPTION_NAME",
        "Invalid Subscription Name",
        f"subscription name '{echoed(name)}' must be 1 to 64 letters, digits, '-', '_' or '.' "
        "(not '.' or '..')",
    )


def _not_found(name: str) -> ApiError:
    return ApiError(
        404,
        "SUBSCRIPTION_NOT_FOUND",
        "Subscription Not Found",
        f"no subscription named '{echoed(name)}'",
        event_name="api.subscription.not_found",
    )


def _conflict(name: str) -> ApiError:
    return ApiError(
        409,
        "SUBSCRIPTION_CONFLICT",
        "Subscription Conflict",
        f"subscription '{echoed(name)}' exists with a different definition: delete it first",
    )


def _too_many(message: str) -> ApiError:
    return ApiError(429, "TOO_MANY_SUBSCRIPTIONS", "Too Many Subscriptions", message)


def _unsupported_delivery(kinds: list[str]) -> ApiError:
    offered = (
        f"its 'kind' must be one of {', '.join(repr(kind) for kind in kinds)}"
        if kinds
        else "this server pushes no deliveries: leave out 'delivery' and read "
        "GET /api/v1/subscriptions/{name}/events"
    )
    return ApiError(
        400,
        "UNSUPPORTED_DELIVERY",
        "Unsupported Delivery",
        f"'delivery' must be an object naming a delivery kind: {offered}",
    )


def _invalid_ack(message: str) -> ApiError:
    return ApiError(400, "INVALID_ACKNOWLEDGEMENT", ACK_LABEL, message)


# -- the steps shared by every route ---------------------------------------------------------


def _runner(service: Service) -> DeliveryRunner:
    runner = service.deliveries
    assert runner is not None  # present whenever the store is
    return runner


def _store(service: Service) -> SubscriptionStore:
    store = service.subscriptions
    assert store is not None  # the routes exist only with a store
    return store


def _owner(service: Service, request: Request) -> str | None:
    """The namespace: the caller's name with auth on (anonymous callers are refused), the
    shared one with auth off."""
    if service.auth is None:
        return None
    caller = caller_of(request)
    if caller is None:
        raise service.auth.failure(401, _AUTHENTICATION_REQUIRED)
    return caller.username


def _name(request: Request) -> str:
    name: str = request.path_params["name"]
    if not valid_name(name):
        raise _invalid_name(name)
    return name


async def _entry(service: Service, request: Request) -> SubscriptionEntry:
    """The caller's subscription of the path's name; another owner's is not found either.
    The owner as this request authenticated them is kept with it (what a push delivery
    checks the stream's roles and authorisers with)."""
    owner = _owner(service, request)
    name = _name(request)
    store = _store(service)
    entry = await store.get(owner, name)
    if entry is None:
        raise _not_found(name)
    caller = caller_of(request)
    seen = None if caller is None else caller_document(caller)
    if seen is not None and seen != entry.caller:

        def refresh(current: SubscriptionEntry) -> None:
            current.caller = seen
            if current.push is not None and current.push["status"] == FORBIDDEN:
                # Tried again as the owner is now: forbidden again at once if still so.
                current.push["status"] = ACTIVE

        entry = await store.change(entry, refresh) or entry
        if entry.push is not None:
            await store.redriven(entry)  # its holder reads the owner again now
    return entry


def _body_of(definition: dict[str, Any]) -> RequestBody:
    return RequestBody(
        event_type=definition["event_type"],
        identifier=dict(definition["identifier"]),
        from_id=definition.get("from_id"),
        from_date=definition.get("from_date"),
        payload=None,
    )


async def _start_sequence(
    service: Service, stream_filter: StreamFilter, replay: ReplayStart | None
) -> int:
    pattern = stream_filter.pattern
    backend = service.backend
    if replay is not None and replay.from_sequence is not None:
        return max(replay.from_sequence, 1)
    if replay is not None and replay.from_date is not None:
        # The first stored at or after from_date; none yet: whatever is stored next.
        after = await backend.first_sequence_after(pattern, to_ns(replay.from_date) - 1)
        if after is not None:
            return after
    return (await backend.history_bound(pattern) or 0) + 1


# -- views -----------------------------------------------------------------------------------


def _view(service: Service, entry: SubscriptionEntry) -> dict[str, Any]:
    definition = entry.definition
    push = entry.push
    kind = None if push is None else _runner(service).kinds.get(push["kind"])
    delivery: dict[str, Any] | None = None
    if push is not None:
        # A kind no longer configured shows its name only (what it stored may hold secrets).
        stored = push["stored"]
        delivery = {"kind": push["kind"]} if kind is None else dict(kind.public_view(stored))
    return {
        "name": entry.name,
        "event_type": definition["event_type"],
        "identifier": definition["identifier"],
        "from_id": definition.get("from_id"),
        "from_date": definition.get("from_date"),
        "delivery": delivery,
        "deliveries": None if push is None else push_counts(push),
        "created_at": entry.created_at,
        "start_sequence": entry.start_sequence,
        "acknowledged_sequence": entry.acknowledged,
    }


async def _admitted_entry_filter(
    service: Service, request: Request, entry: SubscriptionEntry
) -> StreamFilter:
    """The subscription's filter, its caller checked again against the stream's roles and
    authorisers (which may have changed since it was created)."""
    _, stream_filter, _ = await admitted_stream(
        service, caller_of(request), _body_of(dict(entry.definition)), ENDPOINT
    )
    return stream_filter


async def _state(
    service: Service, entry: SubscriptionEntry, stream_filter: StreamFilter
) -> dict[str, Any]:
    """The view plus ``pending`` (the matching notifications after the cursor, counted
    exactly) and ``lag_seconds`` (the age of the oldest of them)."""
    batch_size = service.settings.watch.replay_batch_size
    cursor = StartCursor(from_sequence=entry.next_sequence)
    pending = 0
    oldest: int | None = None
    while True:
        batch = await service.backend.fetch_batch(stream_filter.pattern, cursor, batch_size)
        selected = await stream_filter.select(batch.messages)
        if selected and oldest is None:
            oldest = selected[0].time_ns
        pending += len(selected)
        if not batch.has_more or batch.next_sequence is None:
            break
        cursor = StartCursor(from_sequence=batch.next_sequence)
        await asyncio.sleep(0)  # a long count must not hold the event loop
    lag = None if oldest is None else max(0.0, round(time.time() - oldest / 1e9, 3))
    return {**_view(service, entry), "pending": pending, "lag_seconds": lag}


# -- routes ----------------------------------------------------------------------------------


@api_endpoint
async def list_subscriptions(request: Request) -> ASGIApp:
    service = service_of(request)
    owner = _owner(service, request)
    views = [_view(service, entry) for entry in await _store(service).owned(owner)]
    return json_response({"subscriptions": views, "request_id": request_id_of(request)})


@api_endpoint
async def subscription(request: Request) -> ASGIApp:
    method = request.method
    if method == "PUT":
        return await _put(request)
    service = service_of(request)
    entry = await _entry(service, request)
    if method == "DELETE":
        await _store(service).remove(entry)
        return Response(status_code=204)
    stream_filter = await _admitted_entry_filter(service, request, entry)
    return json_response(await _state(service, entry, stream_filter))


async def _put(request: Request) -> ASGIApp:
    service = service_of(request)
    owner = _owner(service, request)
    name = _name(request)
    limits = service.settings.limits
    body = parse_body(
        await read_body(request), ENDPOINT, ("delivery",), max_depth=limits.max_json_depth
    )
    delivery = body.extras.get("delivery")
    kind = None if delivery is None else _delivery_kind(service, delivery)
    if body.payload is not None:
        raise validation_error(ENDPOINT, "payload is not part of a subscription")
    _, stream_filter, replay = await admitted_stream(service, caller_of(request), body, ENDPOINT)
    definition: dict[str, Any] = {"event_type": body.event_type, "identifier": body.identifier}
    for key in ("from_id", "from_date"):
        value = getattr(body, key)
        if value is not None:
            definition[key] = value
    if delivery is not None:
        # As the client put it: a generated secret is no part of what is compared.
        definition["delivery"] = delivery
    size = len(dumps(definition).encode())
    cap = service.settings.subscriptions.max_definition_bytes
    if size > cap:
        raise validation_error(
            ENDPOINT,
            f"the subscription's definition is {size} bytes of JSON, over the limit of {cap} "
            "(subscriptions.max_definition_bytes)",
        )
    prepared = None if kind is None or delivery is None else await _prepare(kind, delivery)
    start = await _start_sequence(service, stream_filter, replay)
    store = _store(service)
    existing = await store.get(owner, name)
    if existing is None:
        caller = caller_of(request)
        entry = SubscriptionEntry(
            owner,
            name,
            definition,
            now_whole_seconds(),
            start,
            caller=None if caller is None else caller_document(caller),
        )
        if kind is not None and prepared is not None:
            entry.push = push_document(kind.kind, prepared.stored)
        settings = service.settings.subscriptions
        outcome = await store.add(entry, settings.max_per_user, settings.max_total)
        if outcome == "per_user":
            raise _too_many(
                f"at most {settings.max_per_user} subscriptions per user "
                "(subscriptions.max_per_user): delete one first"
            )
        if outcome == "total":
            raise _too_many(
                f"the server holds its maximum of {settings.max_total} subscriptions "
                "(subscriptions.max_total)"
            )
        if outcome == "created":
            state = await _state(service, entry, stream_filter)
            if prepared is not None:
                state["delivery"] = dict(prepared.shown)  # the only answer that shows a secret
            return json_response(state, 201)
        existing = await store.get(owner, name)  # created meanwhile, by another request
        if existing is None:
            raise _conflict(name)
    if dumps(existing.definition) != dumps(definition):
        raise _conflict(name)
    return json_response(await _state(service, existing, stream_filter))


def _delivery_kind(service: Service, delivery: Any) -> DeliveryKind:
    """The delivery kind ``delivery`` names, its object checked against the kind's schema."""
    kinds = _runner(service).kinds
    name = delivery.get("kind") if isinstance(delivery, dict) else None
    kind = kinds.get(name) if isinstance(name, str) else None
    if kind is None:
        raise _unsupported_delivery(sorted(kinds))
    error = next(iter(Draft202012Validator(kind.delivery_schema).iter_errors(delivery)), None)
    if error is not None:
        # The schema's words, not the value's: a secret given in it is never echoed.
        where = "/".join(str(part) for part in error.absolute_path) or "(the object)"
        raise validation_error(
            ENDPOINT,
            f"delivery: '{where}' breaks the {kind.kind} delivery's schema "
            f"({error.validator}: {dumps(error.validator_value)})",
        )
    return kind


async def _prepare(kind: DeliveryKind, delivery: Mapping[str, Any]) -> PreparedDelivery:
    try:
        return await kind.prepare(delivery)
    except InvalidValue as exc:
        raise validation_error(ENDPOINT, f"delivery: {exc.message}") from exc


def _sequence(value: Any) -> int | None:
    """A sequence number from JSON (an integer) or a header (its decimal text)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_SEQUENCE:
        return None
    return value


async def _acknowledge(
    store: SubscriptionStore, entry: SubscriptionEntry, sequence: int
) -> SubscriptionEntry:
    """Move the cursor (a compare-and-set: acknowledgements on several workers at once all
    count, and it never moves backwards)."""

    def acknowledged(current: SubscriptionEntry) -> None:
        if sequence > current.delivered:
            delivered = f"up to {current.delivered}" if current.delivered else "nothing yet"
            raise _invalid_ack(
                f"cannot acknowledge sequence {sequence}: this subscription delivered {delivered}"
            )
        current.acknowledge(sequence)

    written = await store.change(entry, acknowledged)
    if written is None:
        raise _not_found(entry.name)
    return written


@api_endpoint
async def acknowledge(request: Request) -> ASGIApp:
    service = service_of(request)
    entry = await _entry(service, request)
    raw = await read_body(request)
    max_depth = service.settings.limits.max_json_depth
    if exceeds_json_depth(raw, max_depth):
        raise parse_error(
            ENDPOINT,
            "INVALID_JSON",
            f"JSON parsing failed: nesting deeper than the limit of {max_depth} levels",
        )
    try:
        document = loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise parse_error(ENDPOINT, "INVALID_JSON", "JSON parsing failed: not valid JSON") from exc
    sequence = _sequence(document.get("sequence")) if isinstance(document, dict) else None
    if sequence is None or set(document) != {"sequence"}:
        raise _invalid_ack('the body must be {"sequence": N}, N an integer from 0 to 2^64-1')
    entry = await _acknowledge(_store(service), entry, sequence)
    stream_filter = await _admitted_entry_filter(service, request, entry)
    return json_response(await _state(service, entry, stream_filter))


@api_endpoint
async def events(request: Request) -> ASGIApp:
    service = service_of(request)
    entry = await _entry(service, request)
    last_event_id = request.headers.get(LAST_EVENT_ID)
    if last_event_id is not None:
        sequence = _sequence(last_event_id.strip())
        if sequence is None:
            raise _invalid_ack("Last-Event-ID must be a sequence number")
        entry = await _acknowledge(_store(service), entry, sequence)
    caller = caller_of(request)
    schema, stream_filter, _ = await admitted_stream(
        service, caller, _body_of(dict(entry.definition)), ENDPOINT
    )
    control = StreamControl(request_id_of(request))
    access = reauthorisation(service.auth, schema, caller, stream_filter.requested, control)
    try:
        live, live_subscription = await open_live(service, control, stream_filter.pattern)
    except Exception as exc:
        display = stream_filter.pattern.display
        error = stream_setup_error("Failed to create stream consumer", display)
        internal_failure(error, exc, event_type=entry.definition["event_type"])
        return error_response(request, error)
    start = entry.next_sequence
    event_type = entry.definition["event_type"]
    stream = EventStream(
        backend=service.backend,
        renderer=service.renderer,
        settings=service.settings.watch_for(event_type),
        streams=service.streams,
        control=control,
        stream_filter=stream_filter,
        replay=ReplayStart(StartCursor(from_sequence=start), start, None),
        live=live,
        subscription=live_subscription,
        is_watch=True,
        metrics=service.metrics.sse_connection(
            SUBSCRIPTION_EVENTS_ROUTE, event_type, caller.username if caller else None
        ),
        reauthorisation=access,
        event_ids=True,
        on_delivered=_Delivered(_store(service), entry, control),
    )
    return _Tracked(stream, _store(service), entry, control)


@api_endpoint
async def dead_letters(request: Request) -> ASGIApp:
    """The notifications a push subscription gave up on, oldest first (none for a pulled
    one)."""
    service = service_of(request)
    entry = await _entry(service, request)
    letters: list[Any] = []
    dropped = 0
    if entry.push is not None:
        document, _ = await _store(service).dead_letters(entry)
        letters, dropped = document["letters"], document["dropped"]
    return json_response(
        {"dead_letters": letters, "dropped": dropped, "request_id": request_id_of(request)}
    )


@api_endpoint
async def redrive(request: Request) -> ASGIApp:
    """Deliver the dead letters again, before the subscription's next notifications. A
    disabled subscription delivers nothing: its dead letters stay where they are."""
    service = service_of(request)
    entry = await _entry(service, request)
    count = 0
    if entry.push is not None and entry.push["status"] == ACTIVE:
        store = _store(service)
        taken: list[int] = []

        def take(document: dict[str, Any]) -> None:
            taken[:] = [take_dead_letters(document)]

        await store.change_dead_letters(entry, take)
        count = taken[0]
        if count:
            await store.redriven(entry)
    return json_response({"redriven": count, "request_id": request_id_of(request)})


class _Delivered:
    """Records, before its frames are sent, the highest sequence an events stream framed
    (what may be acknowledged, from any worker); a subscription gone ends the stream."""

    __slots__ = ("_control", "_entry", "_store")

    def __init__(self, store: SubscriptionStore, entry: SubscriptionEntry, control: StreamControl):
        self._store = store
        self._entry = entry
        self._control = control

    async def __call__(self, sequence: int) -> None:
        def delivered(current: SubscriptionEntry) -> bool:
            if current.delivered >= sequence:
                return False
            current.delivered_through(sequence)
            return True

        try:
            written = await self._store.change(self._entry, delivered)
        except Exception as exc:  # what was framed could not be recorded: not sent either
            log_event("subscription.record_failed", f"delivery not recorded: {exc}")
            self._control.stop("end_of_stream")
            return
        if written is None:
            self._control.stop("end_of_stream")
        else:
            self._entry = written


class _Tracked:
    """The events stream, listed with its subscription while it runs: a delete here ends it
    at once, one elsewhere at the stream's next check."""

    __slots__ = ("_control", "_entry", "_store", "_stream")

    def __init__(
        self,
        stream: EventStream,
        store: SubscriptionStore,
        entry: SubscriptionEntry,
        control: StreamControl,
    ):
        self._stream = stream
        self._store = store
        self._entry = entry
        self._control = control

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._store.track(self._entry, self._control)
        watch = asyncio.create_task(end_when_deleted(self._store, self._entry, self._control))
        try:
            await self._stream(scope, receive, send)
        finally:
            watch.cancel()
            self._store.untrack(self._entry, self._control)


async def admit_entry(service: Service, entry: SubscriptionEntry) -> StreamFilter:
    """A push subscription's filter, its owner (as their last request authenticated them)
    checked again against the stream's roles and authorisers."""
    caller = None if entry.caller is None else caller_from(entry.caller)
    if service.auth is not None and caller is None:
        raise service.auth.failure(401, _AUTHENTICATION_REQUIRED)
    _, stream_filter, _ = await admitted_stream(
        service, caller, _body_of(dict(entry.definition)), ENDPOINT
    )
    return stream_filter


def subscription_routes() -> list[BaseRoute]:
    return [
        Route("/api/v1/subscriptions", list_subscriptions, methods=["GET"]),
        Route("/api/v1/subscriptions/{name}", subscription, methods=["PUT", "GET", "DELETE"]),
        Route("/api/v1/subscriptions/{name}/events", StreamRoute(events), methods=["GET"]),
        Route("/api/v1/subscriptions/{name}/ack", acknowledge, methods=["POST"]),
        Route("/api/v1/subscriptions/{name}/dead-letters", dead_letters, methods=["GET"]),
        Route("/api/v1/subscriptions/{name}/dead-letters/redrive", redrive, methods=["POST"]),
    ]
