"""The per-stream policy and the stream authorisers.

The routes call these at the step the contract orders: the policy right after the strict
event-type gate (and notify's ``point`` check), the authorisers after identifier validation
on watch/replay only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aviso_host.auth.gate import AuthGate
from aviso_host.auth.responses import SERVER_CONFIGURATION_ERROR, auth_error
from aviso_host.auth.roles import matches
from aviso_host.logs import log_event
from aviso_host.schemas import EventSchema
from aviso_plugins.types import AuthError, Caller

AUTHENTICATION_REQUIRED = "Authentication is required for this stream"
READ_DENIED = "User does not have required read role for this stream"
WRITE_DENIED = "User does not have required write role for this stream"
ADMIN_ONLY_WRITE = "Only administrators can write to this stream"
AUTHORISER_FAILED = "Authorisation check failed unexpectedly"


def check_stream_policy(
    gate: AuthGate | None, schema: EventSchema | None, caller: Caller | None, *, write: bool
) -> None:
    """Raise the 401/403 (or defensive 500) for this caller on this stream, if any."""
    stream_auth = schema.settings.auth if schema is not None else None
    if stream_auth is None or not stream_auth.required:
        return
    if gate is None:
        # Validation never lets a protected stream run without auth; settings built by
        # hand might, and then the stream fails closed instead of turning public.
        raise auth_error(500, SERVER_CONFIGURATION_ERROR)
    if caller is None:
        raise gate.failure(401, AUTHENTICATION_REQUIRED)
    if gate.is_admin(caller):
        return
    if write:
        if stream_auth.write_roles is None:
            raise gate.failure(403, ADMIN_ONLY_WRITE)
        if not matches(caller, stream_auth.write_roles):
            raise gate.failure(403, WRITE_DENIED)
    elif stream_auth.read_roles is not None and not matches(caller, stream_auth.read_roles):
        raise gate.failure(403, READ_DENIED)


async def run_authorisers(
    gate: AuthGate | None,
    schema: EventSchema | None,
    caller: Caller | None,
    identifier: Mapping[str, str],
) -> None:
    """Every authoriser the stream lists, in order; admins skip them all."""
    stream_auth = schema.settings.auth if schema is not None else None
    if schema is None or stream_auth is None or not stream_auth.plugins:
        return
    if gate is None or caller is None:
        raise auth_error(500, SERVER_CONFIGURATION_ERROR)
    if gate.is_admin(caller):
        for name in stream_auth.plugins:
            if name in gate.authorisers:
                gate.metrics.authorisers[name].admin_bypass()
        return
    for name in stream_auth.plugins:
        authoriser = gate.authorisers.get(name)
        if authoriser is None:
            raise auth_error(500, SERVER_CONFIGURATION_ERROR)
        try:
            await gate.metrics.authorisers[name].judge(
                authoriser.authorise(caller, schema.event_type, identifier)
            )
        except AuthError as exc:
            raise gate.failure(exc.status, exc.message) from exc
        except Exception as exc:
            authoriser.metrics.decision("error")
            log_event(
                "auth.authoriser.failed",
                f"{type(exc).__name__}: {exc}",
                logging.ERROR,
                authoriser=name,
            )
            raise auth_error(500, AUTHORISER_FAILED) from exc
