"""The running service as plugins see it (:class:`aviso_plugins.service.ServiceAccess`): what
the hooks ``aviso_api_routes``, ``aviso_startup`` and ``aviso_shutdown`` receive."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from starlette.requests import Request
from starlette.types import ASGIApp

from aviso_host.auth.reauthorise import reauthorisation
from aviso_host.config.plugin_options import fill_defaults
from aviso_host.consumers import LEASES_BUCKET, consumed_notification, keeps_shared_state
from aviso_host.errors import (
    ApiError,
    Endpoint,
    internal_failure,
    json_response,
    parse_error,
    stream_setup_error,
    validation_error,
)
from aviso_host.requests import RequestBody, parse_body, read_body
from aviso_host.routes.common import api_endpoint, caller_of, error_response, request_id_of
from aviso_host.routes.streams import StreamRoute, admitted_stream, open_live
from aviso_host.streaming.control import StreamControl
from aviso_host.streaming.stream import EventStream, ReplayStart
from aviso_plugins.consumers import ConsumedNotification
from aviso_plugins.deliveries import DeliveryKind
from aviso_plugins.leases import DEFAULT_LEASE_SECONDS
from aviso_plugins.service import (
    AdmittedStream,
    ApiRefusal,
    Handler,
    OpenedStream,
    StreamRequest,
)
from aviso_plugins.service import StreamControl as PluginStreamControl
from aviso_plugins.state import SharedState
from aviso_plugins.storage import StartCursor, StorageBackend, StoredNotification
from aviso_plugins.types import Caller

if TYPE_CHECKING:
    from aviso_host.service import Service


def _endpoint(name: str) -> Endpoint:
    return Endpoint[name.upper()]


def _body(body: StreamRequest) -> RequestBody:
    return RequestBody(
        event_type=body.event_type,
        identifier=dict(body.identifier),
        from_id=body.from_id,
        from_date=body.from_date,
        payload=body.payload,
        extras=body.extras,
        to_id=body.to_id,
        to_date=body.to_date,
    )


class PluginService:
    """:class:`~aviso_plugins.service.ServiceAccess` over one :class:`Service`."""

    def __init__(self, service: Service) -> None:
        self._service = service

    @property
    def backend(self) -> StorageBackend:
        return self._service.backend

    @property
    def backend_kind(self) -> str:
        return self._service.settings.backend.kind

    @property
    def auth_enabled(self) -> bool:
        return self._service.auth is not None

    @property
    def keeps_shared_state(self) -> bool:
        return keeps_shared_state(self._service.backend)

    @property
    def max_json_depth(self) -> int:
        return self._service.settings.limits.max_json_depth

    @property
    def replay_batch_size(self) -> int:
        return self._service.settings.watch.replay_batch_size

    @property
    def metrics_registry(self) -> CollectorRegistry:
        return self._service.metrics.registry

    @property
    def delivery_kinds(self) -> Mapping[str, type[DeliveryKind]]:
        return self._service.registry.delivery_kinds

    def section(self, name: str) -> Mapping[str, Any]:
        settings = self._service.settings
        typed = getattr(settings, name, None)
        if dataclasses.is_dataclass(typed) and not isinstance(typed, type):
            return dataclasses.asdict(typed)
        given = settings.document.get(name, {})
        return dict(given) if isinstance(given, Mapping) else {}

    def options(self, section: str, name: str, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        given = self._service.settings.document.get(section, {})
        own = given.get(name, {}) if isinstance(given, Mapping) else {}
        filled: dict[str, Any] = fill_defaults(
            dict(own) if isinstance(own, Mapping) else {}, schema
        )
        return filled

    async def leases(self) -> SharedState:
        leases = await self._service.backend.shared_state(LEASES_BUCKET, DEFAULT_LEASE_SECONDS)
        if leases is None:
            raise RuntimeError("the backend keeps no shared state")
        return leases

    def api_endpoint(self, handler: Handler) -> Handler:
        async def answered(request: Request) -> ASGIApp:
            try:
                return await handler(request)
            except ApiRefusal as refusal:
                raise ApiError.of(refusal) from None

        return api_endpoint(answered)

    def stream_endpoint(self, handler: Handler) -> ASGIApp:
        return StreamRoute(self.api_endpoint(handler))

    def caller(self, request: Request) -> Caller | None:
        return caller_of(request)

    def request_id(self, request: Request) -> str:
        return request_id_of(request)

    def authentication_required(self, message: str) -> ApiRefusal:
        auth = self._service.auth
        assert auth is not None  # only asked with auth on
        return auth.failure(401, message)

    def json_response(self, document: Any, status: int = 200) -> ASGIApp:
        return json_response(document, status)

    def validation_error(self, endpoint: str, message: str) -> ApiRefusal:
        return validation_error(_endpoint(endpoint), message)

    def parse_error(self, endpoint: str, code: str, message: str) -> ApiRefusal:
        return parse_error(_endpoint(endpoint), code, message)

    async def read_stream_request(
        self, request: Request, endpoint: str, extra_fields: tuple[str, ...] = ()
    ) -> StreamRequest:
        body = parse_body(
            await read_body(request),
            _endpoint(endpoint),
            extra_fields,
            max_depth=self.max_json_depth,
        )
        return StreamRequest(
            body.event_type,
            body.identifier,
            body.from_id,
            body.from_date,
            body.payload,
            body.extras,
            body.to_id,
            body.to_date,
        )

    async def admit(
        self, caller: Caller | None, body: StreamRequest, endpoint: str
    ) -> AdmittedStream:
        _, stream_filter, replay = await admitted_stream(
            self._service, caller, _body(body), _endpoint(endpoint)
        )
        return AdmittedStream(
            stream_filter,
            None if replay is None else replay.from_sequence,
            None if replay is None else replay.cursor.from_time_ns,
        )

    async def event_stream(
        self,
        request: Request,
        caller: Caller | None,
        body: StreamRequest,
        *,
        endpoint: str,
        route: str,
        start_sequence: int,
        on_delivered: Callable[[PluginStreamControl], Callable[[int], Awaitable[None]]],
    ) -> OpenedStream:
        service = self._service
        schema, stream_filter, _ = await admitted_stream(
            service, caller, _body(body), _endpoint(endpoint)
        )
        control = StreamControl(request_id_of(request))
        access = reauthorisation(service.auth, schema, caller, stream_filter.requested, control)
        try:
            live, live_subscription = await open_live(service, control, stream_filter.pattern)
        except Exception as exc:
            display = stream_filter.pattern.display
            error = stream_setup_error("Failed to create stream consumer", display)
            internal_failure(error, exc, event_type=body.event_type)
            return OpenedStream(error_response(request, error), None)
        stream = EventStream(
            backend=service.backend,
            renderer=service.renderer,
            settings=service.settings.watch_for(body.event_type),
            streams=service.streams,
            control=control,
            stream_filter=stream_filter,
            replay=ReplayStart(StartCursor(from_sequence=start_sequence), start_sequence, None),
            live=live,
            subscription=live_subscription,
            is_watch=True,
            metrics=service.metrics.sse_connection(
                route, body.event_type, caller.username if caller else None
            ),
            reauthorisation=access,
            event_ids=True,
            on_delivered=on_delivered(control),
        )
        return OpenedStream(stream, control)

    def consumed_notification(
        self, event_type: str, record: StoredNotification
    ) -> ConsumedNotification:
        return consumed_notification(self._service.renderer, event_type, record)
