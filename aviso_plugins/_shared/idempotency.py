"""Message ids (``Idempotency-Key``) remembered for a duplicate window, budgeted per writer.

A backend that de-duplicates re-sends itself (in-memory), or that checks re-sends against
what it saw (JetStream, a fast path per instance before the broker is asked), remembers each
id with the sequence it was stored under and a fingerprint of its notification
(:func:`~aviso_plugins.storage.notification_fingerprint`). Memory is
bounded twice:

- each writer (:class:`~aviso_plugins.types.Writer`) has its own budget per stream, so a
  writer sending more ids than that forgets its own oldest ones, never anyone else's;
- all ids together are bounded too (the number of writers is the client's to choose: any
  address may be one): beyond it the writer holding the most ids forgets its oldest, so a
  flooding writer pays for its flood and a quiet one keeps its ids.

An id forgotten before its window ended is an early eviction, reported through
:meth:`~aviso_plugins.types.BackendMetrics.message_ids_evicted_early`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from aviso_plugins.storage import Writer

WRITER_BUDGET = "writer_budget"
"""Early-eviction reason: the writer's own budget for the stream was full."""
TOTAL_BUDGET = "total_budget"
"""Early-eviction reason: all remembered ids together were at their bound."""
EVICTION_REASONS = (WRITER_BUDGET, TOTAL_BUDGET)


@dataclass(slots=True)
class RememberedId:
    """One message id: what the first notification sent with it was stored as."""

    sequence: int
    fingerprint: bytes
    expires: float
    """When the window ends, on the clock the caller passes (``time.monotonic()``)."""
    writer: Writer


class RememberedIds:
    """The message ids of a duplicate window: (stream, id) -> :class:`RememberedId`.

    Every operation is O(1) whatever the number of writers: writers are kept in levels by
    how many ids they hold, so the one holding the most is found without a search."""

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
        # A writer's ids on one stream (its budget there), and on all streams, oldest first.
        self._per_stream: dict[tuple[str, Writer], OrderedDict[tuple[str, str], None]] = {}
        self._per_writer: dict[Writer, OrderedDict[tuple[str, str], None]] = {}
        # Writers by the number of ids they hold, each level in the order they reached it;
        # ``_most`` is the highest level held (counts only move by one).
        self._levels: dict[int, dict[Writer, None]] = {}
        self._most = 0

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, stream: str, message_id: str, now: float) -> RememberedId | None:
        """The id as remembered on ``stream``, ``None`` once its window has passed."""
        self._expire(now)
        return self._ids.get((stream, message_id))

    def remember(
        self,
        stream: str,
        message_id: str,
        writer: Writer,
        sequence: int,
        fingerprint: bytes,
        now: float,
    ) -> None:
        """Remember an id ``writer`` just had stored, within the writer's budget and the total.

        Past the writer's budget on ``stream`` its own oldest id there is forgotten; past
        the total, the oldest id of the writer holding the most (this one when it is among
        them), so that a writer holding few ids never loses one to a flood."""
        self._expire(now)
        key = (stream, message_id)
        if key in self._ids:
            self._drop(key)
        bucket = self._per_stream.get((stream, writer))
        if bucket is not None and len(bucket) >= self.max_ids_per_writer:
            self._drop(next(iter(bucket)))
            self._evicted_early(WRITER_BUDGET, 1)
        elif len(self._ids) >= self.max_ids:
            holding = len(self._per_writer.get(writer, ()))
            loser = writer if holding == self._most else next(iter(self._levels[self._most]))
            self._drop(next(iter(self._per_writer[loser])))
            self._evicted_early(TOTAL_BUDGET, 1)
        self._ids[key] = RememberedId(sequence, fingerprint, now + self.window_seconds, writer)
        self._per_stream.setdefault((stream, writer), OrderedDict())[key] = None
        mine = self._per_writer.setdefault(writer, OrderedDict())
        mine[key] = None
        self._moved(writer, len(mine) - 1, len(mine))

    def _drop(self, key: tuple[str, str]) -> None:
        writer = self._ids.pop(key).writer
        bucket_key = (key[0], writer)
        bucket = self._per_stream[bucket_key]
        del bucket[key]
        if not bucket:
            del self._per_stream[bucket_key]
        mine = self._per_writer[writer]
        del mine[key]
        if not mine:
            del self._per_writer[writer]
        self._moved(writer, len(mine) + 1, len(mine))

    def _moved(self, writer: Writer, before: int, after: int) -> None:
        """``writer`` now holds ``after`` ids instead of ``before`` (one more or one less)."""
        if before:
            level = self._levels[before]
            del level[writer]
            if not level:
                del self._levels[before]
                if before == self._most:
                    # Its holders were only this writer, now one below.
                    self._most = after
        if after:
            self._levels.setdefault(after, {})[writer] = None
            self._most = max(self._most, after)

    def _expire(self, now: float) -> None:
        ids = self._ids
        while ids:
            key, first = next(iter(ids.items()))
            if first.expires > now:
                return
            self._drop(key)
