"""``GET /status``: a small public summary for the home page and the console.

It is anonymous, so it must stay cheap whoever asks and however often: the notification rate
is kept in one-second buckets as notifications are stored (no per-request scan), and the
answer, backend readiness included, is built at most once per second and shared.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from aviso_host.encoding import dumps
from aviso_plugins.api_shapes import Status

RATE_WINDOW_SECONDS = 60
STATUS_TTL_SECONDS = 1.0


class NotificationRate:
    """Notifications stored by this process: the total and the last minute, per second."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()
        self._seconds = [-1] * RATE_WINDOW_SECONDS
        self._counts = [0] * RATE_WINDOW_SECONDS
        self.total = 0

    def record(self) -> None:
        second = int(self._clock())
        slot = second % RATE_WINDOW_SECONDS
        if self._seconds[slot] != second:
            self._seconds[slot] = second
            self._counts[slot] = 0
        self._counts[slot] += 1
        self.total += 1

    def last_minute(self) -> int:
        """Notifications stored in the last 60 seconds (the current one included)."""
        oldest = int(self._clock()) - RATE_WINDOW_SECONDS
        return sum(
            count
            for second, count in zip(self._seconds, self._counts, strict=True)
            if second > oldest
        )

    def per_second(self) -> float:
        """The last minute's average, over the time served when that is shorter."""
        window = min(float(RATE_WINDOW_SECONDS), max(1.0, self._clock() - self._started))
        return round(self.last_minute() / window, 3)


class StatusBoard:
    """Builds the ``/status`` body, at most once per ``ttl`` seconds."""

    def __init__(
        self,
        version: str,
        backend_kind: str,
        ready: Callable[[], Awaitable[bool]],
        rate: NotificationRate,
        ttl: float = STATUS_TTL_SECONDS,
    ) -> None:
        self._ttl = ttl
        self._version = version
        self._backend_kind = backend_kind
        self._ready = ready
        self._rate = rate
        self._body = b""
        self._expires = float("-inf")
        self._lock: asyncio.Lock | None = None

    async def body(self) -> bytes:
        if time.monotonic() < self._expires:
            return self._body
        if self._lock is None:
            self._lock = asyncio.Lock()
        # Concurrent callers wait for the one that refreshes instead of each asking the backend.
        async with self._lock:
            if time.monotonic() >= self._expires:
                self._body = await self._build()
                self._expires = time.monotonic() + self._ttl
        return self._body

    async def _build(self) -> bytes:
        try:
            ready = await self._ready()
        except Exception:  # a failing probe is "not ready", never a 500 on a public page
            ready = False
        body: Status = {
            "backend": {"kind": self._backend_kind, "ready": ready},
            "notifications": {
                "last_minute": self._rate.last_minute(),
                "per_second": self._rate.per_second(),
                "total": self._rate.total,
            },
            "status": "ok",
            "version": self._version,
        }
        return dumps(body).encode()
