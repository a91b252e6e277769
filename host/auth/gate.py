"""The authentication runtime: the selected provider, the admin map, the authorisers in use.

It exists only while ``auth.enabled`` is true; ``None`` everywhere else means "auth off".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import partial

from aviso_host.auth.request_view import takes_authorization_header
from aviso_host.auth.responses import auth_error
from aviso_host.auth.roles import RoleMap, matches
from aviso_host.config.construct import construct, start
from aviso_host.config.settings import Settings
from aviso_host.errors import ApiError
from aviso_host.metrics import Metrics
from aviso_host.plugins import PluginError, PluginRegistry
from aviso_plugins.types import AuthProvider, AuthRequest, Caller, StreamAuthoriser


@dataclass(frozen=True)
class AuthGate:
    provider: AuthProvider
    admin_roles: RoleMap
    authorisers: Mapping[str, StreamAuthoriser]
    """Only the authorisers some stream lists and some plugin provides."""
    metrics: Metrics
    legacy_provider: bool = False
    """The provider declares ``authenticate(authorization)`` (deprecated, still served)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Who each plugin is, for a start failure: ``"provider"`` and each authoriser name."""
    mode: str = ""
    secrets: tuple[str, ...] = ()

    @classmethod
    def build(
        cls, settings: Settings, registry: PluginRegistry, metrics: Metrics
    ) -> AuthGate | None:
        auth = settings.auth
        if not auth.enabled:
            return None
        provider = registry.auth_providers.get(auth.mode)
        if provider is None:
            # Configuration validation refuses this; settings built by hand must not slip by.
            raise PluginError(f"no installed plugin provides auth mode {auth.mode!r}")
        options = {item.name: getattr(auth, item.name) for item in fields(auth)}
        # Token payloads are client JSON too: the same nesting limit as request bodies.
        options["max_json_depth"] = settings.limits.max_json_depth
        used = {
            name
            for schema in settings.schemas.values()
            if schema.auth is not None
            for name in schema.auth.plugins
        }
        return cls(
            provider=construct(
                lambda: provider(options),
                ("auth", auth.mode),
                registry.describe("auth_providers", auth.mode),
                settings.secrets,
            ),
            admin_roles=auth.admin_roles,
            authorisers={
                name: construct(
                    partial(
                        registry.authorisers[name],
                        settings.authorisers.get(name, {}),
                        metrics.authorisers[name],
                    ),
                    (name,),
                    registry.describe("authorisers", name),
                    settings.secrets,
                )
                for name in sorted(used)
                if name in registry.authorisers
            },
            metrics=metrics,
            legacy_provider=takes_authorization_header(provider),
            labels={
                "provider": registry.describe("auth_providers", auth.mode),
                **{name: registry.describe("authorisers", name) for name in used},
            },
            mode=auth.mode,
            secrets=tuple(settings.secrets),
        )

    async def authenticate(self, request: AuthRequest) -> Caller | None:
        """The provider's verdict; a provider of the old signature gets the header only."""
        if self.legacy_provider:
            return await self.provider.authenticate(request.authorization)  # type: ignore[arg-type]
        return await self.provider.authenticate(request)

    def failure(self, status: int, message: str) -> ApiError:
        """An auth error carrying this provider's challenges (on 401)."""
        return auth_error(status, message, self.provider.challenges)

    def is_admin(self, caller: Caller) -> bool:
        return matches(caller, self.admin_roles)

    async def start(self) -> None:
        label = self.labels.get("provider", "auth provider")
        await start(self.provider.start, ("auth", self.mode), label, self.secrets)
        for name, authoriser in self.authorisers.items():
            label = self.labels.get(name, f"stream authoriser {name!r}")
            await start(authoriser.start, (name,), label, self.secrets)

    async def close(self) -> None:
        for authoriser in self.authorisers.values():
            await authoriser.close()
        await self.provider.close()
