"""The auth-o-tron exchange of the ``direct`` mode.

One ``GET /authenticate`` per credentialed request, the whole exchange bounded by
``timeout_ms``; the answer is mapped to a JWT or to the contract's 401/403/503.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING

from aviso_builtins.auth.http import upstream_client
from aviso_builtins.auth.tokens import INVALID_TOKEN, is_jwt_shaped
from aviso_plugins.types import AuthError

if TYPE_CHECKING:
    # httpx is imported by the code that calls upstream: discovering plugins
    # (`aviso-server --help`) imports this module and has no use for httpx.
    import httpx

UNAVAILABLE = "Authentication service temporarily unavailable"
NOT_CONFIGURED = "Authentication service is not configured correctly"
DENIED = "Token validation was denied"

_BODY_TOKEN_KEYS = ("token", "jwt", "access_token")

logger = logging.getLogger("aviso.auth")


class AuthOTron:
    def __init__(self, base_url: str, timeout_ms: int) -> None:
        self.endpoint = base_url.rstrip("/") + "/authenticate"
        self._timeout = timeout_ms / 1000
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        import httpx  # deferred: see the imports at the top

        try:
            self._client = upstream_client(httpx.Timeout(self._timeout), follow_redirects=True)
        except Exception as exc:
            # E.g. an unreadable SSL_CERT_FILE: anonymous traffic keeps working, every
            # credentialed request says why it cannot be checked.
            logger.error("auth-o-tron client unusable: %s: %s", type(exc).__name__, exc)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def token_for(self, credential: str) -> str:
        """Exchange the client's credential for a JWT, or raise the mapped AuthError."""
        if self._client is None:
            raise AuthError(503, NOT_CONFIGURED)
        import httpx  # deferred: see the imports at the top

        try:
            async with asyncio.timeout(self._timeout):
                response = await self._client.get(
                    self.endpoint, headers={"Authorization": credential}
                )
        except (httpx.HTTPError, httpx.InvalidURL, TimeoutError) as exc:
            logger.warning("auth-o-tron unreachable: %s", type(exc).__name__)
            raise AuthError(503, UNAVAILABLE) from exc
        if response.status_code == 401:
            raise AuthError(401, INVALID_TOKEN)
        if response.status_code == 403:
            raise AuthError(403, DENIED)
        if not response.is_success:
            logger.warning("auth-o-tron answered HTTP %d", response.status_code)
            raise AuthError(503, UNAVAILABLE)
        token = locate_token(response.headers.get_list("authorization"), response.content)
        if token is None:
            logger.warning("auth-o-tron answered %d without a token", response.status_code)
            raise AuthError(503, UNAVAILABLE)
        return token


def locate_token(authorization: list[str], body: bytes) -> str | None:
    """The JWT of a 2xx answer: the ``Authorization`` header first, then the body."""
    if authorization:
        parts = authorization[0].split()
        if len(parts) == 2 and parts[0].lower() == "bearer" and is_jwt_shaped(parts[1]):
            return parts[1]
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict):
        return _object_token(document)
    if isinstance(document, str):
        candidate = document.strip()
        return candidate if is_jwt_shaped(candidate) else None
    return text if is_jwt_shaped(text) else None


def _object_token(document: dict[str, object]) -> str | None:
    # Any of the three keys holding a non-string spoils the object; otherwise the first
    # present one decides, even when it is not a JWT.
    values = [document.get(key) for key in _BODY_TOKEN_KEYS]
    if any(value is not None and not isinstance(value, str) for value in values):
        return None
    first = next((value for value in values if value is not None), None)
    if not isinstance(first, str):
        return None
    first = first.strip()
    return first if is_jwt_shaped(first) else None
