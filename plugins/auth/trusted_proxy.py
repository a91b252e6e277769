"""The ``trusted_proxy`` auth mode: a proxy in front minted the bearer JWT.

No outbound call: the token is validated locally with ``jwt_secret``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from aviso_builtins.auth.headers import bearer_token
from aviso_builtins.auth.tokens import DEFAULT_MAX_JSON_DEPTH, TokenVerifier
from aviso_plugins import hookimpl
from aviso_plugins.types import AuthProvider, AuthRequest, Caller


class TrustedProxyAuthProvider(AuthProvider):
    mode: ClassVar[str] = "trusted_proxy"
    challenges: ClassVar[tuple[str, ...]] = ("Bearer",)

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self._verifier = TokenVerifier(
            options["jwt_secret"],
            max_json_depth=options.get("max_json_depth", DEFAULT_MAX_JSON_DEPTH),
        )

    async def authenticate(self, request: AuthRequest) -> Caller | None:
        authorization = request.authorization
        if authorization is None:
            return None
        return self._verifier.caller(bearer_token(authorization))


@hookimpl
def aviso_auth_providers() -> list[type[AuthProvider]]:
    return [TrustedProxyAuthProvider]
