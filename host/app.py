"""create_app(): the Starlette application, mountable under any path prefix."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from aviso_host.auth.middleware import Authentication
from aviso_host.config import load_settings
from aviso_host.config.settings import Settings
from aviso_host.edge import EdgeMiddleware
from aviso_host.errors import internal_error, json_response
from aviso_host.metrics import HttpMetrics
from aviso_host.plugin_service import PluginService
from aviso_host.plugins import PluginRegistry, discover
from aviso_host.routes import admin, notify, schema, streams
from aviso_host.routes.ops import ops_routes
from aviso_host.service import Service, server_version


async def _bare_http_error(request: Request, exc: Exception) -> Response:
    # 404/405 are framework fallbacks: no aviso JSON, just the status (and Allow on 405).
    assert isinstance(exc, HTTPException)
    return Response(status_code=exc.status_code, headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    # Starlette's last resort for an exception nothing else handled: the aviso error object,
    # never the exception's text. uvicorn logs the exception itself (with the request id),
    # then closes the connection: the client must not reuse it.
    request_id = request.scope.get("state", {}).get("request_id") or str(uuid.uuid4())
    error = internal_error()
    headers = [("X-Request-ID", request_id), ("Connection", "close")]
    return json_response(error.body(request_id), 500, headers=headers)


def api_routes() -> list[BaseRoute]:
    return [
        Route("/api/v1/notification", notify.NotifyRoute(), methods=["POST"], name="notify"),
        Route("/api/v1/watch", streams.StreamRoute(streams.watch), methods=["POST"], name="watch"),
        Route(
            "/api/v1/replay", streams.StreamRoute(streams.replay), methods=["POST"], name="replay"
        ),
        Route("/api/v1/schema", schema.list_schemas, methods=["GET"]),
        Route("/api/v1/schema/{event_type}", schema.get_schema, methods=["GET"]),
        Route(
            "/api/v1/admin/notification/{notification_id}",
            admin.delete_notification,
            methods=["DELETE"],
        ),
        Route("/api/v1/admin/wipe/stream", admin.wipe_stream, methods=["DELETE"]),
        Route("/api/v1/admin/wipe/all", admin.wipe_all, methods=["DELETE"]),
    ]


HOT_ROUTES = ("notify", "watch", "replay")
"""Routes the edge hands their requests to directly (:mod:`aviso_host.edge`)."""


def direct_routes(routes: Sequence[BaseRoute]) -> dict[str, Route]:
    """The hot routes by path, each only if the router would pick it for every ``POST`` to
    its path: a plain path, ``POST`` only, and only plain paths before it (a route with
    parameters, a mount or a host could match first)."""
    direct: dict[str, Route] = {}
    seen: set[str] = set()
    for route in routes:
        if not isinstance(route, Route) or route.param_convertors:
            break
        if route.name in HOT_ROUTES and route.methods == {"POST"} and route.path not in seen:
            direct[route.path] = route
        seen.add(route.path)
    return direct


class AvisoApp(Starlette):
    """Starlette with aviso's edge (:mod:`aviso_host.edge`) in place of its own two exception
    middlewares: each layer costs every request a frame and a ``send`` wrapper.
    Middleware added with ``add_middleware`` runs outside the edge."""

    service: Service
    """The same as ``state.service``, read per request without Starlette's ``State``, whose
    ``__getattr__`` costs each read a raised and caught ``AttributeError``."""
    body_limit: int | None
    """``limits.max_body_bytes``; ``None`` (set before the first request) only to measure the
    app without the limit (``benchmarks.limits``)."""

    def build_middleware_stack(self) -> ASGIApp:
        service: Service = self.state.service
        handlers = dict(self.exception_handlers)
        server_error = handlers.pop(Exception)
        app: ASGIApp = EdgeMiddleware(
            self.router,
            handlers=handlers,
            server_error=server_error,
            max_body_bytes=self.body_limit,
            authentication=Authentication(service.auth) if service.auth else None,
            # Per-request cost: only where someone scrapes (docs/metrics.md).
            metrics=(
                HttpMetrics(service.metrics, self.routes)
                if service.settings.metrics.enabled
                else None
            ),
            direct=direct_routes(self.routes),
        )
        for cls, args, kwargs in reversed(self.user_middleware):
            app = cls(app, *args, **kwargs)
        return app


def create_app(
    settings: Settings | None = None, registry: PluginRegistry | None = None
) -> AvisoApp:
    """Build the app; with no arguments, plugins and configuration are discovered as
    ``aviso-server serve`` would. ``app.state.service.begin_shutdown()`` closes every open stream
    with ``server_shutdown`` (``aviso-server serve`` calls it on SIGTERM/SIGINT; a gateway that
    mounts this app should call it from its own signal handling).
    """
    registry = registry or discover()
    settings = settings or load_settings(registry)
    service = Service(settings, registry)
    service.plugin_access = access = PluginService(service)
    hook = registry.manager.hook if registry.manager else None
    plugin_api_routes = (
        [route for routes in hook.aviso_api_routes(service=access) for route in routes]
        if hook
        else []
    )
    # After the API routes: the API description (the built-in plugin ``openapi``) asks
    # their plugins to describe them.
    extra_routes = (
        [route for routes in hook.aviso_extra_routes(service=access) for route in routes]
        if hook
        else []
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.ensure_started()
        try:
            yield
        finally:
            await service.begin_shutdown()
            await service.close()

    routes = [
        *api_routes(),
        *plugin_api_routes,
        *ops_routes(
            settings.application.static_files_path,
            server_version(),
            settings.application.homepage,
        ),
        *extra_routes,
    ]
    app = AvisoApp(
        routes=routes,
        exception_handlers={HTTPException: _bare_http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False
    app.state.service = app.service = service
    app.body_limit = settings.limits.max_body_bytes
    return app
