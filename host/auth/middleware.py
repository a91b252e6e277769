"""Resolving the caller once per ``/api/v1`` request, a step of
aviso's edge (:mod:`aviso_host.edge`).

It runs after the request id is set and before the body limit and routing, so unknown or
wrong-method paths under ``/api/v1/admin`` are refused like known ones.
Paths are taken as the router sees them, so the rules hold when the app is mounted under a
prefix.
"""

from __future__ import annotations

import logging

from starlette.responses import Response
from starlette.types import Scope

from aviso_host.auth.gate import AuthGate
from aviso_host.auth.request_view import auth_request
from aviso_host.errors import ApiError, json_response
from aviso_host.logs import log_event, set_audit
from aviso_plugins.types import AuthError, AuthRequest, Caller, MalformedCredentials

API_PREFIX = "/api/v1"
SCHEMA_PREFIX = "/api/v1/schema"
ADMIN_PREFIX = "/api/v1/admin"

HEADER_REQUIRED = "Authorization header is required"
NOT_ADMIN = "User does not have required administrative role"
PROVIDER_FAILED = "Authentication check failed unexpectedly"


def route_path(scope: Scope) -> str:
    """The request's path below the prefix the app is mounted under (``root_path``), as a
    Starlette router matches it."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if not root_path or not path.startswith(root_path):
        return path
    rest = path[len(root_path) :]
    # "/aviso" mounted does not make "/avisoX" its "X"; the prefix itself is the root.
    return rest if not rest or rest.startswith("/") else path


def is_authenticated_path(path: str) -> bool:
    """Under ``/api/v1`` (as a path segment) and not a schema path."""
    under_api = path == API_PREFIX or path.startswith(API_PREFIX + "/")
    return under_api and not path.startswith(SCHEMA_PREFIX)


class Authentication:
    def __init__(self, gate: AuthGate) -> None:
        self.gate = gate

    async def refusal(self, scope: Scope) -> Response | None:
        """Resolve the caller of an HTTP request (``scope["state"]["caller"]``, the audit
        fields); the answer to send instead of serving it, or ``None`` to serve it."""
        path = route_path(scope)
        if not is_authenticated_path(path):
            return None
        state = scope["state"]
        try:
            caller = await self._resolve(auth_request(scope, path), path.startswith(ADMIN_PREFIX))
        except ApiError as error:
            self.gate.metrics.auth_request(self.gate.provider.mode, error.status)
            level = logging.ERROR if error.status >= 500 else logging.WARNING
            log_event(error.event_name, error.message, level, code=error.code)
            body = error.body(state["request_id"])
            return json_response(body, error.status, sort_keys=False, headers=error.headers)
        if caller is not None:
            self.gate.metrics.auth_request(self.gate.provider.mode, None)
            set_audit(caller.username, caller.realm)
        state["caller"] = caller
        return None

    async def _resolve(self, request: AuthRequest, admin: bool) -> Caller | None:
        gate = self.gate
        try:
            caller = await gate.authenticate(request)
        except MalformedCredentials as exc:
            # Elsewhere defective credentials are as good as none: public streams stay usable.
            if admin:
                raise gate.failure(401, exc.message) from exc
            return None
        except AuthError as exc:
            raise gate.failure(exc.status, exc.message) from exc
        except Exception as exc:
            log_event(
                "auth.provider.failed",
                f"{type(exc).__name__}: {exc}",
                logging.ERROR,
                mode=type(gate.provider).mode,
            )
            raise gate.failure(500, PROVIDER_FAILED) from exc
        if admin:
            if caller is None:
                raise gate.failure(401, HEADER_REQUIRED)
            if not gate.is_admin(caller):
                raise gate.failure(403, NOT_ADMIN)
        return caller
