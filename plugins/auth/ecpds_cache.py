"""The ECPDS destination cache: TTL from insertion, bounded size, single flight.

Concurrent misses for one user share one fetch, run as its own task so that a client
hanging up cannot cancel the lookup other requests are waiting for. Only successes are
stored; a failure reaches every waiter of that fetch and the next request fetches again.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

Destinations = frozenset[str]
Fetch = Callable[[str], Awaitable[Destinations]]


class DestinationCache:
    def __init__(
        self,
        ttl_seconds: float,
        max_entries: int,
        clock: Callable[[], float] = time.monotonic,
        on_lookup: Callable[[bool], None] = lambda hit: None,
    ) -> None:
        self._ttl = ttl_seconds
        self._on_lookup = on_lookup
        """Told of every :meth:`get`: served from cache (``True``) or not."""
        self._max_entries = max_entries
        self._clock = clock
        # Least recently used first; each value is (expiry time, destinations).
        self._entries: OrderedDict[str, tuple[float, Destinations]] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[Destinations]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def cached(self, username: str, max_age: float | None = None) -> Destinations | None:
        """The unexpired entry for ``username`` (refreshing its recency), else ``None``.

        With ``max_age``, an entry fetched longer ago than that counts as missing too (it
        stays stored for requests that accept it until it is replaced or expires).
        """
        entry = self._entries.get(username)
        if entry is None:
            return None
        expires, destinations = entry
        now = self._clock()
        if expires <= now:
            del self._entries[username]
            return None
        if max_age is not None and now - (expires - self._ttl) > max_age:
            return None
        self._entries.move_to_end(username)
        return destinations

    async def get(self, username: str, fetch: Fetch, max_age: float | None = None) -> Destinations:
        """The user's destinations from cache (no older than ``max_age`` if given), or from
        the one fetch in flight for them."""
        destinations = self.cached(username, max_age)
        self._on_lookup(destinations is not None)
        if destinations is not None:
            return destinations
        task = self._inflight.get(username)
        if task is None:
            task = asyncio.ensure_future(fetch(username))
            self._inflight[username] = task
            task.add_done_callback(lambda done: self._settle(username, done))
        # shield: one waiter's cancellation must not cancel the shared fetch.
        return await asyncio.shield(task)

    def _settle(self, username: str, task: asyncio.Task[Destinations]) -> None:
        del self._inflight[username]
        if task.cancelled() or task.exception() is not None:
            return  # errors are never cached (and retrieving the exception marks it seen)
        self._entries[username] = (self._clock() + self._ttl, task.result())
        self._entries.move_to_end(username)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
