"""The ``http`` sink: POST each notification to a running server's notify API.

Options (text): ``url`` (the server's base URL, required), ``authorization`` (an
``Authorization`` header value passed through as is) or ``username`` + ``password`` (Basic),
``concurrency`` (requests in flight, also the connection pool size; default 8), ``retries``
(default 5), ``backoff_ms`` (first retry delay, doubled each time; default 100) and
``timeout_seconds`` (default 30).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from aviso_builtins.sinks.common import backoff_seconds, int_option, publish_all
from aviso_plugins import hookimpl
from aviso_plugins.types import (
    Notification,
    Sink,
    SinkContext,
    SinkOutcome,
    SinkRejected,
    SinkUnavailable,
)

if TYPE_CHECKING:
    # httpx is imported by the code that posts: discovering plugins
    # (`aviso-server --help`) imports this module and has no use for httpx.
    import httpx

NOTIFY_PATH = "/api/v1/notification"
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
"""The server's answer to a key whose notification it already stores (nothing stored again)."""


class HttpSink(Sink):
    name: ClassVar[str] = "http"

    def __init__(self, context: SinkContext) -> None:
        import httpx  # deferred: see the imports at the top

        super().__init__(context)
        options = context.options
        if not options.get("url"):
            raise ValueError("the http sink needs the option 'url' (the server's base URL)")
        self.endpoint = options["url"].rstrip("/") + NOTIFY_PATH
        self.concurrency = int_option(options, "concurrency", 8, 1)
        self.retries = int_option(options, "retries", 5, 0)
        self.backoff_ms = int_option(options, "backoff_ms", 100, 0)
        self.timeout = int_option(options, "timeout_seconds", 30, 1)
        self.headers = {"Content-Type": "application/json"}
        if options.get("authorization"):
            self.headers["Authorization"] = options["authorization"]
        self.auth = (
            httpx.BasicAuth(options["username"], options.get("password", ""))
            if options.get("username")
            else None
        )
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        import httpx  # deferred: see the imports at the top

        # One pooled client per sink: connections are reused across the whole partition.
        limits = httpx.Limits(
            max_connections=self.concurrency, max_keepalive_connections=self.concurrency
        )
        self._client = httpx.AsyncClient(
            headers=self.headers, auth=self.auth, limits=limits, timeout=self.timeout
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def publish_batch(self, notifications: Sequence[Notification]) -> list[SinkOutcome]:
        return await publish_all(notifications, self.concurrency, self._publish_one)

    async def _publish_one(self, notification: Notification) -> SinkOutcome:
        import httpx  # deferred: see the imports at the top

        assert self._client is not None, "start() was not called"
        body = json.dumps(
            {
                "event_type": notification.event_type,
                "identifier": dict(notification.identifier),
                "payload": notification.payload,
            },
            separators=(",", ":"),
        ).encode()
        headers = {IDEMPOTENCY_HEADER: notification.message_id} if notification.message_id else None
        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(backoff_seconds(self.backoff_ms, attempt - 1))
            try:
                response = await self._client.post(self.endpoint, content=body, headers=headers)
            except httpx.TransportError as exc:
                # The request may or may not have been stored: the idempotency key makes
                # the re-send safe either way.
                failure = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code < 400:
                replayed = response.headers.get(REPLAYED_HEADER, "").lower() == "true"
                return SinkOutcome(retries=attempt, already_stored=replayed)
            if response.status_code < 500:
                return SinkOutcome(retries=attempt, error=_rejection(response))
            failure = f"HTTP {response.status_code}: {response.text[:300]}"
        raise SinkUnavailable(
            f"POST {self.endpoint} failed after {self.retries + 1} attempts: {failure}"
        )


def _rejection(response: httpx.Response) -> SinkRejected:
    """The server's error object as a rejection (any 4xx body shape is tolerated)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        return SinkRejected(body["code"], str(body.get("message", "")))
    return SinkRejected(f"HTTP_{response.status_code}", response.text[:300])


@hookimpl
def aviso_sinks() -> list[type[Sink]]:
    return [HttpSink]
