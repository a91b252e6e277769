"""aviso's edge: the one middleware every request on the main listener passes, outermost.

In this order it
- gives the request its id (:mod:`aviso_host.request_id`) and counts it in the HTTP metrics
  (:class:`aviso_host.metrics.HttpMetrics`, with metrics enabled);
- resolves the caller of ``/api/v1`` requests (:mod:`aviso_host.auth.middleware`, with auth
  enabled), whose refusal is the answer;
- bounds the body (:mod:`aviso_host.body_limit`);
- routes: a ``POST`` to a hot endpoint (notify, watch, replay: ``direct``) goes straight to
  its ASGI endpoint, with the scope Starlette's router would give it, instead of through the
  router's loop over every route; anything else goes to the router. Either way it answers
  an exception that has a handler with it (what Starlette's
  ``ExceptionMiddleware`` does) and any other with the 500 handler before re-raising it for
  the server to log (what Starlette's ``ServerErrorMiddleware`` does); an app that returns
  without answering gets that 500 too, so that no server's own last-resort answer (plain
  text) reaches the client. The routes' own exception handling gets no handlers (no
  ``starlette.exception_handlers`` in the scope): what a route raises comes here, to the
  same handlers;
- writes the request's ``http.request`` line (:mod:`aviso_host.request_log`); a client that
  went away before its body was read (``ClientDisconnect``, nobody left to answer) gets
  that line with status 499 (nginx's "client closed request") and nothing else: it is the
  client's doing, not an error of the server's.

One frame and one ``send`` wrapper per request (which stamps ``X-Request-ID`` and sees the
status) instead of a middleware for each step: every request, and every chunk a stream
sends, pays for each layer. ``scope[RAW_SEND]`` (``"aviso.raw_send"``) is the ``send`` this
middleware was given, the server's own, for streams that send their body chunks without the
wrapper once the head went through it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.routing import Route
from starlette.types import ASGIApp, ExceptionHandler, Message, Receive, Scope, Send

from aviso_host.auth.middleware import Authentication, route_path
from aviso_host.body_limit import bounded_receive, refuse
from aviso_host.logs import audit_var, request_id_var
from aviso_host.metrics import HttpMetrics
from aviso_host.request_id import RAW_SEND, new_request_id, with_request_id
from aviso_host.request_log import log_request
from aviso_host.requests import BodyTooLarge

CLIENT_CLOSED_REQUEST = 499


class NoAnswer(RuntimeError):
    """The app returned without starting a response."""


def exception_handler(
    handlers: Mapping[Any, ExceptionHandler], exc: Exception
) -> ExceptionHandler | None:
    """The handler of ``exc``: that of its class or the nearest base class that has one."""
    for cls in type(exc).__mro__:
        handler = handlers.get(cls)
        if handler is not None:
            return handler
    return None


class EdgeMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        handlers: Mapping[Any, ExceptionHandler],
        server_error: ExceptionHandler,
        max_body_bytes: int | None,
        authentication: Authentication | None = None,
        metrics: HttpMetrics | None = None,
        direct: Mapping[str, Route] | None = None,
    ) -> None:
        """``handlers``: exception class -> handler; ``server_error``: the handler of every
        other exception; ``max_body_bytes``: ``None`` only to measure the edge without it;
        ``direct``: routes of plain ASGI endpoints that accept ``POST`` only and that the
        router would pick first for their path, by path."""
        self.app = app
        self.direct = dict(direct or {})
        self.handlers = dict(handlers)
        self.server_error = server_error
        self.max_body_bytes = max_body_bytes
        self.authentication = authentication
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[RAW_SEND] = send
        request_id = new_request_id()
        state = scope.get("state")
        if state is None:
            scope["state"] = state = {}
        state["request_id"] = request_id
        id_token = request_id_var.set(request_id)
        audit_token = audit_var.set(None)
        started = time.perf_counter()
        observation = self.metrics.observe(scope) if self.metrics is not None else None
        status = 0
        """The answered status, 0 until the response head is sent."""
        failed = 500
        """The status logged when none was answered."""

        async def send_edge(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if observation is not None:
                    observation.head(scope, status)
                # Made here, not held for the whole request: a stream's lasts for hours.
                message = with_request_id(message, (b"x-request-id", request_id.encode()))
            await send(message)

        try:
            try:
                limit = self.max_body_bytes
                app = self._direct_app(scope) if self.direct else None
                if app is None:
                    app = self.app
                refusal = (
                    await self.authentication.refusal(scope)
                    if self.authentication is not None
                    else None
                )
                if refusal is not None:
                    await refusal(scope, receive, send_edge)
                elif limit is None:
                    await app(scope, receive, send_edge)
                elif (bounded := bounded_receive(scope, receive, limit)) is None:
                    await refuse(limit, request_id, send_edge)
                else:
                    try:
                        await app(scope, bounded, send_edge)
                    except BodyTooLarge:
                        # Raised while a handler read its body, before it started an answer.
                        await refuse(limit, request_id, send_edge)
                if not status:
                    raise NoAnswer("ASGI callable returned without starting response.")
            except ClientDisconnect:
                if status:
                    raise
                failed = CLIENT_CLOSED_REQUEST
            except Exception as exc:
                handler = exception_handler(self.handlers, exc)
                if handler is None:
                    raise
                if status:
                    raise RuntimeError(
                        "Caught handled exception, but response already started."
                    ) from exc
                response = await handler(Request(scope, receive), exc)  # type: ignore[arg-type, misc]
                await response(scope, receive, send_edge)
                # Reused exception instances accumulate tracebacks across requests.
                exc.__traceback__ = None
        except Exception as exc:
            if observation is not None:
                observation.failed()
            if not status:
                # As Starlette's ServerErrorMiddleware: straight to the server's send.
                response = await self.server_error(Request(scope), exc)  # type: ignore[arg-type, misc]
                await response(scope, receive, send)
            raise
        except asyncio.CancelledError:
            raise
        except BaseException:
            if observation is not None:
                observation.failed()
            raise
        finally:
            if observation is not None:
                observation.end()
            log_request(scope, status or failed, started)
            audit_var.reset(audit_token)
            # The server's send is its request cycle's, which holds the scope: left here, each
            # request would end as a reference cycle only the garbage collector frees.
            scope.pop(RAW_SEND, None)
        # Not reset when the app raised: uvicorn logs the exception after this returns, in
        # the request's own task, and that line should carry the id too.
        request_id_var.reset(id_token)

    def _direct_app(self, scope: Scope) -> ASGIApp | None:
        """The endpoint of a ``POST`` to a direct route, its scope set as the router would
        set it (``router``, ``route``, ``endpoint``, ``path_params``); ``None`` otherwise."""
        if scope["method"] != "POST":
            return None
        route = self.direct.get(route_path(scope))
        if route is None:
            return None
        scope.setdefault("router", self.app)
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        params = scope.get("path_params")
        scope["path_params"] = dict(params) if params else {}
        return route.app
