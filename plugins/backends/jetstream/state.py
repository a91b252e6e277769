"""Shared state on JetStream: each bucket is a JetStream key-value bucket (nats-py's KeyValue).

A bucket named ``b`` is the KV bucket ``aviso_<b>`` (``_`` written ``__`` and ``=`` written
``_e``: KV bucket names allow neither ``=`` nor a clash with another escaped name). Reads go
to the stream's leader (no direct get from a replica), so a read after a compare-and-set on
any worker sees it. A TTL bucket is a KV bucket with that ``max_age``: an entry not written
for that long is removed by the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from nats.js import JetStreamContext, api
from nats.js.errors import (
    APIError,
    BadRequestError,
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from nats.js.kv import KeyValue

from aviso_plugins.state import SharedState, StateEntry, valid_key

_PREFIX = "aviso_"
_LISTING_IDLE = 2.0
"""Seconds after which the server deletes a finished key listing's consumer."""
_WRONG_LAST = (10071, 10164)
"""JetStream's error codes for a write whose expected last revision of the key was wrong."""


def bucket_name(bucket: str) -> str:
    """The KV bucket that holds the shared-state bucket ``bucket``."""
    if not valid_key(bucket) or "." in bucket:
        raise ValueError(f"invalid shared-state bucket name {bucket!r}")
    return _PREFIX + bucket.replace("_", "__").replace("=", "_e")


def _checked(key: str) -> str:
    if not valid_key(key):
        raise ValueError(f"invalid shared-state key {key!r}")
    return key


class KeyValueBuckets:
    """Opens KV buckets on the backend's current connection, once per connection (a new
    client after a lost one opens them again)."""

    def __init__(self, storage: str, replicas: int | None) -> None:
        self._storage = api.StorageType.MEMORY if storage == "memory" else api.StorageType.FILE
        self._replicas = replicas or 1
        self._js: JetStreamContext | None = None
        self._open: dict[str, KeyValue] = {}
        self._ttls: dict[str, float | None] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def use(self, js: JetStreamContext) -> None:
        """Open buckets on ``js`` from now on (the backend installed a new client)."""
        self._js = js
        self._open.clear()

    def state(
        self, bucket: str, ttl_seconds: float | None, require: Callable[[], JetStreamContext]
    ) -> KeyValueState:
        """The bucket as :class:`SharedState`; it is created on first use. ``require`` gives
        the current connection or raises when there is none."""
        name = bucket_name(bucket)
        self._ttls.setdefault(name, ttl_seconds)
        return KeyValueState(self, name, require)

    async def open(self, name: str, js: JetStreamContext) -> KeyValue:
        if self._js is not js:
            self.use(js)
        found = self._open.get(name)
        if found is not None:
            return found
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            found = self._open.get(name)
            if found is None:
                found = self._open[name] = await self._bind(name, js)
        return found

    async def _bind(self, name: str, js: JetStreamContext) -> KeyValue:
        try:
            return await js.key_value(name)
        except BucketNotFoundError:
            pass
        config = api.KeyValueConfig(
            bucket=name,
            history=1,
            ttl=self._ttls.get(name),
            storage=self._storage,
            replicas=self._replicas,
        )
        try:
            return await js.create_key_value(config)
        except BadRequestError:
            # Another worker created it meanwhile (with the same configuration: the first
            # use fixes it): bind to that one.
            return await js.key_value(name)


class KeyValueState(SharedState):
    """One bucket, opened lazily on the backend's current connection."""

    def __init__(
        self, buckets: KeyValueBuckets, name: str, require: Callable[[], JetStreamContext]
    ) -> None:
        self._buckets = buckets
        self._name = name
        self._require = require

    async def _kv(self) -> KeyValue:
        return await self._buckets.open(self._name, self._require())

    async def get(self, key: str) -> StateEntry | None:
        kv = await self._kv()
        try:
            entry = await kv.get(_checked(key))
        except KeyNotFoundError:  # never written, deleted (a KeyDeletedError) or expired
            return None
        return StateEntry(key, entry.value or b"", entry.revision or 0)

    async def create(self, key: str, value: bytes) -> int | None:
        kv = await self._kv()
        try:
            return await kv.create(_checked(key), value)
        except KeyWrongLastSequenceError:
            return None

    async def update(self, key: str, value: bytes, revision: int) -> int | None:
        if revision <= 0:
            return None  # revision 0 would mean "only if absent" to the server
        kv = await self._kv()
        try:
            return await kv.update(_checked(key), value, revision)
        except KeyWrongLastSequenceError:
            return None

    async def put(self, key: str, value: bytes) -> int:
        kv = await self._kv()
        return await kv.put(_checked(key), value)

    async def delete(self, key: str, revision: int | None = None) -> bool:
        # nats-py's delete writes a marker whether or not the key has an entry: the entry
        # is read first, and the marker written only over that revision.
        entry = await self.get(key)
        if entry is None or (revision is not None and entry.revision != revision):
            return False
        kv = await self._kv()
        try:
            return await kv.delete(key, last=entry.revision)
        except APIError as exc:
            if exc.err_code in _WRONG_LAST:  # written or deleted since the read
                return False
            raise

    async def keys(self, prefix: str = "") -> list[str]:
        kv = await self._kv()
        # Watch only the keys under the prefix's last complete segment (a server-side filter),
        # then keep those that start with the whole prefix.
        head, dot, _ = prefix.rpartition(".")
        pattern = f"{_checked(head)}.>" if dot else ">"
        # The watch's consumer outlives the watch until the server finds it inactive (nats-py
        # deletes none on stop): a short threshold keeps frequent listings from piling them up.
        watcher = await kv.watch(
            pattern, ignore_deletes=True, meta_only=True, inactive_threshold=_LISTING_IDLE
        )
        found: list[str] = []
        try:
            while True:
                entry = await watcher.updates(timeout=30)  # type: ignore[no-untyped-call]
                if entry is None:
                    break
                if entry.key.startswith(prefix):
                    found.append(entry.key)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
        return sorted(found)
