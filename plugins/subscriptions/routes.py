"""``/api/v1/subscriptions``: named subscriptions whose cursor the server keeps, pulled over
Server-Sent Events.

A subscription's filter is validated exactly as a watch's (same checks, same messages, its
own error label), and checked against the stream's roles and authorisers when it is created
and again whenever its events are read; an open events stream is re-authorised as a watch
is. The events stream is a cursor watch from the subscription's cursor, opened by the
service as a watch's (heartbeats, backpressure, maximum duration, shutdown), whose
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

from aviso_builtins.subscriptions.deliveries import (
    DeliveryRunner,
    push_counts,
    push_document,
    take_dead_letters,
)
from aviso_builtins.subscriptions.settings import subscription_settings
from aviso_builtins.subscriptions.store import (
    ACTIVE,
    FORBIDDEN,
    SubscriptionEntry,
    SubscriptionStore,
    caller_document,
    caller_from,
    dumps,
    end_when_deleted,
    loads,
    now,
    valid_name,
)
from aviso_plugins._shared.json_depth import exceeds_json_depth
from aviso_plugins.service import (
    ApiRefusal,
    ServiceAccess,
    StreamControl,
    StreamRequest,
    StreamSelection,
    echoed,
    log_event,
)
from aviso_plugins.types import DeliveryKind, InvalidValue, PreparedDelivery, StartCursor

ENDPOINT = "subscription"
EVENTS_ROUTE = "/api/v1/subscriptions/{name}/events"
"""The events stream's route, as its metrics label it."""
ACK_LABEL = "Invalid Acknowledgement"
LAST_EVENT_ID = "last-event-id"
_MAX_SEQUENCE = 2**64 - 1
_AUTHENTICATION_REQUIRED = "Authentication is required for subscriptions"


# -- errors ----------------------------------------------------------------------------------


def _invalid_name(name: str) -> ApiRefusal:
    return ApiRefusal(
        400,
        "INVALID_SUBSCRIPTION_NAME",
        "Invalid Subscription Name",
        f"subscription name '{echoed(name)}' must be 1 to 64 letters, digits, '-', '_' or '.' "
        "(not '.' or '..')",
    )


def _not_found(name: str) -> ApiRefusal:
    return ApiRefusal(
        404,
        "SUBSCRIPTION_NOT_FOUND",
        "Subscription Not Found",
        f"no subscription named '{echoed(name)}'",
        event_name="api.subscription.not_found",
    )


def _conflict(name: str) -> ApiRefusal:
    return ApiRefusal(
        409,
        "SUBSCRIPTION_CONFLICT",
        "Subscription Conflict",
        f"subscription '{echoed(name)}' exists with a different definition: delete it first",
    )


def _too_many(message: str) -> ApiRefusal:
    return ApiRefusal(429, "TOO_MANY_SUBSCRIPTIONS", "Too Many Subscriptions", message)


def _unsupported_delivery(kinds: list[str]) -> ApiRefusal:
    offered = (
        f"its 'kind' must be one of {', '.join(repr(kind) for kind in kinds)}"
        if kinds
        else "this server pushes no deliveries: leave out 'delivery' and read "
        "GET /api/v1/subscriptions/{name}/events"
    )
    return ApiRefusal(
        400,
        "UNSUPPORTED_DELIVERY",
        "Unsupported Delivery",
        f"'delivery' must be an object naming a delivery kind: {offered}",
    )


def _invalid_ack(message: str) -> ApiRefusal:
    return ApiRefusal(400, "INVALID_ACKNOWLEDGEMENT", ACK_LABEL, message)


def _body_of(definition: Mapping[str, Any]) -> StreamRequest:
    return StreamRequest(
        event_type=definition["event_type"],
        identifier=dict(definition["identifier"]),
        from_id=definition.get("from_id"),
        from_date=definition.get("from_date"),
    )


def _sequence(value: Any) -> int | None:
    """A sequence number from JSON (an integer) or a header (its decimal text)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_SEQUENCE:
        return None
    return value


class SubscriptionRoutes:
    """The routes of one service, over its subscription store and delivery runner."""

    def __init__(
        self, service: ServiceAccess, store: SubscriptionStore, runner: DeliveryRunner
    ) -> None:
        self.service = service
        self.store = store
        self.runner = runner
        settings = subscription_settings(service)
        self.max_per_user = settings.max_per_user
        self.max_total = settings.max_total
        self.max_definition_bytes = settings.max_definition_bytes

    def routes(self) -> list[BaseRoute]:
        api = self.service.api_endpoint
        return [
            Route("/api/v1/subscriptions", api(self.list_subscriptions), methods=["GET"]),
            Route(
                "/api/v1/subscriptions/{name}",
                api(self.subscription),
                methods=["PUT", "GET", "DELETE"],
            ),
            Route(EVENTS_ROUTE, self.service.stream_endpoint(self.events), methods=["GET"]),
            Route("/api/v1/subscriptions/{name}/ack", api(self.acknowledge), methods=["POST"]),
            Route(
                "/api/v1/subscriptions/{name}/dead-letters",
                api(self.dead_letters),
                methods=["GET"],
            ),
            Route(
                "/api/v1/subscriptions/{name}/dead-letters/redrive",
                api(self.redrive),
                methods=["POST"],
            ),
        ]

    # -- the steps shared by every route -------------------------------------------------------

    def _owner(self, request: Request) -> str | None:
        """The namespace: the caller's name with auth on (anonymous callers are refused), the
        shared one with auth off."""
        if not self.service.auth_enabled:
            return None
        caller = self.service.caller(request)
        if caller is None:
            raise self.service.authentication_required(_AUTHENTICATION_REQUIRED)
        return caller.username

    async def _entry(self, request: Request) -> SubscriptionEntry:
        """The caller's subscription of the path's name; another owner's is not found either.
        The owner as this request authenticated them is kept with it (what a push delivery
        checks the stream's roles and authorisers with)."""
        owner = self._owner(request)
        name = _name(request)
        store = self.store
        entry = await store.get(owner, name)
        if entry is None:
            raise _not_found(name)
        caller = self.service.caller(request)
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

    async def _start_sequence(
        self, selection: StreamSelection, from_sequence: int | None, from_time_ns: int | None
    ) -> int:
        pattern = selection.pattern
        backend = self.service.backend
        if from_sequence is not None:
            return max(from_sequence, 1)
        if from_time_ns is not None:
            # The first stored at or after from_date; none yet: whatever is stored next.
            after = await backend.first_sequence_after(pattern, from_time_ns - 1)
            if after is not None:
                return after
        return (await backend.history_bound(pattern) or 0) + 1

    # -- views ---------------------------------------------------------------------------------

    def _view(self, entry: SubscriptionEntry) -> dict[str, Any]:
        definition = entry.definition
        push = entry.push
        kind = None if push is None else self.runner.kinds.get(push["kind"])
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
        self, request: Request, entry: SubscriptionEntry
    ) -> StreamSelection:
        """The subscription's filter, its caller checked again against the stream's roles and
        authorisers (which may have changed since it was created)."""
        caller = self.service.caller(request)
        admitted = await self.service.admit(caller, _body_of(entry.definition), ENDPOINT)
        return admitted.selection

    async def _state(self, entry: SubscriptionEntry, selection: StreamSelection) -> dict[str, Any]:
        """The view plus ``pending`` (the matching notifications after the cursor, counted
        exactly) and ``lag_seconds`` (the age of the oldest of them)."""
        batch_size = self.service.replay_batch_size
        backend = self.service.backend
        cursor = StartCursor(from_sequence=entry.next_sequence)
        pending = 0
        oldest: int | None = None
        while True:
            batch = await backend.fetch_batch(selection.pattern, cursor, batch_size)
            selected = await selection.select(batch.messages)
            if selected and oldest is None:
                oldest = selected[0].time_ns
            pending += len(selected)
            if not batch.has_more or batch.next_sequence is None:
                break
            cursor = StartCursor(from_sequence=batch.next_sequence)
            await asyncio.sleep(0)  # a long count must not hold the event loop
        lag = None if oldest is None else max(0.0, round(time.time() - oldest / 1e9, 3))
        return {**self._view(entry), "pending": pending, "lag_seconds": lag}

    # -- routes --------------------------------------------------------------------------------

    async def list_subscriptions(self, request: Request) -> ASGIApp:
        owner = self._owner(request)
        views = [self._view(entry) for entry in await self.store.owned(owner)]
        return self.service.json_response(
            {"subscriptions": views, "request_id": self.service.request_id(request)}
        )

    async def subscription(self, request: Request) -> ASGIApp:
        method = request.method
        if method == "PUT":
            return await self._put(request)
        entry = await self._entry(request)
        if method == "DELETE":
            await self.store.remove(entry)
            return Response(status_code=204)
        selection = await self._admitted_entry_filter(request, entry)
        return self.service.json_response(await self._state(entry, selection))

    async def _put(self, request: Request) -> ASGIApp:
        service = self.service
        owner = self._owner(request)
        name = _name(request)
        body = await service.read_stream_request(request, ENDPOINT, ("delivery",))
        delivery = body.extras.get("delivery")
        kind = None if delivery is None else self._delivery_kind(delivery)
        if body.payload is not None:
            raise service.validation_error(ENDPOINT, "payload is not part of a subscription")
        caller = service.caller(request)
        admitted = await service.admit(caller, body, ENDPOINT)
        definition: dict[str, Any] = {"event_type": body.event_type, "identifier": body.identifier}
        for key in ("from_id", "from_date"):
            value = getattr(body, key)
            if value is not None:
                definition[key] = value
        if delivery is not None:
            # As the client put it: a generated secret is no part of what is compared.
            definition["delivery"] = delivery
        size = len(dumps(definition).encode())
        cap = self.max_definition_bytes
        if size > cap:
            raise service.validation_error(
                ENDPOINT,
                f"the subscription's definition is {size} bytes of JSON, over the limit of "
                f"{cap} (subscriptions.max_definition_bytes)",
            )
        prepared = None if kind is None or delivery is None else await self._prepare(kind, delivery)
        selection = admitted.selection
        start = await self._start_sequence(selection, admitted.from_sequence, admitted.from_time_ns)
        store = self.store
        existing = await store.get(owner, name)
        if existing is None:
            entry = SubscriptionEntry(
                owner,
                name,
                definition,
                now(),
                start,
                caller=None if caller is None else caller_document(caller),
            )
            if kind is not None and prepared is not None:
                entry.push = push_document(kind.kind, prepared.stored)
            outcome = await store.add(entry, self.max_per_user, self.max_total)
            if outcome == "per_user":
                raise _too_many(
                    f"at most {self.max_per_user} subscriptions per user "
                    "(subscriptions.max_per_user): delete one first"
                )
            if outcome == "total":
                raise _too_many(
                    f"the server holds its maximum of {self.max_total} subscriptions "
                    "(subscriptions.max_total)"
                )
            if outcome == "created":
                state = await self._state(entry, selection)
                if prepared is not None:
                    state["delivery"] = dict(prepared.shown)  # the only answer showing a secret
                return service.json_response(state, 201)
            existing = await store.get(owner, name)  # created meanwhile, by another request
            if existing is None:
                raise _conflict(name)
        if dumps(existing.definition) != dumps(definition):
            raise _conflict(name)
        return service.json_response(await self._state(existing, selection))

    def _delivery_kind(self, delivery: Any) -> DeliveryKind:
        """The delivery kind ``delivery`` names, its object checked against the kind's
        schema."""
        kinds = self.runner.kinds
        name = delivery.get("kind") if isinstance(delivery, dict) else None
        kind = kinds.get(name) if isinstance(name, str) else None
        if kind is None:
            raise _unsupported_delivery(sorted(kinds))
        error = next(iter(Draft202012Validator(kind.delivery_schema).iter_errors(delivery)), None)
        if error is not None:
            # The schema's words, not the value's: a secret given in it is never echoed.
            where = "/".join(str(part) for part in error.absolute_path) or "(the object)"
            raise self.service.validation_error(
                ENDPOINT,
                f"delivery: '{where}' breaks the {kind.kind} delivery's schema "
                f"({error.validator}: {dumps(error.validator_value)})",
            )
        return kind

    async def _prepare(self, kind: DeliveryKind, delivery: Mapping[str, Any]) -> PreparedDelivery:
        try:
            return await kind.prepare(delivery)
        except InvalidValue as exc:
            raise self.service.validation_error(ENDPOINT, f"delivery: {exc.message}") from exc

    async def _acknowledge(self, entry: SubscriptionEntry, sequence: int) -> SubscriptionEntry:
        """Move the cursor (a compare-and-set: acknowledgements on several workers at once
        all count, and it never moves backwards)."""

        def acknowledged(current: SubscriptionEntry) -> None:
            if sequence > current.delivered:
                delivered = f"up to {current.delivered}" if current.delivered else "nothing yet"
                raise _invalid_ack(
                    f"cannot acknowledge sequence {sequence}: "
                    f"this subscription delivered {delivered}"
                )
            current.acknowledge(sequence)

        written = await self.store.change(entry, acknowledged)
        if written is None:
            raise _not_found(entry.name)
        return written

    async def acknowledge(self, request: Request) -> ASGIApp:
        service = self.service
        entry = await self._entry(request)
        raw = await request.body()
        max_depth = service.max_json_depth
        if exceeds_json_depth(raw, max_depth):
            raise service.parse_error(
                ENDPOINT,
                "INVALID_JSON",
                f"JSON parsing failed: nesting deeper than the limit of {max_depth} levels",
            )
        try:
            document = loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise service.parse_error(
                ENDPOINT, "INVALID_JSON", "JSON parsing failed: not valid JSON"
            ) from exc
        sequence = _sequence(document.get("sequence")) if isinstance(document, dict) else None
        if sequence is None or set(document) != {"sequence"}:
            raise _invalid_ack('the body must be {"sequence": N}, N an integer from 0 to 2^64-1')
        entry = await self._acknowledge(entry, sequence)
        selection = await self._admitted_entry_filter(request, entry)
        return service.json_response(await self._state(entry, selection))

    async def events(self, request: Request) -> ASGIApp:
        entry = await self._entry(request)
        last_event_id = request.headers.get(LAST_EVENT_ID)
        if last_event_id is not None:
            sequence = _sequence(last_event_id.strip())
            if sequence is None:
                raise _invalid_ack("Last-Event-ID must be a sequence number")
            entry = await self._acknowledge(entry, sequence)
        store = self.store
        opened = await self.service.event_stream(
            request,
            self.service.caller(request),
            _body_of(entry.definition),
            endpoint=ENDPOINT,
            route=EVENTS_ROUTE,
            start_sequence=entry.next_sequence,
            on_delivered=lambda control: _Delivered(store, entry, control),
        )
        if opened.control is None:
            return opened.app
        return _Tracked(opened.app, store, entry, opened.control)

    async def dead_letters(self, request: Request) -> ASGIApp:
        """The notifications a push subscription gave up on, oldest first (none for a pulled
        one)."""
        entry = await self._entry(request)
        letters: list[Any] = []
        dropped = 0
        if entry.push is not None:
            document, _ = await self.store.dead_letters(entry)
            letters, dropped = document["letters"], document["dropped"]
        return self.service.json_response(
            {
                "dead_letters": letters,
                "dropped": dropped,
                "request_id": self.service.request_id(request),
            }
        )

    async def redrive(self, request: Request) -> ASGIApp:
        """Deliver the dead letters again, before the subscription's next notifications. A
        disabled subscription delivers nothing: its dead letters stay where they are."""
        entry = await self._entry(request)
        count = 0
        if entry.push is not None and entry.push["status"] == ACTIVE:
            store = self.store
            taken: list[int] = []

            def take(document: dict[str, Any]) -> None:
                taken[:] = [take_dead_letters(document)]

            await store.change_dead_letters(entry, take)
            count = taken[0]
            if count:
                await store.redriven(entry)
        return self.service.json_response(
            {"redriven": count, "request_id": self.service.request_id(request)}
        )

    async def admit_entry(self, entry: SubscriptionEntry) -> StreamSelection:
        """A push subscription's filter, its owner (as their last request authenticated them)
        checked again against the stream's roles and authorisers."""
        caller = None if entry.caller is None else caller_from(entry.caller)
        if self.service.auth_enabled and caller is None:
            raise self.service.authentication_required(_AUTHENTICATION_REQUIRED)
        admitted = await self.service.admit(caller, _body_of(entry.definition), ENDPOINT)
        return admitted.selection


def _name(request: Request) -> str:
    name: str = request.path_params["name"]
    if not valid_name(name):
        raise _invalid_name(name)
    return name


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
        stream: ASGIApp,
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
