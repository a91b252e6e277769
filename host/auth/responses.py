"""The auth error object: four members, one code per status.

Every auth failure, whoever detects it (the middleware, the stream policy, an authoriser),
is built here, so the body shape and the ``WWW-Authenticate`` rule cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from aviso_host.errors import ApiError

_LABELS = {
    401: ("UNAUTHORIZED", "unauthorized"),
    403: ("FORBIDDEN", "forbidden"),
    503: ("SERVICE_UNAVAILABLE", "service_unavailable"),
    500: ("INTERNAL_ERROR", "internal_error"),
}

SERVER_CONFIGURATION_ERROR = "Server configuration error"


def auth_error(status: int, message: str, challenges: Sequence[str] = ()) -> ApiError:
    """The error for ``status``; ``challenges`` become ``WWW-Authenticate`` fields on 401 only.

    A status outside the contract (a plugin defect) is answered as 500, never passed on.
    """
    if status not in _LABELS:
        status = 500
    code, label = _LABELS[status]
    return ApiError(
        status,
        code,
        label,
        message,
        with_details=False,
        event_name="api.request.auth.failed",
        headers=[("WWW-Authenticate", value) for value in challenges] if status == 401 else (),
    )
