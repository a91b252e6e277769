"""The running service as plugins see it (:class:`aviso_plugins.service.ServiceAccess`): what
the hooks ``aviso_api_routes``, ``aviso_startup`` and ``aviso_shutdown`` receive."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from starlette.requests import Request
from starlette.types import ASGIApp

from aviso_host.config.plugin_options import fill_defaults
from aviso_host.consumers import LEASES_BUCKET, consumed_notification, keeps_shared_state
from aviso_host.errors import ApiError, Endpoint, json_response, parse_error, validation_error
from aviso_host.openapi import openapi_sources
from aviso_host.requests import RequestBody, invalid_type, missing_field, parse_body, read_body
from aviso_host.routes.common import api_endpoint, caller_of, request_id_of
from aviso_host.routes.streams import (
    ALL_HISTORY,
    Opening,
    StreamRoute,
    admitted_stream,
    open_stream,
)
from aviso_host.schemas import EventSchema
from aviso_host.streaming.stream import ReplayStart
from aviso_plugins.consumers import ConsumedNotification
from aviso_plugins.deliveries import DeliveryKind
from aviso_plugins.leases import DEFAULT_LEASE_SECONDS
from aviso_plugins.openapi import OpenApiSources
from aviso_plugins.service import (
    AdmittedStream,
    ApiRefusal,
    Handler,
    OpenedStream,
    StreamRequest,
    Summary,
    TypeLayout,
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

    def missing_member(self, endpoint: str, name: str) -> ApiRefusal:
        return missing_field(_endpoint(endpoint), name)

    def invalid_type(self, endpoint: str, value: Any, expected: str) -> ApiRefusal:
        return invalid_type(_endpoint(endpoint), value, expected)

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
        start = ReplayStart(StartCursor(from_sequence=start_sequence), start_sequence, None)
        opening = Opening(route, needs_live=True, event_ids=True, on_delivered=on_delivered)
        app, control = await open_stream(
            service, request, caller, body.event_type, (schema, stream_filter, start), opening
        )
        return OpenedStream(app, control)

    async def summary_stream(
        self,
        request: Request,
        body: StreamRequest,
        *,
        endpoint: str,
        route: str,
        summarise: Callable[[TypeLayout | None], Summary],
        debounce_ms: int,
    ) -> ASGIApp:
        service = self._service
        caller = caller_of(request)
        summaries: list[Summary] = []

        def check(schema: EventSchema | None) -> None:
            layout = None
            if schema is not None:
                layout = TypeLayout(schema.event_type, tuple(schema.fields), schema.topic_fields)
            summaries.append(summarise(layout))

        schema, stream_filter, replay = await admitted_stream(
            service, caller, _body(body), _endpoint(endpoint), check
        )
        opening = Opening(route, summary=summaries[0], debounce_ms=debounce_ms)
        # Without a cursor the summary starts from everything retained: a live-only one
        # would begin empty and say nothing about what has already arrived.
        start = replay or ALL_HISTORY
        app, _ = await open_stream(
            service, request, caller, body.event_type, (schema, stream_filter, start), opening
        )
        return app

    def consumed_notification(
        self, event_type: str, record: StoredNotification
    ) -> ConsumedNotification:
        return consumed_notification(self._service.renderer, event_type, record)

    def openapi_sources(self) -> OpenApiSources:
        return openapi_sources(self._service, self)
