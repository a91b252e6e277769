"""Message ids (``Idempotency-Key``) remembered for a duplicate window, budgeted per writer.

A backend that de-duplicates re-sends itself (in-memory), or that checks re-sends against
what it saw (JetStream, best effort per instance), remembers each id with the sequence it
was stored under and a fingerprint of its notification. Memory is bounded twice:

- each writer (:class:`~aviso_plugins.types.Writer`) has its own budget per stream, so a
  writer sending more ids than that forgets its own oldest ones, never anyone else's;
- all ids together are bounded too (the number of writers is the client's to choose: any
  address may be one): beyond it the least recently active writer's oldest id goes first.

An id forgotten before its window ended is an early eviction, reported through
:meth:`~aviso_plugins.types.BackendMetrics.message_ids_evicted_early`.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aviso_plugins.types import ACTOR_METADATA, MESSAGE_ID_METADATA, Writer

WRITER_BUDGET = "writer_budget"
"""Early-eviction reason: the writer's own budget for the stream was full."""
TOTAL_BUDGET = "total_budget"
"""Early-eviction reason: all remembered ids together were at their bound."""
EVICTION_REASONS = (WRITER_BUDGET, TOTAL_BUDGET)

_NOT_COMPARED = frozenset((MESSAGE_ID_METADATA, ACTOR_METADATA))


def notification_fingerprint(topic: str, payload: str, metadata: Mapping[str, str]) -> bytes:
    """A digest of what a notification says: its topic, payload and metadata, without the
    message id itself and the publisher (the same notification re-sent by another caller
    is the same notification)."""
    digest = hashlib.blake2b(digest_size=16)
    parts = [topic, payload]
    for key in sorted(metadata):
        if key not in _NOT_COMPARED:
            parts += (key, metadata[key])
    for part in parts:
        data = part.encode()
        # Length-prefixed, so that no two different part lists hash the same text.
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.digest()


@dataclass(slots=True)
class RememberedId:
    """One message id: what the first notification sent with it was stored as."""

    sequence: int
    fingerprint: bytes
    expires: float
    """When the window ends, on the clock the caller passes (``time.monotonic()``)."""
    bucket: tuple[str, Writer]


class RememberedIds:
    """The message ids of a duplicate window: (stream, id) -> :class:`RememberedId`."""

    def __init__(
        self,
        window_seconds: float,
        max_ids: int,
        max_ids_per_writer: int,
        evicted_early: Callable[[str, int], None] = lambda reason, count: None,
    ) -> None:
        self.window_seconds = window_seconds
        self.max_ids = max(1, max_ids)
        self.max_ids_per_writer = max(1, min(max_ids_per_writer, self.max_ids))
        self._evicted_early = evicted_early
        # All ids, oldest first: the window is the same for all, so this is expiry order.
        self._ids: OrderedDict[tuple[str, str], RememberedId] = OrderedDict()
        # (stream, writer) -> its ids oldest first; the least recently active writer first.
        self._buckets: OrderedDict[tuple[str, Writer], OrderedDict[tuple[str, str], None]] = (
            OrderedDict()
        )

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def writers(self) -> int:
        """(stream, writer) pairs with at least one remembered id."""
        return len(self._buckets)

    def get(self, stream: str, message_id: str, now: float) -> RememberedId | None:
        """The id as remembered on ``stream``, ``None`` once its window has passed.

        A hit counts as activity of the writer who stored the id: a producer retrying keeps
        its ids ahead of idle writers' for the total bound."""
        self._expire(now)
        remembered = self._ids.get((stream, message_id))
        if remembered is not None:
            self._buckets.move_to_end(remembered.bucket)
        return remembered

    def remember(
        self,
        stream: str,
        message_id: str,
        writer: Writer,
        sequence: int,
        fingerprint: bytes,
        now: float,
    ) -> None:
        """Remember an id ``writer`` just had stored, within the writer's budget and the total."""
        self._expire(now)
        key = (stream, message_id)
        if key in self._ids:
            self._drop(key)
        bucket_key = (stream, writer)
        bucket = self._buckets.get(bucket_key)
        if bucket is None:
            bucket = self._buckets[bucket_key] = OrderedDict()
        else:
            self._buckets.move_to_end(bucket_key)
        if len(bucket) >= self.max_ids_per_writer:
            self._drop(next(iter(bucket)))
            self._evicted_early(WRITER_BUDGET, 1)
        elif len(self._ids) >= self.max_ids:
            # The least recently active writer (never this one: it was just moved last,
            # unless it is the only one) loses its oldest id.
            oldest = next(iter(self._buckets.values()))
            self._drop(next(iter(oldest)))
            self._evicted_early(TOTAL_BUDGET, 1)
        bucket = self._buckets.setdefault(bucket_key, OrderedDict())
        bucket[key] = None
        self._ids[key] = RememberedId(sequence, fingerprint, now + self.window_seconds, bucket_key)

    def _drop(self, key: tuple[str, str]) -> None:
        remembered = self._ids.pop(key)
        bucket = self._buckets[remembered.bucket]
        del bucket[key]
        if not bucket:
            del self._buckets[remembered.bucket]

    def _expire(self, now: float) -> None:
        ids = self._ids
        while ids:
            key, first = next(iter(ids.items()))
            if first.expires > now:
                return
            self._drop(key)
