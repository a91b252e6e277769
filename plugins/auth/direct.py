"""The ``direct`` auth mode: auth-o-tron vouches for the client's credential.

The client's ``Bearer`` or ``Basic`` header is forwarded unchanged; the JWT auth-o-tron
returns is then validated locally with the shared ``jwt_secret``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from aviso_builtins.auth.auth_o_tron import AuthOTron
from aviso_builtins.auth.headers import direct_credential
from aviso_builtins.auth.tokens import DEFAULT_MAX_JSON_DEPTH, TokenVerifier
from aviso_plugins import hookimpl
from aviso_plugins.types import AuthProvider, AuthRequest, Caller


class DirectAuthProvider(AuthProvider):
    mode: ClassVar[str] = "direct"
    challenges: ClassVar[tuple[str, ...]] = ("Bearer", "Basic")

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self._auth_o_tron = AuthOTron(options["auth_o_tron_url"], options["timeout_ms"])
        self._verifier = TokenVerifier(
            options["jwt_secret"],
            max_json_depth=options.get("max_json_depth", DEFAULT_MAX_JSON_DEPTH),
        )

    async def start(self) -> None:
        await self._auth_o_tron.start()

    async def close(self) -> None:
        await self._auth_o_tron.close()

    async def authenticate(self, request: AuthRequest) -> Caller | None:
        authorization = request.authorization
        if authorization is None:
            return None
        token = await self._auth_o_tron.token_for(direct_credential(authorization))
        return self._verifier.caller(token)


@hookimpl
def aviso_auth_providers() -> list[type[AuthProvider]]:
    return [DirectAuthProvider]
