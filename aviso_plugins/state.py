"""Shared state: small key-value buckets that every worker and instance of a deployment sees
alike, for what plugins and the host keep beside the notifications (consumer positions,
subscriptions and their cursors, leases, claims only one writer can win).

A storage backend provides them (:meth:`StorageBackend.shared_state`): on a backend shared
between processes the buckets live in the shared store; on a process-local backend they are
:class:`ProcessLocalState`, as the notifications are.

Keys are one or more segments of ``A-Z a-z 0-9 _ = -`` joined by ``.``, at most 255
characters (:func:`valid_key`); encode anything else (a user name) before using it in a key.
"""

from __future__ import annotations

import base64
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = [
    "MAX_KEY_LENGTH",
    "DeferredState",
    "ProcessLocalState",
    "SharedState",
    "StateEntry",
    "key_segment",
    "valid_key",
]

_KEY = re.compile(r"[A-Za-z0-9_=-]+(\.[A-Za-z0-9_=-]+)*")
MAX_KEY_LENGTH = 255


def valid_key(key: str) -> bool:
    """Whether every implementation accepts ``key``."""
    return len(key) <= MAX_KEY_LENGTH and _KEY.fullmatch(key) is not None


def key_segment(text: str) -> str:
    """``text`` (any string, a user name say) as one key segment: its UTF-8 in unpadded
    base64url, so that distinct texts give distinct segments. Empty text gives ``_``."""
    if not text:
        return "_"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class StateEntry:
    key: str
    value: bytes
    revision: int
    """Changes at every write of the key; what :meth:`SharedState.update` compares."""


class SharedState(ABC):
    """One bucket. Every method raises ``ValueError`` for a key :func:`valid_key` refuses,
    and raises (whatever the store raises) when the store cannot be reached: a caller that
    cannot tell whether a write happened reads the key again.

    With ``ttl_seconds`` (see :meth:`StorageBackend.shared_state`) an entry not written for
    that long is gone, as if deleted: what a lease needs (its holder re-writes it).
    """

    @abstractmethod
    async def get(self, key: str) -> StateEntry | None:
        """The entry, or ``None`` when the key has none (never written, deleted, expired)."""

    @abstractmethod
    async def create(self, key: str, value: bytes) -> int | None:
        """Write only if the key has no entry; the new revision, or ``None`` when one
        exists. Of several concurrent creates exactly one wins, across every process."""

    @abstractmethod
    async def update(self, key: str, value: bytes, revision: int) -> int | None:
        """Write only if the key's entry is still at ``revision``; the new revision, or
        ``None`` when it is not (changed, deleted or expired since)."""

    @abstractmethod
    async def put(self, key: str, value: bytes) -> int:
        """Write whatever is there; the new revision."""

    @abstractmethod
    async def delete(self, key: str, revision: int | None = None) -> bool:
        """Remove the key's entry (only if still at ``revision`` when given); whether it
        was removed."""

    @abstractmethod
    async def keys(self, prefix: str = "") -> list[str]:
        """The keys with an entry that start with ``prefix``, sorted."""


class ProcessLocalState(SharedState):
    """A bucket in this process's memory: shared state for a backend that is not shared
    between processes (nothing outlives the process)."""

    def __init__(self, ttl_seconds: float | None = None) -> None:
        self._ttl = ttl_seconds
        self._entries: dict[str, tuple[StateEntry, float]] = {}
        self._revision = 0

    def _live(self, key: str) -> StateEntry | None:
        if not valid_key(key):
            raise ValueError(f"invalid shared-state key {key!r}")
        found = self._entries.get(key)
        if found is None:
            return None
        entry, written = found
        if self._ttl is not None and time.monotonic() - written >= self._ttl:
            del self._entries[key]
            return None
        return entry

    def _write(self, key: str, value: bytes) -> int:
        self._revision += 1
        self._entries[key] = (StateEntry(key, bytes(value), self._revision), time.monotonic())
        return self._revision

    async def get(self, key: str) -> StateEntry | None:
        return self._live(key)

    async def create(self, key: str, value: bytes) -> int | None:
        if self._live(key) is not None:
            return None
        return self._write(key, value)

    async def update(self, key: str, value: bytes, revision: int) -> int | None:
        entry = self._live(key)
        if entry is None or entry.revision != revision:
            return None
        return self._write(key, value)

    async def put(self, key: str, value: bytes) -> int:
        self._live(key)
        return self._write(key, value)

    async def delete(self, key: str, revision: int | None = None) -> bool:
        entry = self._live(key)
        if entry is None or (revision is not None and entry.revision != revision):
            return False
        del self._entries[key]
        return True

    async def keys(self, prefix: str = "") -> list[str]:
        return sorted(
            key for key in list(self._entries) if key.startswith(prefix) and self._live(key)
        )


class DeferredState(SharedState):
    """A bucket opened on its first use by ``opener`` (say, ``backend.shared_state(name)``),
    for code that must hand a bucket out before the backend has started. ``opener``
    answering ``None`` (a backend that keeps no shared state) makes every call raise
    ``RuntimeError``."""

    def __init__(self, opener: Callable[[], Awaitable[SharedState | None]]) -> None:
        self._opener = opener
        self._state: SharedState | None = None

    async def _opened(self) -> SharedState:
        if self._state is None:
            self._state = await self._opener()
            if self._state is None:
                raise RuntimeError("this backend keeps no shared state")
        return self._state

    async def get(self, key: str) -> StateEntry | None:
        return await (await self._opened()).get(key)

    async def create(self, key: str, value: bytes) -> int | None:
        return await (await self._opened()).create(key, value)

    async def update(self, key: str, value: bytes, revision: int) -> int | None:
        return await (await self._opened()).update(key, value, revision)

    async def put(self, key: str, value: bytes) -> int:
        return await (await self._opened()).put(key, value)

    async def delete(self, key: str, revision: int | None = None) -> bool:
        return await (await self._opened()).delete(key, revision)

    async def keys(self, prefix: str = "") -> list[str]:
        return await (await self._opened()).keys(prefix)
