"""The ``ecpds`` stream authoriser: may this user read this destination?

A stream opts in with ``auth.plugins: ["ecpds"]``; the host calls it on watch/replay only,
after the stream policy and identifier validation, and never for admins. It fails closed:
no error path allows the request, and upstream error text never reaches the client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from aviso_builtins.auth.ecpds_cache import DestinationCache, Destinations
from aviso_builtins.auth.ecpds_rules import OPTIONS_SCHEMA, SECTION, check
from aviso_builtins.auth.ecpds_upstream import (
    FAILURE_LABELS,
    SUCCESS,
    LookupFailed,
    ask_server,
    merge,
)
from aviso_builtins.auth.http import upstream_client
from aviso_plugins import hookimpl
from aviso_plugins.types import (
    AuthError,
    AuthoriserConfiguration,
    AuthoriserMetrics,
    Caller,
    ConfigurationProblem,
    StreamAuthoriser,
)

if TYPE_CHECKING:
    # httpx is imported by the code that calls upstream: discovering plugins
    # (`aviso-server --help`) imports this module and has no use for httpx.
    import httpx

UNAVAILABLE = "ECPDS service is inaccessible"
FAILED = "ECPDS check failed unexpectedly"
MISCONFIGURED = "Server configuration error"

logger = logging.getLogger("aviso.ecpds")


class _Denied(AuthError):
    """A refusal that is a verdict (or no verdict), labelled for the decisions metric."""

    def __init__(self, outcome: str, status: int, message: str) -> None:
        super().__init__(status, message)
        self.outcome = outcome


class EcpdsAuthoriser(StreamAuthoriser):
    name: ClassVar[str] = SECTION
    options_schema: ClassVar[Mapping[str, Any]] = OPTIONS_SCHEMA
    decision_outcomes: ClassVar[tuple[str, ...]] = (
        "allow",
        "deny_destination",
        "deny_match_key_missing",
        "unavailable",
        "admin_bypass",
        "error",
    )
    fetch_outcomes: ClassVar[tuple[str, ...]] = (SUCCESS, *FAILURE_LABELS)
    # The specification pins the aviso_ecpds_* names.
    dedicated_metrics: ClassVar[bool] = True

    @classmethod
    def check_configuration(
        cls, configuration: AuthoriserConfiguration
    ) -> Sequence[ConfigurationProblem]:
        return check(configuration)

    def __init__(
        self, options: Mapping[str, Any], metrics: AuthoriserMetrics | None = None
    ) -> None:
        import httpx  # deferred: see the imports at the top

        super().__init__(options, metrics)
        self._servers: tuple[str, ...] = tuple(options["servers"])
        self._match_key: str = options["match_key"]
        self._target_field: str = options["target_field"]
        self._any_success = options["partial_outage_policy"] == "any_success"
        self._deadline = float(options["request_timeout_seconds"])
        self._timeout = httpx.Timeout(
            self._deadline, connect=float(options["connect_timeout_seconds"])
        )
        self._credentials = httpx.BasicAuth(options["username"], options["password"])
        self._cache = DestinationCache(
            options["cache_ttl_seconds"],
            options["max_entries"],
            on_lookup=self.metrics.cache_lookup,
        )
        self._recheck_seconds = float(options["recheck_seconds"])
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        try:
            self._client = upstream_client(self._timeout, auth=self._credentials)
        except Exception as exc:
            # E.g. an unreadable SSL_CERT_FILE: the plugin streams fail closed with a 500
            # ("no checker"), everything else keeps working.
            logger.error("ECPDS client unusable: %s: %s", type(exc).__name__, exc)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    @property
    def recheck_seconds(self) -> float:
        return self._recheck_seconds

    async def authorise(
        self, caller: Caller, event_type: str, identifier: Mapping[str, str]
    ) -> None:
        await self._check(caller, identifier, None)

    async def reauthorise(
        self, caller: Caller, event_type: str, identifier: Mapping[str, str]
    ) -> None:
        # A cached list may predate a revocation by up to the cache TTL; a recheck accepts
        # one no older than the recheck interval, so every open stream of a user shares
        # at most one upstream call per interval.
        await self._check(caller, identifier, self._recheck_seconds)

    async def _check(
        self, caller: Caller, identifier: Mapping[str, str], max_age: float | None
    ) -> None:
        """One evaluation, reported to the metrics whatever its outcome."""
        try:
            self.metrics.decision(await self._decide(caller, identifier, max_age))
        except AuthError as exc:
            self.metrics.decision(exc.outcome if isinstance(exc, _Denied) else "error")
            raise
        finally:
            self.metrics.cache_size(len(self._cache))

    async def _decide(
        self, caller: Caller, identifier: Mapping[str, str], max_age: float | None
    ) -> str:
        """``allow``, or raise the refusal (a :class:`_Denied` names its outcome label)."""
        client = self._client
        if client is None:
            raise AuthError(500, MISCONFIGURED)
        value = identifier.get(self._match_key)
        if value is None:
            raise _Denied(
                "deny_match_key_missing",
                403,
                f"Required field '{self._match_key}' not found in request identifiers",
            )
        try:
            destinations = await self._cache.get(
                caller.username, lambda username: self._fetch(client, username), max_age
            )
        except LookupFailed as exc:
            raise _Denied("unavailable", 503, UNAVAILABLE) from exc
        except Exception as exc:
            logger.error("ECPDS check failed: %s: %s", type(exc).__name__, exc)
            raise AuthError(500, FAILED) from exc
        if value not in destinations:
            raise _Denied(
                "deny_destination",
                403,
                f"User '{caller.username}' does not have access to destination '{value}'",
            )
        return "allow"

    async def _fetch(self, client: httpx.AsyncClient, username: str) -> Destinations:
        answers = await asyncio.gather(
            *(
                ask_server(client, server, username, self._target_field, self._deadline)
                for server in self._servers
            )
        )
        try:
            destinations, outcome = merge(answers, self._any_success)
        except LookupFailed as exc:
            self.metrics.fetch(exc.outcome)
            logger.warning("ECPDS lookup for %r failed: %s", username, exc.outcome)
            raise
        self.metrics.fetch(outcome)
        logger.info("ECPDS lookup for %r: %s", username, outcome)
        return destinations


@hookimpl
def aviso_stream_authorisers() -> list[type[StreamAuthoriser]]:
    return [EcpdsAuthoriser]
