"""The ``ecpds`` stream authoriser: may this user read this destination? (auth chapter §8)

A stream opts in with ``auth.plugins: ["ecpds"]``; the host calls it on watch/replay only,
after the stream policy and identifier validation, and never for admins. It fails closed:
no error path allows the request, and upstream error text never reaches the client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx

from aviso_builtins.auth.ecpds_cache import DestinationCache, Destinations
from aviso_builtins.auth.ecpds_upstream import LookupFailed, ask_server, merge
from aviso_builtins.auth.http import upstream_client
from aviso_plugins import hookimpl
from aviso_plugins.types import AuthError, Caller, StreamAuthoriser

UNAVAILABLE = "ECPDS service is inaccessible"
FAILED = "ECPDS check failed unexpectedly"
MISCONFIGURED = "Server configuration error"

logger = logging.getLogger("aviso.ecpds")


class EcpdsAuthoriser(StreamAuthoriser):
    name: ClassVar[str] = "ecpds"

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self._servers: tuple[str, ...] = tuple(options["servers"])
        self._match_key: str = options["match_key"]
        self._target_field: str = options["target_field"]
        self._any_success = options["partial_outage_policy"] == "any_success"
        self._deadline = float(options["request_timeout_seconds"])
        self._timeout = httpx.Timeout(
            self._deadline, connect=float(options["connect_timeout_seconds"])
        )
        self._credentials = httpx.BasicAuth(options["username"], options["password"])
        self._cache = DestinationCache(options["cache_ttl_seconds"], options["max_entries"])
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
        client = self._client
        if client is None:
            raise AuthError(500, MISCONFIGURED)
        value = identifier.get(self._match_key)
        if value is None:
            raise AuthError(
                403, f"Required field '{self._match_key}' not found in request identifiers"
            )
        try:
            destinations = await self._cache.get(
                caller.username, lambda username: self._fetch(client, username), max_age
            )
        except LookupFailed as exc:
            raise AuthError(503, UNAVAILABLE) from exc
        except Exception as exc:
            logger.error("ECPDS check failed: %s: %s", type(exc).__name__, exc)
            raise AuthError(500, FAILED) from exc
        if value not in destinations:
            raise AuthError(
                403, f"User '{caller.username}' does not have access to destination '{value}'"
            )

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
            logger.warning("ECPDS lookup for %r failed: %s", username, exc.outcome)
            raise
        logger.info("ECPDS lookup for %r: %s", username, outcome)
        return destinations


@hookimpl
def aviso_stream_authorisers() -> list[type[StreamAuthoriser]]:
    return [EcpdsAuthoriser]
